"""The worker client's typed errors and answers, without a network."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys

import pytest

from voice_relay_agent import client as c

KEY = "va_" + "ab" * 32
#: A session token's shape (these tests never reach a relay that checks it).
TOKEN = "header.payload.signature"


def test_every_code_has_its_error_type() -> None:
    for code in c.ErrorCode:
        err = c.error_from(code.value, "A sentence.", status=409)
        assert type(err) is not c.WorkerError
        assert err.code == code
        assert err.message == "A sentence."
        assert err.status == 409
        assert err.to_json() == {"code": code.value, "message": "A sentence."}
    newer = c.error_from("brand_new_code", "Something new.")
    assert type(newer) is c.WorkerError and newer.code == "brand_new_code"
    assert isinstance(c.error_from("tab_offline", "x"), c.TabOffline)
    assert isinstance(c.error_from("timeout", "x"), c.CallTimeout)
    assert isinstance(c.error_from("tool_not_allowed", "x"), c.ToolNotAllowed)


def test_the_client_needs_no_livekit() -> None:
    """The client, its errors and the key checks import with ``livekit`` unavailable (the
    package's core dependency is httpx; LiveKit is the ``livekit`` extra, for the tools)."""
    probe = (
        "import sys; sys.modules['livekit'] = None\n"
        "from voice_relay_agent import client, errors, keys\n"
        f"assert keys.key_from_metadata('{{\"apiKey\": \"{KEY}\"}}') == '{KEY}'\n"
        "assert client.TabOffline is errors.TabOffline\n"
        "try:\n    import voice_relay_agent.tools\n"
        "except ImportError:\n    print('tools need livekit')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env={"PYTHONPATH": ":".join(p for p in sys.path if p)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "tools need livekit"


def test_call_answers() -> None:
    ok = c.parse_call_body(
        "draw_card",
        {"ok": True, "result": {"cardId": "x"}, "mode": "spread", "modeChanged": False},
    )
    assert ok.ok and ok.result == {"cardId": "x"} and ok.error is None and ok.mode == "spread"
    failed = c.parse_call_body(
        "OpenPopover",
        {
            "ok": False,
            "error": {"code": "tab_offline", "message": "The user's tab is offline."},
            "mode": "default",
            "modeChanged": False,
        },
    )
    assert not failed.ok and isinstance(failed.error, c.TabOffline)
    assert failed.to_json()["error"] == {
        "code": "tab_offline",
        "message": "The user's tab is offline.",
    }
    changed = c.parse_call_body(
        "enter_spread",
        {"ok": True, "result": {"mode": "spread"}, "mode": "spread", "modeChanged": True},
    )
    assert changed.mode_changed
    with pytest.raises(c.Unavailable):
        c.parse_call_body("x", "<html>")


def test_error_answers() -> None:
    body = {"ok": False, "error": {"code": "unauthorized", "message": "wrong secret"}}
    assert isinstance(c.parse_error_body(401, body), c.Unauthorized)
    assert isinstance(c.parse_error_body(400, None), c.InvalidRequest)
    assert isinstance(c.parse_error_body(502, "bad gateway"), c.Unavailable)


def test_offer() -> None:
    offer = c.ToolOffer.from_json(
        {
            "mode": "default",
            "instructions": "Be brief.",
            "tools": [
                {
                    "name": "show_thing",
                    "description": "Shows a thing.",
                    "parameters": {"type": "object", "properties": {}},
                    "outputSchema": None,
                    "awaitResult": True,
                    "timeoutMs": 2500,
                }
            ],
        }
    )
    spec = offer.tool("show_thing")
    assert spec is not None and spec.await_result and spec.timeout_ms == 2500
    assert offer.tool("nope") is None
    with pytest.raises(ValueError):
        c.ToolOffer.from_json({"mode": "x"})


async def test_timeouts_follow_the_tool() -> None:
    async with c.WorkerClient("http://127.0.0.1:9", TOKEN, KEY, margin_s=2.0) as wc:
        spec = c.ToolSpec("t", "", {}, None, True, 120_000)
        assert wc.call_timeout_s(spec) == 122.0
        assert wc.call_timeout_s(None) == c.DEFAULT_CALL_TIMEOUT_MS / 1000 + 2.0
        assert KEY not in repr(wc)


def test_bad_key_or_token_refused() -> None:
    with pytest.raises(ValueError):
        c.WorkerClient("http://127.0.0.1:9", TOKEN, KEY.upper())
    with pytest.raises(ValueError):
        c.WorkerClient("http://127.0.0.1:9", "", KEY)
    with pytest.raises(ValueError):
        c.WorkerClient("http://127.0.0.1:9", "a-server-secret-not-a-token", KEY)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


async def test_unreachable_worker_is_unavailable() -> None:
    async with c.WorkerClient(f"http://127.0.0.1:{closed_port()}", TOKEN, KEY) as wc:
        async with asyncio.timeout(10):
            with pytest.raises(c.Unavailable) as e:
                await wc.list_tools()
            assert "cannot be reached" in e.value.message
            with pytest.raises(c.Unavailable):
                await wc.call_tool("OpenPopover", {})
