"""Fixtures that run the real relay and agent worker binaries on free ports, for the worker's
black-box tests (MCP, catalogs, the agent HTTP API) written with the Python agent package."""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from mcp_support import Tab

REPO = Path(__file__).resolve().parents[2]
RELAY_BIN = Path(os.environ.get("RELAY_BIN", REPO / "target/debug/relay"))
WORKER_BIN = Path(os.environ.get("WORKER_BIN", REPO / "target/debug/agent-worker"))
START_TIMEOUT_S = 15.0

#: The relay's timeout for calls that name none: short, so a key without a tab fails fast.
RELAY_DEFAULT_TIMEOUT_MS = 1500


@dataclass
class Server:
    name: str
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        return self.log.read_text(errors="replace")


@dataclass
class Stack:
    """A relay and a worker next to it, and what their logs must never show."""

    relay: Server
    worker: Server
    worker_secret: str
    operator_secret: str
    livekit_secret: str
    secrets_seen: set[str] = field(default_factory=set)
    tokens: dict[str, str] = field(default_factory=dict)

    def mint(self, key: str, **extra: object) -> tuple[int, dict[str, object]]:
        """``POST /api/voice-agent/sessions`` for ``key`` with the worker's credential."""
        request = urllib.request.Request(
            self.relay.url + "/api/voice-agent/sessions",
            data=json.dumps({"apiKey": key, **extra}).encode(),
            method="POST",
        )
        request.add_header("Content-Type", "application/json")
        request.add_header("Authorization", f"Bearer {self.worker_secret}")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                body: dict[str, object] = json.load(response)
                status: int = response.status
        except urllib.error.HTTPError as e:
            return e.code, json.load(e)
        token = body.get("token")
        if isinstance(token, str):
            self.secrets_seen.add(token)
        return status, body

    def token_for(self, key: str) -> str:
        """A session token for ``key`` alone (what an agent holds), minted once."""
        if key not in self.tokens:
            status, body = self.mint(key)
            assert status == 200, body
            token = body["token"]
            assert isinstance(token, str)
            self.tokens[key] = token
        return self.tokens[key]

    def agent(self, key: str) -> tuple[str, str]:
        """What an agent of ``key`` presents: its session token and the key."""
        return self.token_for(key), key

    def issue_key(self) -> str:
        """A key the relay issued (``POST /token``) whose tab never connects."""
        request = urllib.request.Request(self.relay.url + "/token", data=b"{}", method="POST")
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=10) as response:
            body = json.load(response)
        key: str = body["apiKey"]
        self.secrets_seen.update((key, body["token"]))
        return key

    def stranger_key(self) -> str:
        key = "va_" + secrets.token_hex(32)
        self.secrets_seen.add(key)
        return key


def launch(name: str, args: list[str], env: dict[str, str], log: Path) -> Server:
    out = log.open("wb")
    proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT)
    out.close()
    banner = re.compile(rf"{re.escape(name)} listening on (http://\d+\.\d+\.\d+\.\d+:\d+)")
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        match = banner.search(re.sub(r"\x1b\[[0-9;]*m", "", log.read_text(errors="replace")))
        if match:
            return Server(name, proc, match.group(1), log)
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}; see {log}")
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"{name} did not start within {START_TIMEOUT_S} s; see {log}")


@dataclass
class WorkerFactory:
    """Starts more workers beside the stack's, against its relay, with their own settings (a
    catalog the test wrote, page tools on or off); stops them all at the end."""

    stack: Stack
    logs: Path
    started: list[Server] = field(default_factory=list)

    def start(self, env: dict[str, str]) -> Server:
        base = {
            "PATH": os.environ.get("PATH", ""),
            "RUST_LOG": "debug",
            "LIVEKIT_API_KEY": "devkey",
            "LIVEKIT_API_SECRET": self.stack.livekit_secret,
            "RELAY_WORKER_SECRET": self.stack.worker_secret,
            "RELAY_OPERATOR_SECRET": self.stack.operator_secret,
            "WORKER_ADDR": "127.0.0.1:0",
            "RELAY_URL": self.stack.relay.url,
        }
        n = len(self.started) + 1
        server = launch(
            "agent-worker",
            [str(WORKER_BIN), "serve"],
            {**base, **env},
            self.logs / f"python-worker-{os.getpid()}-extra-{n}.log",
        )
        self.started.append(server)
        return server


