"""The reference voice agent: LiveKit Agents (Python) with the agent worker's UI tools.

``python agent.py start|dev|connect --room R|console`` (or ``voice-relay-agent start``). It
registers under its agent name (``AGENT_NAME``) and is dispatched by the agent worker into the
room of one user, with that user's identity and a session token for their key alone in the
job's metadata (:class:`DispatchGrant`); it waits for that user, and runs an ``AgentSession``
linked to them whose tools are the session mode's UI tools, from the agent worker through the
``voice_relay_agent`` library. It holds no secret of the relay's: a job without a grant ends.

Top to bottom: the models that the configuration names (read from the environment by
``config.py``, refused with every reason, exit 64, when it cannot work), the session in one
room (:func:`run_session`), the LiveKit server and its entrypoint, the program. Plugins are
imported at the top: LiveKit Agents registers them on the main thread, before any job
thread starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from livekit import rtc
from livekit.agents import (
    NOT_GIVEN,
    AgentServer,
    AgentSession,
    CloseEvent,
    InterruptionOptions,
    JobContext,
    JobExecutorType,
    JobProcess,
    NotGivenOr,
    TurnHandlingOptions,
    cli,
    llm,
    room_io,
    stt,
    tts,
    vad,
)
from livekit.plugins import openai, silero
from voice_relay_agent.agent import VoiceRelayAgent
from voice_relay_agent.client import CallOutcome, ToolOffer, WorkerClient
from voice_relay_agent.dispatch import DispatchGrant, wait_for_user
from voice_relay_agent.errors import WorkerError
from voice_relay_agent.tools import UiTools

import config
from espeak_tts import EspeakTTS

logger = logging.getLogger("voice_relay_agent")

#: Exit status for a configuration that stops the agent (as the relay's check-config).
EXIT_CONFIG = 64

# -- The models ------------------------------------------------------------------------------


@dataclass
class Pipeline:
    """The models of a session. ``llm`` is required; the others may be absent."""

    llm: llm.LLM[Any]
    stt: stt.STT[Any] | None = None
    tts: tts.TTS[Any] | None = None
    vad: vad.VAD | None = None


def given(value: str | None) -> NotGivenOr[str]:
    """``value``, or LiveKit's "not given" so that the client's own default applies."""
    return NOT_GIVEN if value is None else value


def load_vad(proc: JobProcess | None) -> vad.VAD:
    """Silero VAD (its model ships in the wheel), loaded once per job process."""
    if proc is not None and isinstance(proc.userdata.get("vad"), vad.VAD):
        loaded: vad.VAD = proc.userdata["vad"]
        return loaded
    detector = silero.VAD.load()
    if proc is not None:
        proc.userdata["vad"] = detector
    return detector


def build_pipeline(settings: config.Settings, proc: JobProcess | None = None) -> Pipeline:
    """The OpenAI-compatible (or espeak-ng) models that ``settings`` configure."""
    pipeline = Pipeline(
        llm=openai.LLM(
            model=settings.llm.model,
            base_url=given(settings.llm.base_url),
            api_key=given(settings.llm.api_key),
        )
    )
    if settings.stt is not None:
        pipeline.stt = openai.STT(
            model=settings.stt.model,
            language=settings.stt_language,
            base_url=given(settings.stt.base_url),
            api_key=given(settings.stt.api_key),
        )
        pipeline.vad = load_vad(proc)
    if isinstance(settings.tts, config.EspeakSettings):
        pipeline.tts = EspeakTTS(
            voice=settings.tts.voice,
            words_per_minute=settings.tts.words_per_minute,
            program=settings.tts.program,
        )
    elif isinstance(settings.tts, config.Endpoint):
        pipeline.tts = openai.TTS(
            model=settings.tts.model,
            voice=settings.tts_voice,
            base_url=given(settings.tts.base_url),
            api_key=given(settings.tts.api_key),
        )
    return pipeline


def local_turn_handling(pipeline: Pipeline) -> TurnHandlingOptions:
    """Turns ended by the local VAD (no STT: by typed text only); interruptions by the VAD.

    Named explicitly: LiveKit Agents' defaults reach for LiveKit Cloud's turn detector and
    adaptive interruption models, which a self-hosted deployment does not have.
    """
    return TurnHandlingOptions(
        turn_detection="vad" if pipeline.vad is not None else "manual",
        interruption=InterruptionOptions(mode="vad"),
    )


# -- The session in one room -----------------------------------------------------------------

#: What the first reply is asked to do once the user is in the room.
GREETING_INSTRUCTIONS = "Greet the user in one short sentence and offer your help."
#: Attempts (one second apart) to fetch the session's tools before going on without them.
TOOL_FETCH_ATTEMPTS = 3


@dataclass
class Hooks:
    """Observers of a session, for embedding and tests; all optional.

    ``on_key`` gets the key's fingerprint (never the key); ``on_user`` the user participant
    once found; ``on_session`` the session right after it started.
    """

    on_key: Callable[[str], None] | None = None
    on_tool: Callable[[CallOutcome], None] | None = None
    on_user: Callable[[rtc.RemoteParticipant], None] | None = None
    on_session: Callable[[AgentSession[Any]], Awaitable[None] | None] | None = None
    on_turn: Callable[[str, bool], None] | None = None
    greeting: str | None = field(default=GREETING_INSTRUCTIONS)


#: The RPC methods the page calls when push-to-talk is pressed and released.
START_TURN_RPC = "start_turn"
END_TURN_RPC = "end_turn"


def register_turn_rpc(
    room: rtc.Room,
    session: AgentSession[Any],
    user_identity: str,
    on_turn: Callable[[str, bool], None] | None = None,
) -> None:
    """Push-to-talk from the user's tab: ``start_turn`` interrupts the agent's speech.

    ``end_turn`` needs nothing more here: the session's turn detection ends the user's turn.
    Calls from other participants are refused. ``on_turn`` gets the method and whether a
    speech was interrupted.
    """

    def turn(method: str) -> Callable[[rtc.RpcInvocationData], Awaitable[str]]:
        async def handle(data: rtc.RpcInvocationData) -> str:
            if data.caller_identity != user_identity:
                refused = "not this session's user"
                raise rtc.RpcError(rtc.RpcError.ErrorCode.APPLICATION_ERROR, refused)
            interrupted = False
            speech = session.current_speech
            if method == START_TURN_RPC and speech is not None and not speech.interrupted:
                try:
                    session.interrupt()
                    interrupted = True
                except RuntimeError as e:  # a speech that does not allow interruptions
                    logger.info("push-to-talk could not interrupt the agent: %s", e)
            if on_turn is not None:
                on_turn(method, interrupted)
            return "ok"

        return handle

    for method in (START_TURN_RPC, END_TURN_RPC):
        room.local_participant.register_rpc_method(method, turn(method))


async def fetch_offer(ui: UiTools) -> ToolOffer:
    """The session's tools, after a few attempts; an empty offer if the worker stays silent."""
    for attempt in range(1, TOOL_FETCH_ATTEMPTS + 1):
        try:
            return await ui.refresh()
        except WorkerError as e:
            logger.error(
                "cannot fetch the tools from the agent worker (attempt %d of %d): %s",
                attempt,
                TOOL_FETCH_ATTEMPTS,
                e,
            )
            if attempt < TOOL_FETCH_ATTEMPTS:
                await asyncio.sleep(1.0)
    logger.error("going on without UI tools: the agent can talk but not act in the tab")
    return ui.offer


