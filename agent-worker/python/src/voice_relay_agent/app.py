"""The reference agent as a program: ``python -m voice_relay_agent start|dev|connect|console``.

Models come from the environment (see :mod:`voice_relay_agent.config`): an OpenAI-compatible
LLM, STT and TTS, or the local espeak-ng TTS. LiveKit Agents plugins must be registered on
the main thread, so they are imported here, at the top, before any job thread starts.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from livekit.agents import NOT_GIVEN, JobContext, JobProcess, NotGivenOr, cli, stt, tts, vad
from livekit.plugins import openai, silero

from . import config
from .agent import (
    RUN_COMMANDS,
    Pipeline,
    build_server,
    check,
    describe,
    placeholder_settings,
    run_session,
)
from .espeak import EspeakTTS


def build_pipeline(settings: config.Settings, proc: JobProcess | None = None) -> Pipeline:
    """The OpenAI-compatible (or espeak-ng) models that ``settings`` configure."""
    model = openai.LLM(
        model=settings.llm.model,
        base_url=given(settings.llm.base_url),
        api_key=given(settings.llm.api_key),
    )
    speech_to_text: stt.STT[Any] | None = None
    detector: vad.VAD | None = None
    if settings.stt is not None:
        speech_to_text = openai.STT(
            model=settings.stt.model,
            language=settings.stt_language,
            base_url=given(settings.stt.base_url),
            api_key=given(settings.stt.api_key),
        )
        detector = load_vad(proc)
    text_to_speech: tts.TTS[Any] | None = None
    if isinstance(settings.tts, config.EspeakSettings):
        text_to_speech = EspeakTTS(
            voice=settings.tts.voice,
            words_per_minute=settings.tts.words_per_minute,
            program=settings.tts.program,
        )
    elif isinstance(settings.tts, config.Endpoint):
        text_to_speech = openai.TTS(
            model=settings.tts.model,
            voice=settings.tts_voice,
            base_url=given(settings.tts.base_url),
            api_key=given(settings.tts.api_key),
        )
    return Pipeline(llm=model, stt=speech_to_text, tts=text_to_speech, vad=detector)


def given(value: str | None) -> NotGivenOr[str]:
    """``value``, or LiveKit's "not given" so that the client's own default applies."""
    return NOT_GIVEN if value is None else value


def load_vad(proc: JobProcess | None) -> vad.VAD:
    """Silero VAD (its model ships in the wheel), loaded once per job process."""
    if proc is not None and isinstance(proc.userdata.get("vad"), vad.VAD):
        detector: vad.VAD = proc.userdata["vad"]
        return detector
    detector = silero.VAD.load()
    if proc is not None:
        proc.userdata["vad"] = detector
    return detector


def prewarm(proc: JobProcess) -> None:
    """Loads the VAD before a job arrives, when an STT will need it."""
    try:
        settings, _ = config.load()
    except config.ConfigError:
        return
    if settings.stt is not None:
        load_vad(proc)


async def entrypoint(ctx: JobContext) -> None:
    """The job: settings from the environment, models from the settings."""
    settings, _ = config.load()
    await run_session(ctx, settings, build_pipeline(settings, ctx.proc))


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m voice_relay_agent start|dev|connect --room R|console``."""
    args = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in args if not a.startswith("-")), None)
    if command in RUN_COMMANDS:
        settings, notes = check(args)
        describe(settings, notes)
    else:
        settings = placeholder_settings()
    sys.argv = [sys.argv[0], *args]
    cli.run_app(build_server(settings, entrypoint, setup=prewarm))
