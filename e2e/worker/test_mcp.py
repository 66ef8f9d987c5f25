"""The worker's MCP endpoint (``/mcp``) against the real relay and worker binaries, with the tab
played by the official ``socket.io-client`` and the agent side by real MCP clients: PyPI ``mcp``
2.x (both protocol revisions: the 2025-11-25 handshake with a session, and stateless
2026-07-28) and LiveKit Agents' own MCP support in an ``AgentSession``."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import Any

import httpx2
import mcp_types as types
import pytest
from livekit.agents import (
    DEFAULT_API_CONNECT_OPTIONS,
    NOT_GIVEN,
    Agent,
    AgentSession,
    APIConnectOptions,
    NotGivenOr,
    llm,
    mcp,
)
from livekit.agents.voice.run_result import RunResult
from mcp.shared.exceptions import MCPError

from conftest import Stack
from mcp_support import CARD, Tab, fingerprint, headers, mcp_client

MODES = ["legacy", "2026-07-28"]
# The default catalog's first mode, in the catalog's order, then its moves.
DEFAULT_TOOLS = [
    "OpenPopover",
    "pin_note",
    "present_to_cassette",
    "loading_status",
    "enter_intent",
    "enter_spread",
]
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 7,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def mcp_url(stack: Stack) -> str:
    return stack.worker.url + "/mcp"


def raised_mcp_error(exc: BaseException) -> MCPError:
    """The MCPError in ``exc``, which the client may raise inside exception groups."""
    if isinstance(exc, MCPError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            try:
                return raised_mcp_error(inner)
            except AssertionError:
                continue
    raise AssertionError(f"no MCPError in {exc!r}")


def text_of(result: types.CallToolResult) -> str:
    return "".join(getattr(part, "text", "") for part in result.content)


@pytest.mark.parametrize("mode", MODES)
async def test_tools_follow_the_sessions_mode(stack: Stack, tab: Tab, mode: str) -> None:
    async with mcp_client(mcp_url(stack), *stack.agent(tab.api_key), mode=mode) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert list(listed) == DEFAULT_TOOLS
        assert listed["OpenPopover"].input_schema["properties"]["message"]["maxLength"] == 280
        assert listed["enter_spread"].input_schema["additionalProperties"] is False

        moved = await client.call_tool("enter_spread", {})
        assert not moved.is_error
        assert json.loads(text_of(moved))["mode"] == "spread"
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert list(listed) == ["draw_card", "enter_reading"]
        draw = listed["draw_card"]
        assert draw.input_schema["required"] == ["positionLabel", "promptRole"]
        assert draw.output_schema is not None
        assert draw.output_schema["required"] == ["cardId", "cardName", "reversed"]

        await client.call_tool("enter_reading", {})
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert list(listed) == ["show_card", "enter_followup"]
        assert listed["show_card"].output_schema is not None


@pytest.mark.parametrize("mode", MODES)
async def test_open_popover_reaches_the_tab(stack: Stack, tab: Tab, mode: str) -> None:
    async with mcp_client(mcp_url(stack), *stack.agent(tab.api_key), mode=mode) as client:
        result = await client.call_tool("OpenPopover", {"message": "Hello from MCP"})
        assert not result.is_error
        assert json.loads(text_of(result)) == {"success": True}
        event = await tab.next("voice-agent:OpenPopover")
        assert event["params"] == {"message": "Hello from MCP"}
        assert event["meta"]["expectsResult"] is False


@pytest.mark.parametrize("mode", MODES)
async def test_draw_card_waits_for_the_tab_and_returns_structured_content(
    stack: Stack, tab: Tab, mode: str
) -> None:
    async with mcp_client(mcp_url(stack), *stack.agent(tab.api_key), mode=mode) as client:
        await client.list_tools()
        await client.call_tool("enter_spread", {})
        await client.list_tools()
        result = await client.call_tool(
            "draw_card", {"positionLabel": "Past", "promptRole": "What led here"}
        )
        assert not result.is_error, text_of(result)
        assert result.structured_content == CARD
        assert json.loads(text_of(result)) == CARD
        event = await tab.next("voice-agent:draw_card")
        assert event["params"] == {"positionLabel": "Past", "promptRole": "What led here"}
        assert event["meta"]["expectsResult"] is True
        assert event["meta"]["deadlineMs"] > 100_000


async def test_invalid_arguments_are_an_error_result_and_nothing_reaches_the_tab(
    stack: Stack, tab: Tab
) -> None:
    async with mcp_client(mcp_url(stack), *stack.agent(tab.api_key)) as client:
        bad = await client.call_tool("OpenPopover", {"message": 5, "extra": True})
        assert bad.is_error
        text = text_of(bad)
        assert text.startswith("The request had invalid arguments."), text
        assert "invalid_arguments" in text
        assert "\n" not in text
        # The next thing the tab hears is the valid call after it: the invalid one never left.
        await client.call_tool("OpenPopover", {"message": "valid"})
        first = await tab.next("voice-agent:OpenPopover")
        assert first["params"] == {"message": "valid"}
        assert len(tab.tool_events()) == 1

        # A tool of another mode is refused the same way, as a sentence.
        refused = await client.call_tool("draw_card", {"positionLabel": "P", "promptRole": "r"})
        assert refused.is_error
        assert "not available in this mode" in text_of(refused)


async def test_relay_failures_are_error_results_a_model_can_say(stack: Stack) -> None:
    # A key the relay issued whose tab never connects: tab_offline after the relay's timeout.
    key = stack.issue_key()
    async with mcp_client(mcp_url(stack), stack.token_for(key), key) as client:
        result = await client.call_tool("OpenPopover", {"message": "nobody there"})
        assert result.is_error
        assert text_of(result).startswith("The user's screen is not connected right now")
        assert "tab_offline" in text_of(result)


@pytest.mark.parametrize("mode", MODES)
async def test_an_unknown_tool_is_invalid_params(stack: Stack, tab: Tab, mode: str) -> None:
    async with mcp_client(mcp_url(stack), *stack.agent(tab.api_key), mode=mode) as client:
        await client.list_tools()
        for name in ("no_such_tool", "enter_nowhere"):
            with pytest.raises(MCPError) as raised:
                await client.call_tool(name, {})
            assert raised.value.error.code == types.INVALID_PARAMS
            assert name in raised.value.error.message


@pytest.mark.parametrize(
    "auth", [None, "Bearer not-a-session-token-at-all", "Bearer x.y.z", "Basic Zm9vOmJhcg=="]
)
async def test_a_missing_or_wrong_token_is_401_even_for_initialize(
    stack: Stack, tab: Tab, auth: str | None
) -> None:
    h = {**ACCEPT, "X-Voice-Agent-Key": tab.api_key}
    if auth is not None:
        h["Authorization"] = auth
        stack.secrets_seen.add(auth.split(" ", 1)[1])
    async with httpx2.AsyncClient(timeout=10) as http:
        for method in ("POST", "GET", "DELETE"):
            response = await http.request(method, mcp_url(stack), headers=h, json=INITIALIZE)
            assert response.status_code == 401, method
            assert response.headers["www-authenticate"] == "Bearer"
            body = response.json()
            assert body["error"]["code"] == -32600
            assert "session token" in body["error"]["message"]
            if method == "POST":
                assert body["id"] == 7
    with pytest.raises(BaseException) as raised:
        async with mcp_client(mcp_url(stack), auth and "not-a-session-token-at-all", tab.api_key):
            pass
    assert "session token" in raised_mcp_error(raised.value).error.message


@pytest.mark.parametrize(
    "key",
    ["va_short", "VA_" + "a" * 64, "va_" + "A" * 64, "sk_" + "0" * 64],
)
async def test_a_malformed_key_header_is_a_clear_400(stack: Stack, key: str) -> None:
    # A good token (for a key the worker follows no session of), a malformed header.
    token = stack.token_for(stack.issue_key())
    h = {**ACCEPT, **headers(token, key)}
    async with httpx2.AsyncClient(timeout=10) as http:
        response = await http.post(mcp_url(stack), headers=h, json=INITIALIZE)
    assert response.status_code == 400
    body = response.json()
    assert body["id"] == 7
    assert body["error"]["code"] == -32600
    assert "X-Voice-Agent-Key" in body["error"]["message"]
    with pytest.raises(BaseException) as raised:
        async with mcp_client(mcp_url(stack), token, key):
            pass
    assert "X-Voice-Agent-Key" in raised_mcp_error(raised.value).error.message


@pytest.mark.parametrize("key", [None, ""])
async def test_without_the_key_header_a_key_the_worker_follows_no_session_of_is_unknown(
    stack: Stack, key: str | None
) -> None:
    # The token names its key by digest only; the worker learns the key from a session it
    # follows (LiveKit's webhook, an earlier request), and this key has none.
    token = stack.token_for(stack.issue_key())
    h = {**ACCEPT, **headers(token, key)}
    async with httpx2.AsyncClient(timeout=10) as http:
        response = await http.post(mcp_url(stack), headers=h, json=INITIALIZE)
    assert response.status_code == 404
    assert "X-Voice-Agent-Key" in response.json()["error"]["message"]


async def test_host_and_origin_are_checked(stack: Stack, tab: Tab) -> None:
    h = {**ACCEPT, **headers(*stack.agent(tab.api_key))}
    async with httpx2.AsyncClient(timeout=10) as http:
        foreign_host = await http.post(
            mcp_url(stack), headers={**h, "Host": "evil.example"}, json=INITIALIZE
        )
        assert foreign_host.status_code == 403
        browser = await http.post(
            mcp_url(stack), headers={**h, "Origin": "http://evil.example"}, json=INITIALIZE
        )
        assert browser.status_code == 403
        fine = await http.post(mcp_url(stack), headers=h, json=INITIALIZE)
        assert fine.status_code == 200


@pytest.mark.parametrize("mode", MODES)
async def test_a_cancelled_call_is_cancelled_at_the_tab(stack: Stack, tab: Tab, mode: str) -> None:
    async with mcp_client(mcp_url(stack), *stack.agent(tab.api_key), mode=mode) as client:
        await client.list_tools()
        await client.call_tool("enter_spread", {})
        await client.list_tools()
        # The tab leaves a draw_card for "Hold" unanswered, like a user who has not picked yet.
        pending = asyncio.create_task(
            client.call_tool("draw_card", {"positionLabel": "Hold", "promptRole": "waiting"})
        )
        delivered = await tab.next("voice-agent:draw_card")
        pending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pending
        cancel = await tab.next("voice-agent:cancel")
        assert cancel["callId"] == delivered["meta"]["callId"]
        # The session goes on: the next pick is answered.
        again = await client.call_tool("draw_card", {"positionLabel": "Past", "promptRole": "r"})
        assert again.structured_content == CARD


async def sessions(stack: Stack) -> list[dict[str, Any]]:
    request = urllib.request.Request(stack.worker.url + "/sessions")
    request.add_header("Authorization", f"Bearer {stack.operator_secret}")

    def get() -> list[dict[str, Any]]:
        with urllib.request.urlopen(request, timeout=10) as response:
            body: list[dict[str, Any]] = json.load(response)["sessions"]
            return body

    return await asyncio.to_thread(get)


async def followers(stack: Stack, key: str) -> int:
    for s in await sessions(stack):
        if s["key"] == fingerprint(key):
            return int(s["followers"])
    return 0


async def test_a_mode_change_is_announced_to_a_session(stack: Stack, tab: Tab) -> None:
    changed = asyncio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    async with mcp_client(
        mcp_url(stack), *stack.agent(tab.api_key), message_handler=on_message
    ) as client:
        assert [t.name for t in (await client.list_tools()).tools] == DEFAULT_TOOLS
        assert await followers(stack, tab.api_key) >= 1
        await client.call_tool("enter_spread", {})
        await asyncio.wait_for(changed.wait(), 10)
        assert [t.name for t in (await client.list_tools()).tools] == ["draw_card", "enter_reading"]
        # A mode change made elsewhere (another client of the same key) is announced too.
        changed.clear()
        async with mcp_client(mcp_url(stack), *stack.agent(tab.api_key)) as other:
            await other.call_tool("enter_reading", {})
        await asyncio.wait_for(changed.wait(), 10)
        assert [t.name for t in (await client.list_tools()).tools] == [
            "show_card",
            "enter_followup",
        ]
    # The session closed (DELETE): nothing follows the key's mode any more.
    for _ in range(200):  # 10 s at most
        if await followers(stack, tab.api_key) == 0:
            break
        await asyncio.sleep(0.05)
    assert await followers(stack, tab.api_key) == 0


async def test_a_mode_change_is_announced_on_a_stateless_listen_stream(
    stack: Stack, tab: Tab
) -> None:
    async with mcp_client(mcp_url(stack), *stack.agent(tab.api_key), mode="2026-07-28") as client:
        assert [t.name for t in (await client.list_tools()).tools] == DEFAULT_TOOLS
        async with client.listen(tools_list_changed=True) as subscription:
            assert subscription.honored is not None
            assert subscription.honored.tools_list_changed
            await client.call_tool("enter_spread", {})
            event = await asyncio.wait_for(anext(aiter(subscription)), 10)
            assert type(event).__name__ == "ToolsListChanged"
        assert [t.name for t in (await client.list_tools()).tools] == ["draw_card", "enter_reading"]


# ---- LiveKit Agents ------------------------------------------------------------------------


def tool_output(output: str) -> Any:
    """What a tool answered, from LiveKit's default rendering of an MCP result (its one content
    block as JSON, whose text is the worker's JSON)."""
    return json.loads(json.loads(output)["text"])