async def run_session(
    ctx: JobContext, settings: config.Settings, pipeline: Pipeline, hooks: Hooks | None = None
) -> AgentSession[Any]:
    """Joins the job's room and runs the agent for the user it was dispatched for.

    The job's metadata names that user and holds a session token for their key alone; a job
    without it (dispatched by anyone but the agent worker) ends at once.
    """
    hooks = hooks or Hooks()
    try:
        grant = DispatchGrant.parse(ctx.job.metadata)
    except ValueError as e:
        logger.error("job refused: %s", e)
        ctx.shutdown(reason="no dispatch grant")
        raise
    await ctx.connect()
    participant = await wait_for_user(ctx.room, grant)
    fp = grant.key_fingerprint
    logger.info("user %s joined with key %s", participant.identity, fp, extra={"key": fp})
    if hooks.on_key is not None:
        hooks.on_key(fp)
    if hooks.on_user is not None:
        hooks.on_user(participant)

    client = WorkerClient(settings.worker_url, grant.agent_token, grant.api_key)
    ctx.add_shutdown_callback(client.aclose)
    ui = UiTools(client, on_tool=hooks.on_tool)
    agent = VoiceRelayAgent(ui, await fetch_offer(ui))
    # The tools follow the session: a handler added or removed in the tab, a reloaded catalog.
    following = asyncio.create_task(ui.follow(), name="voice-relay-follow-tools")

    async def stop_following() -> None:
        following.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await following

    ctx.add_shutdown_callback(stop_following)

    options: dict[str, Any] = {
        "llm": pipeline.llm,
        "max_tool_steps": settings.max_tool_steps,
        "turn_handling": local_turn_handling(pipeline),
    }
    for name in ("stt", "tts", "vad"):
        if getattr(pipeline, name) is not None:
            options[name] = getattr(pipeline, name)
    session: AgentSession[Any] = AgentSession(**options)

    @session.on("close")
    def _closed(ev: CloseEvent) -> None:
        # The agent serves one user: when their session ends, the job ends (and leaves).
        ctx.shutdown(reason=f"session closed ({ev.reason})")

    await session.start(
        agent,
        room=ctx.room,
        room_options=room_io.RoomOptions(
            participant_identity=participant.identity,
            audio_output=pipeline.tts is not None,
        ),
    )
    register_turn_rpc(ctx.room, session, participant.identity, hooks.on_turn)
    if hooks.on_session is not None:
        waited = hooks.on_session(session)
        if waited is not None:
            await waited
    if settings.greet and hooks.greeting is not None:
        session.generate_reply(instructions=hooks.greeting)
    return session


