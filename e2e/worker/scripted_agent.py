"""The voice agent with a SCRIPTED LLM, for end-to-end tests. Not an AI.

This runs the reference agent (``agent.run_session``, reference/python/agent.py: key from the
user's metadata, tools and modes from the agent worker, calls through the worker to the
tab) with two substitutions:

- the LLM is :class:`ScriptedLLM`, the one fake model of this project: it does not read
  what the user says, it emits a fixed sequence of tool calls, one per turn, then a text
  reply that names the card the user drew;
- the TTS is the real espeak-ng TTS, so the agent publishes audible speech; there is no
  STT (no offline one exists), so the script is started by the agent's greeting once the
  user's tab is in the room, not by speech.

It also subscribes to the user's microphone track and measures its level.

Run (headless, non-interactive; ``dev`` mode disables LiveKit's CPU load limit, which on a
small test machine could otherwise mark the worker unavailable)::

    LIVEKIT_URL=ws://127.0.0.1:7880 LIVEKIT_API_KEY=devkey LIVEKIT_API_SECRET=secret \\
    WORKER_URL=http://127.0.0.1:3002 AGENT_NAME=... \\
    python tests/scripted_agent.py dev

Jobs run in a thread of this process (one process, no idle job processes to start). Stdout
carries only JSON lines, one per event, flushed at once (LiveKit's logs go to stderr)::

    {"event":"registered","workerId":"..."}         the worker is registered with LiveKit
    {"event":"key","fp":"<8 hex>"}                   the user's key (fingerprint only)
    {"event":"tool","name":"draw_card","ok":true,"result":{...},"mode":"spread",
     "modeChanged":false,"startedAt":<ms>,"endedAt":<ms>}
                                                     every tool call and its outcome
                                                     ("error":{"code","message"} if not ok)
    {"event":"mic_level","peak":0.12,"rms":0.05}     every second once the mic's audio flows
    {"event":"said","text":"You drew ...","interrupted":false}
                                                      every reply the agent speaks
    {"event":"turn","method":"start_turn","interrupted":true}
                                                      the page's push-to-talk RPCs; after an
                                                      ``end_turn`` the agent replies (there is
                                                      no STT to hear the turn): the script's
                                                      next step, or its long closing words
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import sys
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import numpy as np
from livekit import rtc
from livekit.agents import (
    DEFAULT_API_CONNECT_OPTIONS,
    NOT_GIVEN,
    AgentSession,
    APIConnectOptions,
    ConversationItemAddedEvent,
    JobContext,
    NotGivenOr,
    cli,
    llm,
)
from voice_relay_agent.client import CallOutcome

import agent  # the reference agent: agent-worker/reference/python
import config
from espeak_tts import EspeakTTS

logger = logging.getLogger("voice_relay_agent.scripted")

FAKE_NOTICE = (
    "SCRIPTED LLM: this agent does not understand speech; it plays a fixed sequence of "
    "tool calls for tests (OpenPopover, enter_spread, draw_card, then a reply)"
)


@dataclass(frozen=True)
class ToolStep:
    """One turn that calls ``name`` with ``arguments``."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class TextStep:
    """One turn that says ``text(chat_ctx)``."""

    text: Callable[[llm.ChatContext], str]


Step = ToolStep | TextStep


def last_output(chat_ctx: llm.ChatContext, name: str) -> llm.FunctionCallOutput | None:
    """The latest output of tool ``name`` in the conversation."""
    for item in reversed(chat_ctx.items):
        if isinstance(item, llm.FunctionCallOutput) and item.name == name:
            return item
    return None


def name_the_card(chat_ctx: llm.ChatContext) -> str:
    """ "You drew …" from ``draw_card``'s output (or what went wrong)."""
    out = last_output(chat_ctx, "draw_card")
    if out is None:
        return "No card was drawn."
    if out.is_error:
        return f"The card could not be drawn. {out.output}"
    try:
        card = json.loads(out.output)
    except ValueError:
        return f"You drew {out.output}."
    if not isinstance(card, dict):
        return f"You drew {out.output}."
    name = card.get("cardName") or card.get("cardId") or "a card"
    return f"You drew {name}{', reversed' if card.get('reversed') else ''}."


#: What the agent says once the script is over: long, so a test can interrupt it.
END_OF_SCRIPT = (
    "That is the end of my script. I will keep talking for a while, so that you can "
    "interrupt me: one, two, three, four, five, six, seven, eight, nine, ten."
)

