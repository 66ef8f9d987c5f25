"""Against the real relay and agent worker binaries (started on free ports)."""

from __future__ import annotations

import asyncio
import logging
import urllib.request
from typing import Any

import pytest
from livekit.agents import AgentSession, RunResult, llm
from voice_relay_agent import client as c
from voice_relay_agent.agent import VoiceRelayAgent
from voice_relay_agent.tools import BASE_INSTRUCTIONS, UiTools

from conftest import RELAY_DEFAULT_TIMEOUT_MS, Stack
from scripted_agent import ScriptedLLM, Step, TextStep, ToolStep


def worker(stack: Stack, key: str, secret: str | None = None) -> c.WorkerClient:
    return c.WorkerClient(stack.worker.url, secret or stack.token_for(key), key)


async def test_offer_of_the_default_mode(stack: Stack) -> None:
    async with worker(stack, stack.issue_key()) as wc, asyncio.timeout(10):
        offer = await wc.list_tools()
        ui = UiTools(wc)
        built = ui.build(offer)
    assert offer.mode == "default"
    names = [t.name for t in offer.tools]
    assert "OpenPopover" in names and "enter_spread" in names
    assert "draw_card" not in names
    for tool, spec in zip(built, offer.tools, strict=True):
        assert isinstance(tool, llm.RawFunctionTool)
        assert tool.info.raw_schema["parameters"] == spec.parameters
        assert tool.info.raw_schema["description"] == spec.description
        assert spec.parameters.get("type") == "object"


async def test_a_forged_token_or_another_keys_token_is_refused(stack: Stack) -> None:
    key = stack.issue_key()
    async with asyncio.timeout(10):
        async with worker(stack, key, "forged.token.value") as wc:
            with pytest.raises(c.Unauthorized):
                await wc.list_tools()
            with pytest.raises(c.Unauthorized):
                await wc.call_tool("OpenPopover", {})
        other = stack.token_for(stack.issue_key())
        async with worker(stack, key, other) as wc:
            with pytest.raises(c.Forbidden):
                await wc.list_tools()
            with pytest.raises(c.Forbidden):
                await wc.call_tool("OpenPopover", {})


async def test_a_key_revoked_since_its_token_is_unknown(stack: Stack) -> None:
    key = stack.issue_key()
    token = stack.token_for(key)
    revoke = urllib.request.Request(
        f"{stack.relay.url}/api/voice-agent/keys/{key}", method="DELETE"
    )
    revoke.add_header("Authorization", f"Bearer {stack.worker_secret}")
    await asyncio.to_thread(lambda: urllib.request.urlopen(revoke, timeout=10).close())
    async with worker(stack, key, token) as wc, asyncio.timeout(10):
        outcome = await wc.call_tool("OpenPopover", {"message": "hi"})
    assert not outcome.ok
    assert isinstance(outcome.error, c.UnknownKey)
    assert outcome.error.message.endswith(")") and len(outcome.error.message) > 20
    assert outcome.mode == "default" and not outcome.mode_changed


async def test_mode_changes_and_worker_side_validation(stack: Stack) -> None:
    async with worker(stack, stack.issue_key()) as wc, asyncio.timeout(10):
        offer = await wc.list_tools()
        enter = offer.tool("enter_spread")
        assert enter is not None and enter.parameters.get("properties") == {}
        changed = await wc.call_tool("enter_spread", {}, spec=enter)
        assert changed.ok and changed.mode_changed and changed.mode == "spread"
        assert changed.result["mode"] == "spread" and changed.result["instructions"]
        spread = await wc.list_tools()
        draw = spread.tool("draw_card")
        assert spread.mode == "spread" and draw is not None
        assert draw.await_result and draw.timeout_ms is not None
        assert wc.call_timeout_s(draw) > draw.timeout_ms / 1000
        bad = await wc.call_tool("draw_card", {}, spec=draw)
        assert isinstance(bad.error, c.InvalidArguments)
        refused = await wc.call_tool("enter_followup", {})
        assert isinstance(refused.error, c.ToolNotAllowed | c.UnknownTool)
        unknown = await wc.call_tool("no_such_tool", {})
        assert isinstance(unknown.error, c.UnknownTool | c.ToolNotAllowed)


