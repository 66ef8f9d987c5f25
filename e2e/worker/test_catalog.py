"""An app's own tools and modes, declared in a catalog file this test writes, against the real
relay and worker binaries: the tab is the official ``socket.io-client`` (it declares what it
handles with ``voice-agent:handles``), the agent is PyPI's ``mcp`` client, the reference
agent's ``UiTools`` and a LiveKit Agents session with a scripted LLM (the one fake: no model
runs here)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from livekit.agents import AgentSession, RunResult, llm
from voice_relay_agent import client as c
from voice_relay_agent.agent import VoiceRelayAgent
from voice_relay_agent.tools import UiTools

from conftest import WORKER_BIN, Server, Stack, WorkerFactory
from mcp_support import Tab, mcp_client
from scripted_agent import ScriptedLLM, Step, TextStep, ToolStep

#: How long a change of what the tab handles may take to reach an MCP session or the agent.
CHANGE_BOUND_S = 3.0

OK_ANSWER = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}},
    "required": ["ok"],
}


def diagram_catalog(*extra_tools: dict[str, Any]) -> dict[str, Any]:
    """A diagram editor's catalog: tools and modes the product does not ship, one mode
    nested (entered from either of the others, left back to where it came from)."""
    return {
        "initialMode": "drafting",
        "modes": [
            {
                "id": "drafting",
                "instructions": "Help the user draw their diagram.",
                "next": ["review", "help"],
            },
            {
                "id": "review",
                "instructions": "Walk through the diagram with the user.",
                "next": ["drafting", "help"],
            },
            {
                "id": "help",
                "instructions": "Answer questions about the editor, then go back.",
                "next": [],
                "nested": True,
            },
        ],
        "tools": [
            {
                "name": "CreateDiagram",
                "description": "Create a new diagram in the editor.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "title": {"type": "string", "minLength": 1, "maxLength": 80},
                        "kind": {"type": "string", "enum": ["flow", "sequence"]},
                    },
                    "required": ["title", "kind"],
                    "additionalProperties": False,
                },
                "outputSchema": OK_ANSWER,
                "awaitResult": True,
                "timeoutMs": 5000,
                "modes": ["drafting"],
            },
            {
                "name": "SaveDiagram",
                "description": "Save the open diagram.",
                "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
                "modes": ["drafting", "review"],
            },
            {
                "name": "ShowHelp",
                "description": "Open the editor's help panel on a topic.",
                "parameters": {
                    "type": "object",
                    "properties": {"topic": {"type": "string"}},
                    "required": ["topic"],
                },
            },
            *extra_tools,
        ],
    }


def write_catalog(path: Path, doc: dict[str, Any] | str) -> Path:
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc, indent=2))
    return path


@pytest.fixture
def catalog_file(tmp_path: Path) -> Path:
    return write_catalog(tmp_path / "diagram-catalog.json", diagram_catalog())


@pytest.fixture
def app_worker(workers: WorkerFactory, catalog_file: Path) -> Server:
    return workers.start({"WORKER_CATALOG": str(catalog_file)})


def names(listed: types.ListToolsResult) -> list[str]:
    return [t.name for t in listed.tools]


class Notifications:
    """Collects the server's notifications an MCP client receives."""

    def __init__(self) -> None:
        self.list_changed = asyncio.Event()
        self.count = 0

    async def __call__(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.count += 1
            self.list_changed.set()

    async def next_change(self, within_s: float = CHANGE_BOUND_S) -> float:
        """Waits for the next list_changed; how long it took."""
        started = time.monotonic()
        await asyncio.wait_for(self.list_changed.wait(), within_s)
        self.list_changed.clear()
        return time.monotonic() - started


async def test_the_offer_follows_the_mode_and_what_the_tab_handles(
    stack: Stack, app_worker: Server, tab: Tab
) -> None:
    async with mcp_client(app_worker.url + "/mcp", *stack.agent(tab.api_key)) as client:
        # A tab that never declared counts as handling every tool.
        assert names(await client.list_tools()) == [
            "CreateDiagram",
            "SaveDiagram",
            "ShowHelp",
            "enter_review",
            "enter_help",
        ]
        ack = await tab.declare(["CreateDiagram", "ShowHelp", "SomethingElse"])
        assert ack["ok"] is True and ack["revision"] >= 1
        assert names(await client.list_tools()) == [
            "CreateDiagram",
            "ShowHelp",
            "enter_review",
            "enter_help",
        ]
        await client.call_tool("enter_review", {})
        # SaveDiagram is a tool of this mode, but the tab does not handle it: not offered.
        assert names(await client.list_tools()) == ["ShowHelp", "enter_drafting", "enter_help"]
        await tab.declare([])
        assert names(await client.list_tools()) == ["enter_drafting", "enter_help"]


async def test_a_handler_added_or_removed_reaches_the_mcp_session(
    stack: Stack, app_worker: Server, tab: Tab
) -> None:
    seen = Notifications()
    url = app_worker.url + "/mcp"
    async with mcp_client(url, *stack.agent(tab.api_key), message_handler=seen) as client:
        await tab.declare(["ShowHelp"])
        # The first list makes the MCP session follow the key's session.
        assert names(await client.list_tools()) == ["ShowHelp", "enter_review", "enter_help"]
        await tab.declare(["ShowHelp", "CreateDiagram"])
        took_added = await seen.next_change()
        assert names(await client.list_tools())[:2] == ["CreateDiagram", "ShowHelp"]
        await tab.declare(["CreateDiagram"])
        took_removed = await seen.next_change()
        assert names(await client.list_tools()) == ["CreateDiagram", "enter_review", "enter_help"]
        print(f"list_changed after a declaration: {took_added:.3f} s, {took_removed:.3f} s")


async def test_a_call_reaches_the_tab_with_the_catalogs_schema_enforced(
    stack: Stack, app_worker: Server, tab: Tab
) -> None:
    async with mcp_client(app_worker.url + "/mcp", *stack.agent(tab.api_key)) as client:
        bad = await client.call_tool("CreateDiagram", {"title": "Flow", "kind": "pie"})
        assert bad.is_error
        text = "".join(getattr(p, "text", "") for p in bad.content)
        assert "invalid_arguments" in text and "/kind" in text
        good = await client.call_tool("CreateDiagram", {"title": "Checkout", "kind": "flow"})
        assert not good.is_error
        assert good.structured_content == {"ok": True}
        event = await tab.next("voice-agent:CreateDiagram")
        assert event["params"] == {"title": "Checkout", "kind": "flow"}
        assert event["meta"]["expectsResult"] is True
        assert 4000 < event["meta"]["deadlineMs"] <= 5000
        assert len(tab.tool_events()) == 1, "the invalid call never left the worker"


async def test_an_answer_without_the_declared_shape_is_an_error_and_logged_as_one(
    stack: Stack, workers: WorkerFactory, tmp_path: Path, tab: Tab
) -> None:
    # The tab answers {"ok": true}; this tool promises {"id": "..."}.
    badge = {
        "name": "ShowBadge",
        "description": "Show a badge and answer its id.",
        "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
        "outputSchema": {
            "type": "object",
            "properties": {"id": {"type": "string"}},
            "required": ["id"],
        },
        "awaitResult": True,
        "timeoutMs": 5000,
    }
    path = write_catalog(tmp_path / "badge-catalog.json", diagram_catalog(badge))
    worker = workers.start({"WORKER_CATALOG": str(path)})
    async with mcp_client(worker.url + "/mcp", stack.token_for(tab.api_key), tab.api_key) as client:
        result = await client.call_tool("ShowBadge", {})
        assert result.is_error
        text = "".join(getattr(p, "text", "") for p in result.content)
        assert "bad_response" in text and "does not have the declared shape" in text, text
        assert result.structured_content is None
    await tab.next("voice-agent:ShowBadge")
    fp = hashlib.sha256(tab.api_key.encode()).hexdigest()[:8]

    def logged() -> list[str]:
        return [
            line
            for line in worker.log.read_text(errors="replace").splitlines()
            if "tool call" in line and f"key={fp}" in line and "tool=ShowBadge" in line
        ]

    # The line reaches the log file a moment after the answer.
    for _ in range(100):
        if logged():
            break
        await asyncio.sleep(0.05)
    assert [line.split("outcome=")[-1] for line in logged()] == ["bad_response"], logged()


async def test_mode_moves_with_a_nested_mode_and_the_way_back(
    stack: Stack, app_worker: Server, tab: Tab
) -> None:
    async with mcp_client(app_worker.url + "/mcp", *stack.agent(tab.api_key)) as client:

        async def move(tool: str, mode: str) -> None:
            result = await client.call_tool(tool, {})
            assert not result.is_error, result
            # The tab hears its session's mode on each change.
            await tab.next("voice-agent:mode", lambda e: e["params"] == {"mode": mode})

        await client.list_tools()
        # ... and when the session opens.
        await tab.next("voice-agent:mode", lambda e: e["params"] == {"mode": "drafting"})
        await move("enter_help", "help")
        assert names(await client.list_tools()) == ["ShowHelp", "leave_help"]
        await move("leave_help", "drafting")
        assert names(await client.list_tools())[-2:] == ["enter_review", "enter_help"]
        await move("enter_review", "review")
        await move("enter_help", "help")
        await move("leave_help", "review")
        assert names(await client.list_tools()) == [
            "SaveDiagram",
            "ShowHelp",
            "enter_drafting",
            "enter_help",
        ], "back to review, where help was entered from"
        refused = await client.call_tool("leave_help", {})
        assert refused.is_error


async def test_a_reload_on_sighup_under_a_live_mcp_session(
    stack: Stack, workers: WorkerFactory, catalog_file: Path, tab: Tab
) -> None:
    worker = workers.start({"WORKER_CATALOG": str(catalog_file)})
    seen = Notifications()
    url = worker.url + "/mcp"
    async with mcp_client(url, *stack.agent(tab.api_key), message_handler=seen) as client:
        await client.call_tool("enter_review", {})
        # The move is announced too; its notice may arrive late under load, so it is taken
        # before the reload's.
        await seen.next_change()
        before = names(await client.list_tools())
        export = {
            "name": "ExportDiagram",
            "description": "Export the diagram as an image.",
            "parameters": {"type": "object"},
            "modes": ["review"],
        }
        write_catalog(catalog_file, diagram_catalog(export))
        worker.proc.send_signal(signal.SIGHUP)
        # Each notice says the list changed, not which change it was (a tab's declaration may
        # be announced too): list again on each until the reload shows, a few notices at most.
        for _ in range(4):
            await seen.next_change()
            after = names(await client.list_tools())
            if "ExportDiagram" in after:
                break
        assert after == ["SaveDiagram", "ShowHelp", "ExportDiagram", "enter_drafting", "enter_help"]
        assert before != after
        # The session kept its mode through the reload.
        assert not (await client.call_tool("ExportDiagram", {})).is_error
        assert (await tab.next("voice-agent:ExportDiagram"))["params"] == {}

        # A broken catalog is refused: the running one stays, and the session goes on.
        write_catalog(catalog_file, '{"tools": [{"name": "bad name"}]}')
        worker.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while "the running one is kept" not in worker.log.read_text(errors="replace"):
            assert time.monotonic() < deadline, "the refused reload was not logged"
            await asyncio.sleep(0.05)
        assert names(await client.list_tools()) == after
        assert worker.proc.poll() is None


@pytest.mark.parametrize("page_tools", [False, True])
async def test_page_tools_only_when_allowed_and_never_over_a_catalog_tool(
    stack: Stack, workers: WorkerFactory, catalog_file: Path, tab: Tab, page_tools: bool
) -> None:
    env = {"WORKER_CATALOG": str(catalog_file)}
    if page_tools:
        env["WORKER_PAGE_TOOLS"] = "true"
    worker = workers.start(env)
    set_zoom = {
        "name": "set_zoom",
        "description": "Zoom the diagram canvas.",
        "parameters": {
            "type": "object",
            "properties": {"percent": {"type": "integer", "minimum": 10, "maximum": 400}},
            "required": ["percent"],
        },
        "awaitResult": True,
        "timeoutMs": 3000,
    }
    shadow = {
        "name": "CreateDiagram",
        "description": "A page's own CreateDiagram, which must not replace the catalog's.",
        "parameters": {"type": "object"},
    }
    ack = await tab.declare(["CreateDiagram", "set_zoom"], [set_zoom, shadow])
    assert ack["ok"] is True, ack
    async with mcp_client(worker.url + "/mcp", *stack.agent(tab.api_key)) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert listed["CreateDiagram"].description == "Create a new diagram in the editor."
        if not page_tools:
            assert "set_zoom" not in listed
            with pytest.raises(Exception, match="set_zoom"):
                await client.call_tool("set_zoom", {"percent": 150})
            return
        assert list(listed) == ["CreateDiagram", "set_zoom", "enter_review", "enter_help"]
        assert listed["set_zoom"].input_schema["properties"]["percent"]["maximum"] == 400
        bad = await client.call_tool("set_zoom", {"percent": 4000})
        assert bad.is_error
        good = await client.call_tool("set_zoom", {"percent": 150})
        assert not good.is_error
        event = await tab.next("voice-agent:set_zoom")
        assert event["params"] == {"percent": 150}
        assert event["meta"]["expectsResult"] is True


async def test_a_livekit_agents_session_runs_a_catalog_tool_and_follows_the_tab(
    stack: Stack, app_worker: Server, tab: Tab
) -> None:
    """LiveKit Agents' AgentSession (text only) with a scripted LLM, against the real worker
    with the app's catalog: the model's tool call reaches the tab, the tab's answer is the
    tool's output, and a handler the tab adds reaches the agent's tool set while it runs."""
    await tab.declare(["SaveDiagram"])
    outcomes: list[c.CallOutcome] = []
    script: list[Step] = [
        ToolStep("SaveDiagram", {}),
        TextStep(lambda _ctx: "Saved."),
    ]
    async with c.WorkerClient(app_worker.url, *stack.agent(tab.api_key)) as wc:
        ui = UiTools(wc, on_tool=outcomes.append)
        offer = await ui.refresh()
        assert ui.toolset.names() == ["SaveDiagram", "enter_review", "enter_help"]
        agent = VoiceRelayAgent(ui, offer)
        following = asyncio.create_task(ui.follow())
        try:
            async with AgentSession[Any](llm=ScriptedLLM(script), max_tool_steps=4) as session:
                await session.start(agent)
                async with asyncio.timeout(20):
                    result: RunResult[Any] = await session.run(user_input="Save it, please.")
            outputs = [e.item for e in result.events if isinstance(e.item, llm.FunctionCallOutput)]
            assert [o.name for o in outputs] == ["SaveDiagram"]
            assert not outputs[0].is_error
            assert (await tab.next("voice-agent:SaveDiagram"))["params"] == {}
            assert outcomes[0].ok

            started = time.monotonic()
            await tab.declare(["SaveDiagram", "CreateDiagram"])
            while "CreateDiagram" not in ui.toolset.names():
                assert time.monotonic() - started < CHANGE_BOUND_S, ui.toolset.names()
                await asyncio.sleep(0.02)
            print(f"the agent's tools changed {time.monotonic() - started:.3f} s after")
        finally:
            following.cancel()


def test_the_agent_clients_error_codes_are_the_workers(stack: Stack) -> None:
    with urllib.request.urlopen(stack.worker.url + "/openapi.json", timeout=10) as response:
        doc = json.load(response)
    assert doc["components"]["schemas"]["Code"]["enum"] == [code.value for code in c.ErrorCode]


BROKEN: list[tuple[str, Any, str]] = [
    ("syntax", '{"tools": [\n  {"name": }\n]}', ":2:"),
    (
        "schema",
        {
            "tools": [
                {
                    "name": "A",
                    "description": "a",
                    "parameters": {"type": "object", "properties": {"x": {"type": 7}}},
                }
            ]
        },
        "tools[0].parameters: the schema does not compile",
    ),
    (
        "unknown mode",
        {
            "modes": [{"id": "m"}],
            "tools": [
                {"name": "A", "description": "a", "parameters": {"type": "object"}, "modes": ["x"]}
            ],
        },
        'tools[0].modes[0]: names mode "x", which is not declared',
    ),
    (
        "duplicate mode",
        {"modes": [{"id": "m"}, {"id": "m"}], "tools": []},
        'modes[1].id: mode "m" is declared twice',
    ),
    (
        "duplicate tool",
        {
            "tools": [
                {"name": "A", "description": "a", "parameters": {"type": "object"}},
                {"name": "A", "description": "a", "parameters": {"type": "object"}},
            ]
        },
        'tools[1].name: tool "A" is declared twice',
    ),
    (
        "refused name",
        {"tools": [{"name": "1st", "description": "a", "parameters": {"type": "object"}}]},
        'tools[0].name: "1st" is not a tool name the relay accepts',
    ),
    (
        "reserved name",
        {"tools": [{"name": "handles", "description": "a", "parameters": {"type": "object"}}]},
        'tools[0].name: "handles" is not a tool name the relay accepts',
    ),
    (
        "timeout",
        {
            "tools": [
                {
                    "name": "A",
                    "description": "a",
                    "parameters": {"type": "object"},
                    "awaitResult": True,
                    "timeoutMs": 0,
                }
            ]
        },
        "tools[0].timeoutMs: 0 is out of bounds",
    ),
    (
        "unreachable",
        {"modes": [{"id": "a"}, {"id": "b"}], "tools": []},
        'modes[1].id: mode "b" is unreachable',
    ),
    ("missing tools", {"modes": [{"id": "a"}]}, 'has no "tools" array'),
    (
        "misspelt field",
        {
            "tools": [
                {"name": "A", "description": "a", "parameters": {"type": "object"}, "timeout": 5}
            ]
        },
        "tools[0].timeout: is not a tool field",
    ),
]


@pytest.mark.parametrize(("what", "doc", "expected"), BROKEN, ids=[b[0] for b in BROKEN])
def test_a_broken_catalog_is_refused_with_its_place(
    tmp_path: Path, stack: Stack, what: str, doc: Any, expected: str
) -> None:
    path = write_catalog(tmp_path / f"{what.replace(' ', '-')}.json", doc)
    env = {"PATH": os.environ.get("PATH", ""), "WORKER_CATALOG": str(path)}
    check = subprocess.run(
        [str(WORKER_BIN), "check"], env=env, capture_output=True, text=True, timeout=20
    )
    assert check.returncode == 64, check
    assert expected in check.stderr, check.stderr
    assert str(path) in check.stderr
    # The server refuses to start on it, with the same words.
    serve_env = {
        **env,
        "RELAY_WORKER_SECRET": stack.worker_secret,
        "LIVEKIT_API_KEY": "devkey",
        "LIVEKIT_API_SECRET": stack.livekit_secret,
        "WORKER_ADDR": "127.0.0.1:0",
    }
    serve = subprocess.run(
        [str(WORKER_BIN), "serve"], env=serve_env, capture_output=True, text=True, timeout=20
    )
    assert serve.returncode == 64, serve
    assert expected in serve.stderr


def test_check_and_export_of_a_good_catalog(catalog_file: Path) -> None:
    env = {"PATH": os.environ.get("PATH", ""), "WORKER_CATALOG": str(catalog_file)}
    check = subprocess.run(
        [str(WORKER_BIN), "check"], env=env, capture_output=True, text=True, timeout=20
    )
    assert check.returncode == 0, check
    assert "3 tools, 3 modes, starting in drafting" in check.stdout
    for fmt in ("openai", "vapi", "elevenlabs"):
        out = subprocess.run(
            [
                str(WORKER_BIN),
                "catalog",
                "export",
                "--format",
                fmt,
                "--mode",
                "review",
                "--worker-url",
                "https://worker.example.com",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=20,
        )
        assert out.returncode == 0, out
        tools = json.loads(out.stdout)
        # The review mode's tools, then its moves (so the platform's agent can leave it).
        assert len(tools) == 4, (fmt, tools)
        text = json.dumps(tools)
        assert "SaveDiagram" in text and "ShowHelp" in text and "CreateDiagram" not in text
        assert "enter_drafting" in text and "enter_help" in text