DEFAULT_SCRIPT: tuple[Step, ...] = (
    ToolStep("OpenPopover", {"message": "Hello from the agent"}),
    ToolStep("enter_spread", {}),
    ToolStep("draw_card", {"positionLabel": "Present", "promptRole": "Where you stand now"}),
    TextStep(name_the_card),
)


class ScriptedLLM(llm.LLM[Any]):
    """A FAKE LLM (the only one in this project): a fixed script, one step per turn.

    Every ``chat()`` call takes the next step; after the last one it only says that the
    script is over. It ignores what the conversation says, except that a text step may
    read it (to name the drawn card).
    """

    def __init__(self, steps: Sequence[Step] = DEFAULT_SCRIPT) -> None:
        super().__init__()
        self._steps = list(steps)
        self._next = 0
        self._lock = threading.Lock()
        logger.warning(FAKE_NOTICE)

    @property
    def model(self) -> str:
        return "scripted"

    @property
    def provider(self) -> str:
        return "scripted (fake)"

    def take(self) -> Step:
        with self._lock:
            if self._next < len(self._steps):
                step = self._steps[self._next]
                self._next += 1
                return step
        return TextStep(lambda _ctx: END_OF_SCRIPT)

    def chat(
        self,
        *,
        chat_ctx: llm.ChatContext,
        tools: list[llm.Tool] | None = None,
        conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
        parallel_tool_calls: NotGivenOr[bool] = NOT_GIVEN,
        tool_choice: NotGivenOr[llm.ToolChoice] = NOT_GIVEN,
        extra_kwargs: NotGivenOr[dict[str, Any]] = NOT_GIVEN,
    ) -> ScriptedStream:
        return ScriptedStream(
            self, chat_ctx=chat_ctx, tools=tools or [], conn_options=conn_options, step=self.take()
        )


class ScriptedStream(llm.LLMStream):
    def __init__(
        self,
        model: ScriptedLLM,
        *,
        chat_ctx: llm.ChatContext,
        tools: list[llm.Tool],
        conn_options: APIConnectOptions,
        step: Step,
    ) -> None:
        super().__init__(model, chat_ctx=chat_ctx, tools=tools, conn_options=conn_options)
        self._step = step

    async def _run(self) -> None:
        chunk_id = uuid.uuid4().hex[:12]
        if isinstance(self._step, ToolStep):
            call = llm.FunctionToolCall(
                name=self._step.name,
                arguments=json.dumps(self._step.arguments),
                call_id=f"call_{chunk_id}",
            )
            delta = llm.ChoiceDelta(role="assistant", tool_calls=[call])
        else:
            delta = llm.ChoiceDelta(role="assistant", content=self._step.text(self._chat_ctx))
        self._event_ch.send_nowait(llm.ChatChunk(id=chunk_id, delta=delta))