# -- The LiveKit server and its entrypoint ---------------------------------------------------


#: The provider this process exports its spans with, once it does.
_PROVIDER: object | None = None


def export_spans(tracing: config.Tracing | None) -> bool:
    """Exports LiveKit Agents' spans over OTLP/HTTP when ``tracing`` (the ``OTEL_*`` variables,
    read by ``config.py``) asks for it; once per process. Each tool call is LiveKit Agents'
    ``function_tool`` span, current while the tool runs: the library sends its context to the
    worker (``traceparent``), so the worker's and the relay's spans of the call are its
    children, in the same trace. What the user said and the tools' arguments and results stay
    off the spans (``allow_pii=False``). True when spans are exported."""
    global _PROVIDER
    if _PROVIDER is not None:
        return True
    if tracing is None:
        return False
    from livekit.agents import telemetry
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # The sampler (OTEL_TRACES_SAMPLER), the headers, the timeout, the batching (OTEL_BSP_*)
    # and OTEL_RESOURCE_ATTRIBUTES are the SDK's own reading of the environment.
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: tracing.service_name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=tracing.endpoint)))
    telemetry.set_tracer_provider(provider, allow_pii=False)
    _PROVIDER = provider
    logger.info(tracing.describe())
    return True


def build_server(
    settings: config.Settings,
    session_entrypoint: Callable[[JobContext], Awaitable[None]],
    *,
    setup: Callable[[JobProcess], Any] | None = None,
    load_fnc: Callable[[], float] | None = None,
) -> AgentServer:
    """An ``AgentServer`` registered under ``settings.agent_name``: dispatched only when the
    agent worker asks for it by that name, for one user.

    ``load_fnc`` tells LiveKit how busy this agent is (0 to 1); by default LiveKit Agents
    reports the machine's CPU use, and LiveKit's server sends no job to an agent whose load is
    at its target.

    Jobs run in threads of this process by default (``AGENT_JOB_EXECUTOR=thread``): one
    process, no per-job interpreter start; ``process`` isolates each job instead. Spans are
    exported when the ``OTEL_*`` variables say so (:func:`export_spans`).
    """
    export_spans(settings.tracing)
    kwargs: dict[str, Any] = {
        "job_executor_type": JobExecutorType.THREAD
        if settings.job_executor == "thread"
        else JobExecutorType.PROCESS,
        "num_idle_processes": settings.idle_processes,
        "setup_fnc": setup,
    }
    if load_fnc is not None:
        kwargs["load_fnc"] = load_fnc
    if settings.load_threshold is not None:
        threshold = settings.load_threshold
        kwargs["load_threshold"] = math.inf if threshold >= 1000 else threshold
    if settings.http_port is not None:
        kwargs["port"] = settings.http_port
    if settings.drain_timeout_s is not None:
        kwargs["drain_timeout"] = settings.drain_timeout_s
    server = AgentServer(**kwargs)
    server.rtc_session(session_entrypoint, agent_name=settings.agent_name)
    return server