class OneToolCallLLM(llm.LLM[Any]):
    """THE ONE FAKE of these tests: an LLM that reads nothing. Its first turn calls draw_card
    with fixed arguments; its next turn says the card that the tool's output names."""

    def __init__(self) -> None:
        super().__init__()
        self.turns = 0

    @property
    def model(self) -> str:
        return "one-tool-call"

    @property
    def provider(self) -> str:
        return "scripted (fake)"

    def chat(
        self,
        *,
        chat_ctx: llm.ChatContext,
        tools: list[llm.Tool] | None = None,
        conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
        parallel_tool_calls: NotGivenOr[bool] = NOT_GIVEN,
        tool_choice: NotGivenOr[llm.ToolChoice] = NOT_GIVEN,
        extra_kwargs: NotGivenOr[dict[str, Any]] = NOT_GIVEN,
    ) -> llm.LLMStream:
        self.turns += 1
        return OneToolCallStream(
            self, chat_ctx=chat_ctx, tools=tools or [], conn_options=conn_options, turn=self.turns
        )


class OneToolCallStream(llm.LLMStream):
    def __init__(self, model: OneToolCallLLM, *, turn: int, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        self._turn = turn

    async def _run(self) -> None:
        if self._turn == 1:
            call = llm.FunctionToolCall(
                name="draw_card",
                arguments=json.dumps({"positionLabel": "Present", "promptRole": "Where you are"}),
                call_id="call_draw_1",
            )
            delta = llm.ChoiceDelta(role="assistant", tool_calls=[call])
        else:
            outputs = [
                item.output
                for item in self._chat_ctx.items
                if item.type == "function_call_output" and item.name == "draw_card"
            ]
            card = tool_output(outputs[-1])["cardName"] if outputs else "nothing"
            delta = llm.ChoiceDelta(role="assistant", content=f"You drew {card}.")
        self._event_ch.send_nowait(llm.ChatChunk(id=f"turn-{self._turn}", delta=delta))


async def test_a_livekit_agents_session_calls_the_tab_through_mcp(stack: Stack, tab: Tab) -> None:
    # The session's mode is per key: move it to the spread first (LiveKit caches the tool list
    # it read at setup, so the agent starts with draw_card in it).
    async with mcp_client(mcp_url(stack), *stack.agent(tab.api_key)) as client:
        await client.call_tool("enter_spread", {})
    server = mcp.MCPServerHTTP(
        mcp_url(stack),
        headers=headers(*stack.agent(tab.api_key)),
        # Above draw_card's wait (120 s): the user may take that long to pick a card.
        client_session_timeout_seconds=130,
    )
    toolset = mcp.MCPToolset(id="screen", mcp_server=server)
    agent = Agent(instructions="Help the user draw a card.", tools=[toolset])
    fake = OneToolCallLLM()
    async with AgentSession(llm=fake) as session:
        await session.start(agent)
        result: RunResult[None] = await asyncio.wait_for(
            session.run(user_input="Draw my card, please."), 30
        )
        result.expect.next_event().is_function_call(
            name="draw_card", arguments={"positionLabel": "Present", "promptRole": "Where you are"}
        )
        output = result.expect.next_event().is_function_call_output()
        assert tool_output(output.event().item.output) == CARD
        said = result.expect.next_event().is_message(role="assistant").event().item
        assert said.text_content == "You drew The Star."
    await toolset.aclose()
    delivered = await tab.next("voice-agent:draw_card")
    assert delivered["params"] == {"positionLabel": "Present", "promptRole": "Where you are"}
    assert fake.turns == 2