RMCP_BELOW_WARN = re.compile(
    r"^\S+\s+(?:TRACE|DEBUG|INFO) [^\n]*?\brmcp(?:::\w+)*: "
    r'|"level":"(?:TRACE|DEBUG|INFO)"[^\n]*"target":"rmcp',
    re.M,
)


def assert_plain_log(name: str, text: str) -> None:
    """A log file is plain text (no terminal colour codes) and holds no rmcp line below warn
    (its Debug dumps of whole MCP messages)."""
    assert "\x1b[" not in text, f"the {name} log holds ANSI escape codes"
    found = RMCP_BELOW_WARN.search(text)
    shown = found.group(0) if found else ""
    assert found is None, f"the {name} log holds rmcp's own lines below warn: {shown}"


@pytest.fixture
def workers(stack: Stack, tmp_path: Path) -> Iterator[WorkerFactory]:
    logs = Path(os.environ.get("TEST_LOG_DIR") or tmp_path)
    factory = WorkerFactory(stack, logs)
    try:
        yield factory
    finally:
        for server in factory.started:
            text = server.stop()
            assert_plain_log(server.name, text)
            for secret in stack.secrets_seen:
                assert secret not in text, "a worker log holds a whole key, token or secret"


def start_stack(
    logs: Path,
    label: str,
    env: dict[str, str] | None = None,
    worker_env: dict[str, str] | None = None,
) -> Stack:
    """A relay and a worker on free ports with fresh secrets, logging to ``logs`` under
    ``label``; ``env`` goes to both, ``worker_env`` to the worker alone. The caller stops
    them."""
    if not RELAY_BIN.exists() or not WORKER_BIN.exists():
        pytest.fail(f"build the binaries first (cargo build --bins): {RELAY_BIN}, {WORKER_BIN}")
    worker_secret = "ws-" + secrets.token_hex(24)
    operator_secret = "os-" + secrets.token_hex(24)
    livekit_secret = "lk-" + secrets.token_hex(24)
    seed = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")
    base = {
        "PATH": os.environ.get("PATH", ""),
        "RUST_LOG": "debug",
        "LIVEKIT_API_KEY": "devkey",
        "LIVEKIT_API_SECRET": livekit_secret,
        "RELAY_WORKER_SECRET": worker_secret,
        "RELAY_OPERATOR_SECRET": operator_secret,
        **(env or {}),
    }
    pid = os.getpid()
    relay = launch(
        "relay",
        [str(RELAY_BIN)],
        {
            **base,
            "RELAY_ADDR": "127.0.0.1:0",
            "RELAY_SESSION_KEYS": f"k1:{seed}",
            "LIVEKIT_URL": "ws://127.0.0.1:7880",
            "RELAY_DEFAULT_TIMEOUT_MS": str(RELAY_DEFAULT_TIMEOUT_MS),
            # Tabs here take their tokens without a credential (the demo's mode).
            "RELAY_TOKEN_MODE": "open",
        },
        logs / f"{label}-relay-{pid}.log",
    )
    try:
        worker = launch(
            "agent-worker",
            [str(WORKER_BIN), "serve"],
            {**base, "WORKER_ADDR": "127.0.0.1:0", "RELAY_URL": relay.url, **(worker_env or {})},
            logs / f"{label}-worker-{pid}.log",
        )
    except BaseException:
        relay.stop()
        raise
    return Stack(
        relay,
        worker,
        worker_secret,
        operator_secret,
        livekit_secret,
        {worker_secret, operator_secret, livekit_secret, seed},
    )


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    logs = Path(os.environ.get("TEST_LOG_DIR") or tmp_path_factory.mktemp("logs"))
    logs.mkdir(parents=True, exist_ok=True)
    stack = start_stack(logs, "python")
    relay, worker = stack.relay, stack.worker
    try:
        yield stack
    finally:
        texts = {s.name: s.stop() for s in (worker, relay)}
        for name, text in texts.items():
            assert_plain_log(name, text)
            for secret in stack.secrets_seen:
                assert secret not in text, f"the {name} log holds a whole key, token or secret"


@pytest.fixture
async def tab(stack: Stack) -> AsyncIterator[Tab]:
    """A browser tab (the official socket.io-client protocol) bound to a fresh key of the relay."""
    from mcp_support import Tab

    t = await Tab.open(stack.relay.url)
    stack.secrets_seen.add(t.api_key)
    try:
        yield t
    finally:
        await t.close()