def prewarm(proc: JobProcess) -> None:
    """Loads the VAD before a job arrives, when an STT will need it; a job process exports its
    own spans."""
    try:
        settings, _ = config.load()
    except config.ConfigError:
        return
    export_spans(settings.tracing)
    if settings.stt is not None:
        load_vad(proc)


async def entrypoint(ctx: JobContext) -> None:
    """The job: settings from the environment, models from the settings."""
    settings, _ = config.load()
    await run_session(ctx, settings, build_pipeline(settings, ctx.proc))


# -- The program -----------------------------------------------------------------------------

RUN_COMMANDS = ("start", "dev", "connect", "console")


def check(argv: Sequence[str], *, require_llm: bool = True) -> tuple[config.Settings, list[str]]:
    """Settings for the command in ``argv``; prints what is missing and exits when fatal."""
    command = next((a for a in argv if not a.startswith("-")), None)
    try:
        settings, notes = config.load(require_llm=require_llm)
        problems = config.livekit_problems(os.environ, argv)
        if command in ("start", "dev", "connect") and problems:
            raise config.ConfigError(problems)
    except config.ConfigError as e:
        for problem in e.problems:
            print(f"voice-relay-agent: {problem}", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG) from None
    return settings, notes


def describe(settings: config.Settings, notes: Sequence[str]) -> None:
    """One line per model (configured or not), on stderr."""
    lines = [f"worker at {settings.worker_url}, dispatched as {settings.agent_name}"]
    if settings.llm.model:
        lines.append(f"LLM {settings.llm.describe()}")
    if settings.stt is not None:
        lines.append(f"STT {settings.stt.describe()}")
    if settings.tts is not None:
        lines.append(f"TTS {settings.tts.describe()}")
    if settings.tracing is not None:
        lines.append(settings.tracing.describe())
    for line in [*lines, *notes]:
        print(f"voice-relay-agent: {line}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> None:
    """``python agent.py start|dev|connect --room R|console``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if next((a for a in args if not a.startswith("-")), None) in RUN_COMMANDS:
        settings, notes = check(args)
        describe(settings, notes)
    else:  # --help, download-files: no agent runs, nothing to check
        settings = config.Settings(
            config.DEFAULT_WORKER_URL, config.DEFAULT_AGENT_NAME, config.Endpoint(""), None, None
        )
    sys.argv = [sys.argv[0], *args]
    cli.run_app(build_server(settings, entrypoint, setup=prewarm))


if __name__ == "__main__":
    main()