class Events:
    """JSON lines on a stream of their own, one per event, flushed, from any thread."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._lock = threading.Lock()

    def emit(self, event: str, **fields: Any) -> None:
        line = json.dumps({"event": event, **fields}, ensure_ascii=False, default=str)
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()

    def tool(self, outcome: CallOutcome) -> None:
        body = outcome.to_json()
        if outcome.started_at is not None and outcome.ended_at is not None:
            body["startedAt"] = round(outcome.started_at * 1000)
            body["endedAt"] = round(outcome.ended_at * 1000)
        self.emit("tool", **body)


def frame_rms(frame: rtc.AudioFrame) -> float:
    """Root mean square of a 16-bit frame, from 0 (silence) to 1 (full scale)."""
    samples = np.frombuffer(frame.data, dtype=np.int16).astype(np.float64) / 32768.0
    if samples.size == 0:
        return 0.0
    return float(np.sqrt(np.mean(samples * samples)))


async def meter_microphone(
    participant: rtc.RemoteParticipant, events: Events, interval_s: float = 1.0
) -> None:
    """Reads the user's microphone track and reports its level every ``interval_s``.

    ``peak`` is the highest frame RMS (10 ms frames) in the interval; ``rms`` is the RMS
    over the whole interval.
    """
    stream = rtc.AudioStream.from_participant(
        participant=participant,
        track_source=rtc.TrackSource.SOURCE_MICROPHONE,
        sample_rate=48000,
        num_channels=1,
    )
    loop = asyncio.get_running_loop()
    window_start = loop.time()
    peak = 0.0
    energy = 0.0
    frames = 0
    try:
        async for ev in stream:
            level = frame_rms(ev.frame)
            peak = max(peak, level)
            energy += level * level
            frames += 1
            now = loop.time()
            if now - window_start >= interval_s:
                events.emit(
                    "mic_level",
                    peak=round(peak, 6),
                    rms=round(float(np.sqrt(energy / frames)), 6),
                )
                window_start, peak, energy, frames = now, 0.0, 0.0, 0
    finally:
        await stream.aclose()


def scripted_hooks(events: Events, tasks: set[asyncio.Task[None]]) -> agent.Hooks:
    def on_user(participant: rtc.RemoteParticipant) -> None:
        task = asyncio.create_task(meter_microphone(participant, events))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def on_session(session: AgentSession[Any]) -> None:
        @session.on("conversation_item_added")
        def _said(ev: ConversationItemAddedEvent) -> None:
            item = ev.item
            if isinstance(item, llm.ChatMessage) and item.role == "assistant":
                text = item.text_content
                if text:
                    events.emit("said", text=text, interrupted=item.interrupted)

        sessions.append(session)

    def on_turn(method: str, interrupted: bool) -> None:
        events.emit("turn", method=method, interrupted=interrupted)
        if method == agent.END_TURN_RPC and sessions:
            sessions[-1].generate_reply(user_input="Tell me more.")

    sessions: list[AgentSession[Any]] = []
    return agent.Hooks(
        on_key=lambda fp: events.emit("key", fp=fp),
        on_tool=events.tool,
        on_user=on_user,
        on_session=on_session,
        on_turn=on_turn,
    )


EVENTS: Events | None = None


async def scripted_entrypoint(ctx: JobContext) -> None:
    """The package's session, with the scripted LLM and the espeak-ng TTS."""
    settings, _ = config.load(require_llm=False)
    settings = dataclasses.replace(settings, greet=True)
    espeak = settings.tts if isinstance(settings.tts, config.EspeakSettings) else None
    pipeline = agent.Pipeline(
        llm=ScriptedLLM(),
        tts=EspeakTTS(
            voice=espeak.voice if espeak else "en",
            words_per_minute=espeak.words_per_minute if espeak else 170,
            program=espeak.program if espeak else "espeak-ng",
        ),
    )
    events = EVENTS or Events(sys.stdout)
    tasks: set[asyncio.Task[None]] = set()

    async def stop_meters() -> None:
        for task in list(tasks):
            task.cancel()

    ctx.add_shutdown_callback(stop_meters)
    await agent.run_session(ctx, settings, pipeline, scripted_hooks(events, tasks))


def main(argv: Sequence[str] | None = None) -> None:
    global EVENTS
    args = list(sys.argv[1:] if argv is None else argv)
    # Events keep the real stdout; everything else written to fd 1 (LiveKit's log handler
    # included) goes to stderr.
    EVENTS = Events(os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8"))
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    os.environ.setdefault("AGENT_JOB_EXECUTOR", "thread")
    os.environ.setdefault("AGENT_IDLE_PROCESSES", "1")
    os.environ.setdefault("AGENT_HTTP_PORT", "0")
    os.environ.setdefault("AGENT_LOAD_THRESHOLD", "1000")
    os.environ.setdefault("AGENT_DRAIN_TIMEOUT", "5")
    settings, _ = agent.check(args, require_llm=False)
    settings = dataclasses.replace(settings, job_executor="thread")
    print(f"scripted_agent: {FAKE_NOTICE}", file=sys.stderr)

    # The test machine's CPU is shared with the test's own relay, worker, LiveKit server and
    # Chromium: reported as this agent's load, it would make LiveKit's server withhold jobs
    # from it (no room would get an agent) whenever the machine is busy.
    server = agent.build_server(settings, scripted_entrypoint, setup=None, load_fnc=lambda: 0.0)
    events = EVENTS

    @server.on("worker_registered")
    def _registered(worker_id: str, _info: Any) -> None:
        events.emit("registered", workerId=worker_id)

    sys.argv = [sys.argv[0], *args]
    cli.run_app(server)


if __name__ == "__main__":
    main()
