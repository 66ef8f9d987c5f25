"""The tool builder: worker tools become LiveKit function tools with the same schemas."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest
from livekit.agents import llm
from livekit.agents.llm import ToolError

from voice_relay_agent.client import CallOutcome, ToolOffer, WorkerClient
from voice_relay_agent.tools import BASE_INSTRUCTIONS, UiTools, compose_instructions

KEY = "va_" + "cd" * 32
#: A session token's shape (these tests never reach a relay that checks it).
TOKEN = "header.payload.signature"

# Shaped like GET /agent/tools; the tools are made up here (the real ones are only in the
# worker's registry, and test_worker_api.py checks those against the running worker).
OFFER: dict[str, Any] = {
    "mode": "alpha",
    "instructions": "Alpha mode.",
    "tools": [
        {
            "name": "show_thing",
            "description": "Shows a thing in the tab.",
            "parameters": {
                "type": "object",
                "properties": {
                    "label": {"type": "string", "maxLength": 40},
                    "count": {"type": "integer", "minimum": 1},
                },
                "required": ["label"],
                "additionalProperties": False,
            },
            "outputSchema": {"type": "object"},
            "awaitResult": True,
            "timeoutMs": 5000,
        },
        {
            "name": "enter_beta",
            "description": "Switches to beta mode.",
            "parameters": {"type": "object", "properties": {}},
            "outputSchema": None,
            "awaitResult": False,
            "timeoutMs": None,
        },
    ],
}


def ui(url: str = "http://127.0.0.1:9") -> UiTools:
    return UiTools(WorkerClient(url, TOKEN, KEY))


def test_function_tools_carry_the_worker_schemas_verbatim() -> None:
    original = copy.deepcopy(OFFER)
    offer = ToolOffer.from_json(OFFER)
    tools = ui().build(offer)
    assert [t.id for t in tools] == ["show_thing", "enter_beta"]
    for tool, spec in zip(tools, OFFER["tools"], strict=True):
        assert isinstance(tool, llm.RawFunctionTool)
        assert tool.info.raw_schema == {
            "name": spec["name"],
            "description": spec["description"],
            "parameters": spec["parameters"],
        }
    assert original == OFFER


def test_openai_definitions_are_the_same_schemas() -> None:
    tools = ui()
    tools.apply(ToolOffer.from_json(OFFER))
    definitions = llm.ToolContext([tools.toolset]).parse_function_tools("openai")
    by_name = {d["function"]["name"]: d["function"] for d in definitions}
    for spec in OFFER["tools"]:
        assert by_name[spec["name"]]["parameters"] == spec["parameters"]
        assert by_name[spec["name"]]["description"] == spec["description"]


def test_the_toolset_is_swapped_in_place() -> None:
    tools = ui()
    toolset = tools.toolset
    tools.apply(ToolOffer.from_json(OFFER))
    assert llm.ToolContext([toolset]).function_tools.keys() == {"show_thing", "enter_beta"}
    beta = {**OFFER, "mode": "beta", "tools": OFFER["tools"][:1]}
    tools.apply(ToolOffer.from_json(beta))
    assert tools.toolset is toolset
    assert tools.mode == "beta"
    assert list(llm.ToolContext([toolset]).function_tools) == ["show_thing"]


def test_instructions() -> None:
    assert compose_instructions(ToolOffer.from_json(OFFER)) == f"{BASE_INSTRUCTIONS}\n\nAlpha mode."
    assert compose_instructions(ToolOffer("x", "", ())) == BASE_INSTRUCTIONS


async def test_a_failed_call_is_a_sentence_for_the_model() -> None:
    seen: list[CallOutcome] = []
    tools = UiTools(WorkerClient("http://127.0.0.1:9", TOKEN, KEY), on_tool=seen.append)
    tools.apply(ToolOffer.from_json(OFFER))
    spec = tools.offer.tools[0]
    async with asyncio.timeout(15):
        with pytest.raises(ToolError) as e:
            await tools.call(spec, {"label": "x"})
    assert "agent worker cannot be reached" in e.value.message
    assert len(seen) == 1 and not seen[0].ok
    assert json.dumps(seen[0].to_json())
