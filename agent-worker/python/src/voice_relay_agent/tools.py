"""The worker's UI tools as LiveKit Agents function tools, following the session's mode.

The tool list, the JSON Schemas and the instructions all come from the worker
(``GET /agent/tools``); nothing here knows a tool by name. Each tool becomes
``function_tool(handler, raw_schema={"name", "description", "parameters"})`` whose handler
posts the call to the worker. A failure is raised as LiveKit's ``ToolError`` with the
worker's sentence, which LiveKit Agents hands to the model as the tool's (error) output.

When a call reports ``modeChanged``, the tools and instructions of the new mode replace the
old ones; :meth:`UiTools.follow` also waits on the worker for any other change of the offer
(a handler added or removed in the user's tab, a reloaded catalog) and applies it at once.
The tools live in one :class:`ModeToolset` whose contents are swapped: LiveKit Agents builds
the tool context of every LLM step from the agent's tool list, so the step right after a
mode change (still inside the same reply) already offers the new mode's tools.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from livekit.agents import llm
from livekit.agents.llm import ToolError, function_tool

from .client import CallOutcome, ToolOffer, ToolSpec, WorkerClient
from .errors import WorkerError

logger = logging.getLogger("voice_relay_agent.tools")

#: Said before the mode's own instructions, whatever the mode.
BASE_INSTRUCTIONS = (
    "You are a voice assistant talking with the user through their microphone and "
    "speakers: answer in short, plain spoken sentences, without markdown or lists. "
    "Your tools act in the user's browser tab (popovers, cards, a cassette); use them when "
    "they help, and tell the user what you did. If a tool fails, say so in a few words."
)

TOOLSET_ID = "voice_relay_ui_tools"

#: How long one wait on the worker for a changed offer lasts before it is asked again.
FOLLOW_WAIT_S = 25.0
#: Pause after the worker could not be asked, before asking again.
FOLLOW_RETRY_S = 1.0


def compose_instructions(offer: ToolOffer) -> str:
    """The agent's instructions for the mode in ``offer``."""
    if not offer.instructions:
        return BASE_INSTRUCTIONS
    return f"{BASE_INSTRUCTIONS}\n\n{offer.instructions}"


class InstructionsTarget(Protocol):
    """What a mode change updates: LiveKit's ``Agent`` satisfies it."""

    async def update_instructions(self, instructions: str, /) -> None: ...


class ModeToolset(llm.Toolset):
    """The function tools of the current mode; :meth:`replace` swaps them in place."""

    def __init__(self) -> None:
        super().__init__(id=TOOLSET_ID)

    def replace(self, tools: Sequence[llm.Tool]) -> None:
        self._tools = list(tools)

    def names(self) -> list[str]:
        return llm.tool_context.get_fnc_tool_names(self.tools)


def tool_output(outcome: CallOutcome) -> str:
    """What the model reads after a successful call: the worker's result as JSON."""
    if outcome.result is None:
        return json.dumps({"ok": True})
    return json.dumps(outcome.result, ensure_ascii=False)


class UiTools:
    """The UI tools of one session (one tab's key), kept in step with its mode.

    ``on_tool`` is told every call's outcome (successes and failures alike).
    """

    def __init__(
        self,
        client: WorkerClient,
        *,
        on_tool: Callable[[CallOutcome], None] | None = None,
    ) -> None:
        self._client = client
        self._on_tool = on_tool
        self._target: InstructionsTarget | None = None
        self._lock = asyncio.Lock()
        self.toolset = ModeToolset()
        self.offer = ToolOffer(mode="", instructions="", tools=())

    @property
    def mode(self) -> str:
        return self.offer.mode

    def bind(self, target: InstructionsTarget) -> None:
        """The agent whose instructions follow the mode."""
        self._target = target

    def build(self, offer: ToolOffer) -> list[llm.Tool]:
        """Function tools for every tool in ``offer``, with the worker's schemas verbatim."""
        return [self._function_tool(spec) for spec in offer.tools]

    def apply(self, offer: ToolOffer) -> None:
        """Makes ``offer`` the current mode's tools (instructions are :meth:`switch`'s job)."""
        self.toolset.replace(self.build(offer))
        self.offer = offer

    async def refresh(self) -> ToolOffer:
        """Fetches the current mode from the worker and applies its tools."""
        offer = await self._client.list_tools()
        self.apply(offer)
        logger.info(
            "mode %s: tools %s",
            offer.mode,
            ", ".join(t.name for t in offer.tools) or "(none)",
            extra={"key": self._client.key_fingerprint, "mode": offer.mode},
        )
        return offer

    async def switch(self) -> ToolOffer:
        """After a mode change: the new mode's tools and instructions replace the old."""
        async with self._lock:
            offer = await self.refresh()
            if self._target is not None:
                await self._target.update_instructions(compose_instructions(offer))
            return offer

    async def follow(self, *, wait_s: float = FOLLOW_WAIT_S) -> None:
        """Keeps the tools and instructions current until cancelled: each wait on the worker
        ends as soon as the offer changes, and the new offer replaces the old one."""
        while True:
            try:
                offer = await self._client.list_tools(after=self.offer.revision, wait_s=wait_s)
            except WorkerError as e:
                logger.warning(
                    "cannot wait for changes of the tools: %s",
                    e,
                    extra={"key": self._client.key_fingerprint},
                )
                await asyncio.sleep(FOLLOW_RETRY_S)
                continue
            async with self._lock:
                if offer.revision == self.offer.revision:
                    continue
                previous = self.offer
                self.apply(offer)
                logger.info(
                    "tools changed (mode %s): %s",
                    offer.mode,
                    ", ".join(t.name for t in offer.tools) or "(none)",
                    extra={"key": self._client.key_fingerprint, "mode": offer.mode},
                )
                if self._target is not None and offer.instructions != previous.instructions:
                    await self._target.update_instructions(compose_instructions(offer))

    async def call(self, spec: ToolSpec, arguments: dict[str, Any]) -> str:
        """Runs one tool call for the model; raises ``ToolError`` with a speakable sentence."""
        started = time.time()
        try:
            outcome = await self._client.call_tool(spec.name, arguments, spec=spec)
        except WorkerError as e:
            outcome = CallOutcome(spec.name, False, None, e, self.mode, False)
        outcome = dataclasses.replace(outcome, started_at=started, ended_at=time.time())
        logger.info(
            "tool %s: %s",
            spec.name,
            "ok" if outcome.ok else (outcome.error.code if outcome.error else "failed"),
            extra={"key": self._client.key_fingerprint, "mode": outcome.mode},
        )
        if self._on_tool is not None:
            try:
                self._on_tool(outcome)
            except Exception:
                logger.exception("the tool observer failed")
        if outcome.mode_changed:
            try:
                await self.switch()
            except WorkerError as e:
                logger.error("cannot load the tools of mode %s: %s", outcome.mode, e)
                raise ToolError(
                    f"The mode changed to {outcome.mode}, but its tools could not be loaded: "
                    f"{e.message}"
                ) from e
        if not outcome.ok:
            message = outcome.error.message if outcome.error else f"{spec.name} failed."
            raise ToolError(message)
        return tool_output(outcome)

    def _function_tool(self, spec: ToolSpec) -> llm.Tool:
        async def handler(raw_arguments: dict[str, object]) -> str:
            return await self.call(spec, dict(raw_arguments))

        handler.__name__ = spec.name
        return function_tool(handler, raw_schema=spec.raw_schema())
