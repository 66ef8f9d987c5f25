"""What the MCP endpoint tests share: a browser tab played by a Node process with the official
``socket.io-client`` (``e2e/harness/tab-process.mjs``), and MCP clients with the worker's headers.
Every wait is bounded."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

REPO = Path(__file__).resolve().parents[2]
TAB_SCRIPT = REPO / "e2e/harness/tab-process.mjs"
NODE = os.environ.get("NODE", "node")
WAIT_S = 10.0

#: What the tab answers to every draw_card (tab-process.mjs).
CARD = {"cardId": "the-star", "cardName": "The Star", "reversed": False}


def fingerprint(key: str) -> str:
    """How the worker names a key in its logs and in ``GET /sessions``."""
    return hashlib.sha256(key.encode()).hexdigest()[:8]


class Tab:
    """One browser tab bound to the relay; records every event it prints."""

    def __init__(self, proc: asyncio.subprocess.Process, api_key: str) -> None:
        self.proc = proc
        self.api_key = api_key
        self.events: list[dict[str, Any]] = []

    @classmethod
    async def open(cls, relay_url: str, *, client: bool = False) -> Tab:
        """A tab of ``tab-process.mjs``; with ``client``, the browser client itself
        (``--client``: it declares its tools and reports its handler's time)."""
        proc = await asyncio.create_subprocess_exec(
            NODE,
            str(TAB_SCRIPT),
            relay_url,
            *(["--client"] if client else []),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert proc.stdout is not None
        first = json.loads(await asyncio.wait_for(proc.stdout.readline(), WAIT_S))
        tab = cls(proc, first["apiKey"])
        await tab.next("connect")
        return tab

    async def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = await self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the tab process ended")
        event: dict[str, Any] = json.loads(line)
        self.events.append(event)
        return event

    async def next(
        self,
        event: str,
        pred: Callable[[dict[str, Any]], bool] = lambda _e: True,
        within_s: float = WAIT_S,
    ) -> dict[str, Any]:
        """The first event named ``event`` matching ``pred`` not returned before."""

        async def find() -> dict[str, Any]:
            while True:
                for e in self.events:
                    if not e.get("_taken") and e.get("event") == event and pred(e):
                        e["_taken"] = True
                        return e
                await self._read()

        return await asyncio.wait_for(find(), within_s)

    async def declare(
        self, tools: list[str], page_tools: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        """Tells the relay which tools this tab handles now (``voice-agent:handles``); the
        relay's acknowledgement."""
        payload: dict[str, Any] = {"tools": tools}
        if page_tools is not None:
            payload["pageTools"] = page_tools
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps({"handles": payload}) + "\n").encode())
        await self.proc.stdin.drain()
        ack: dict[str, Any] = (await self.next("handles-ack"))["ack"]
        return ack

    def tool_events(self) -> list[dict[str, Any]]:
        return [
            e
            for e in self.events
            if e.get("event", "").startswith("voice-agent:")
            and e["event"] not in ("voice-agent:cancel", "voice-agent:revoked", "voice-agent:mode")
        ]

    async def close(self) -> None:
        if self.proc.returncode is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                await asyncio.wait_for(self.proc.wait(), 5)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


def headers(secret: str | None, key: str | None) -> dict[str, str]:
    h: dict[str, str] = {}
    if secret is not None:
        h["Authorization"] = f"Bearer {secret}"
    if key is not None:
        h["X-Voice-Agent-Key"] = key
    return h


def mcp_client(
    url: str,
    secret: str | None,
    key: str | None,
    *,
    mode: str = "legacy",
    message_handler: Any = None,
) -> Client:
    """The PyPI ``mcp`` client on Streamable HTTP with the worker's two headers. ``mode``:
    ``legacy`` (the 2025-11-25 handshake, a session) or ``2026-07-28`` (stateless)."""
    http = httpx2.AsyncClient(headers=headers(secret, key), timeout=httpx2.Timeout(30.0))
    return Client(
        streamable_http_client(url, http_client=http),
        mode=mode,
        cache=None,
        read_timeout_seconds=30.0,
        message_handler=message_handler,
    )