async def test_text_session_speaks_failures_and_follows_modes(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    """An AgentSession (text only) with the scripted LLM, against the real worker.

    The key was issued but no tab ever binds it: the popover fails with tab_offline after
    the relay's timeout, and that sentence is the tool output the model reads. Then the
    mode changes, and in the same reply the model already has draw_card (the worker
    refuses its empty arguments, which shows the call reached it).
    """
    caplog.set_level(logging.DEBUG)
    key = stack.issue_key()
    outcomes: list[c.CallOutcome] = []
    script: list[Step] = [
        ToolStep("OpenPopover", {"message": "Hello from the agent"}),
        ToolStep("enter_spread", {}),
        ToolStep("draw_card", {}),
        TextStep(lambda _ctx: "Done."),
    ]
    async with worker(stack, key) as wc:
        ui = UiTools(wc, on_tool=outcomes.append)
        offer = await ui.refresh()
        agent = VoiceRelayAgent(ui, offer)
        async with AgentSession[Any](llm=ScriptedLLM(script), max_tool_steps=6) as session:
            await session.start(agent)
            async with asyncio.timeout(RELAY_DEFAULT_TIMEOUT_MS / 1000 + 20):
                result: RunResult[Any] = await session.run(user_input="Show me something.")

    outputs = [ev.item for ev in result.events if isinstance(ev.item, llm.FunctionCallOutput)]
    assert [o.name for o in outputs] == ["OpenPopover", "enter_spread", "draw_card"]
    popover, enter, draw = outputs
    assert popover.is_error
    assert outcomes[0].error is not None and outcomes[0].error.code == c.ErrorCode.TAB_OFFLINE
    assert popover.output == outcomes[0].error.message
    assert not enter.is_error and '"spread"' in enter.output
    assert draw.is_error and "Unknown function" not in draw.output
    assert outcomes[2].error is not None
    assert outcomes[2].error.code == c.ErrorCode.INVALID_ARGUMENTS
    assert ui.mode == "spread"
    assert "draw_card" in ui.toolset.names() and "OpenPopover" not in ui.toolset.names()
    instructions = agent.instructions
    assert isinstance(instructions, str) and instructions.startswith(BASE_INSTRUCTIONS)
    assert ui.offer.instructions in instructions
    messages = [ev.item for ev in result.events if isinstance(ev.item, llm.ChatMessage)]
    assert messages and messages[-1].text_content == "Done."
    assert key not in caplog.text


async def test_a_retry_with_the_same_idempotency_key_gets_the_first_outcome(stack: Stack) -> None:
    """The worker passes the caller's Idempotency-Key to the relay: the second call with the
    same key is the first call's outcome replayed at once, not a new call that waits again."""
    key = stack.issue_key()
    async with worker(stack, key) as wc, asyncio.timeout(20):
        loop = asyncio.get_running_loop()
        started = loop.time()
        idem = "py-retry-1"
        first = await wc.call_tool("OpenPopover", {"message": "once"}, idempotency_key=idem)
        first_s = loop.time() - started
        started = loop.time()
        again = await wc.call_tool("OpenPopover", {"message": "once"}, idempotency_key=idem)
        again_s = loop.time() - started
        other = await wc.call_tool("OpenPopover", {"message": "twice"}, idempotency_key=idem)
    # No tab ever binds the key: the first call waits out the relay's timeout for it.
    assert isinstance(first.error, c.TabOffline)
    assert first_s >= RELAY_DEFAULT_TIMEOUT_MS / 1000 * 0.9
    assert isinstance(again.error, c.TabOffline) and again.error.message == first.error.message
    assert again_s < first_s / 2, (first_s, again_s)
    # The same key for other arguments is refused, not run.
    assert isinstance(other.error, c.InvalidRequest), other
