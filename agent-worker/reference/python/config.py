"""The reference agent's configuration from the environment, checked as a whole before it starts.

:func:`load` returns the settings and one line per piece that is not configured (what the
agent cannot do without it), or raises :class:`ConfigError` listing every problem that
stops it from starting. Nothing falls back to a fake or scripted model.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

DEFAULT_WORKER_URL = "http://127.0.0.1:3002"
#: The agent's name unless AGENT_NAME says otherwise (the worker's WORKER_AGENT_NAME must match).
DEFAULT_AGENT_NAME = "voice-relay-agent"

#: Models used against api.openai.com when no model is named. A custom base URL needs one.
OPENAI_LLM_MODEL = "gpt-4.1-mini"
OPENAI_STT_MODEL = "gpt-4o-mini-transcribe"
OPENAI_TTS_MODEL = "gpt-4o-mini-tts"
OPENAI_TTS_VOICE = "ash"

#: Sent as the API key to an OpenAI-compatible server configured without one (local
#: servers ignore it; the OpenAI client library refuses to run without any key).
NO_API_KEY = "not-set"

JobExecutor = Literal["thread", "process"]

#: The OTLP/HTTP collector's base URL when OTEL_TRACES_EXPORTER=otlp names no endpoint.
DEFAULT_OTLP_ENDPOINT = "http://localhost:4318"
#: The service name of the agent's spans unless OTEL_SERVICE_NAME says otherwise.
DEFAULT_SERVICE_NAME = "voice-relay-agent"
#: The samplers of OTEL_TRACES_SAMPLER that the OpenTelemetry SDK reads.
SAMPLERS = (
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
)


class ConfigError(Exception):
    """Configuration that stops the agent from starting; ``problems`` has one line each."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = list(problems)


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible model: where, which model, with which key."""

    model: str
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)

    def describe(self) -> str:
        return f"{self.model} at {self.base_url or 'api.openai.com'}"


@dataclass(frozen=True)
class EspeakSettings:
    program: str = "espeak-ng"
    voice: str = "en"
    words_per_minute: int = 170

    def describe(self) -> str:
        return f"espeak-ng voice {self.voice} ({self.program})"


@dataclass(frozen=True)
class Tracing:
    """Span export over OTLP/HTTP (protobuf): the traces endpoint and the service name.

    The SDK reads the other standard settings itself (``OTEL_EXPORTER_OTLP_HEADERS``, the
    timeout, ``OTEL_TRACES_SAMPLER``, ``OTEL_BSP_*``, ``OTEL_RESOURCE_ATTRIBUTES``).
    """

    endpoint: str = field(repr=False)
    service_name: str = DEFAULT_SERVICE_NAME

    def describe(self) -> str:
        """Where spans go, without the endpoint's user information or query (either may hold
        a credential)."""
        scheme, _, rest = self.endpoint.partition("://")
        authority, slash, path = rest.partition("/")
        host = authority.rpartition("@")[2]
        path = (slash + path).split("?")[0].split("#")[0]
        return f"spans of {self.service_name} to {scheme}://{host}{path} over OTLP/HTTP"


@dataclass(frozen=True)
class Settings:
    worker_url: str
    #: The name the agent registers under: LiveKit dispatches it only when asked for it by
    #: name (the agent worker's WORKER_AGENT_NAME), for one user at a time.
    agent_name: str
    llm: Endpoint
    stt: Endpoint | None
    tts: Endpoint | EspeakSettings | None
    tts_voice: str = OPENAI_TTS_VOICE
    stt_language: str = "en"
    greet: bool = True
    max_tool_steps: int = 6
    job_executor: JobExecutor = "thread"
    idle_processes: int = 1
    load_threshold: float | None = None
    http_port: int | None = None
    drain_timeout_s: int | None = None
    #: Span export, or ``None`` when the ``OTEL_*`` variables do not ask for it.
    tracing: Tracing | None = None


def _get(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    if value is None:
        return None
    value = value.strip()
    return value or None


def _flag(env: Mapping[str, str], name: str, default: bool, problems: list[str]) -> bool:
    value = _get(env, name)
    if value is None:
        return default
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    problems.append(f"{name}={value!r} is not a boolean (use 1 or 0)")
    return default


def _int(
    env: Mapping[str, str], name: str, default: int, lo: int, hi: int, problems: list[str]
) -> int:
    value = _get(env, name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        number = lo - 1
    if not lo <= number <= hi:
        problems.append(f"{name}={value!r} must be an integer from {lo} to {hi}")
        return default
    return number


def _endpoint(
    env: Mapping[str, str],
    prefix: str,
    default_model: str,
    problems: list[str],
) -> Endpoint | None:
    """An endpoint from ``<prefix>_BASE_URL``/``_MODEL``/``_API_KEY`` (or ``OPENAI_API_KEY``).

    ``None`` when nothing names one: neither a base URL, a model, nor an API key.
    """
    base_url = _get(env, f"{prefix}_BASE_URL")
    model = _get(env, f"{prefix}_MODEL")
    api_key = _get(env, f"{prefix}_API_KEY") or _get(env, "OPENAI_API_KEY")
    if base_url is None and model is None and api_key is None:
        return None
    if base_url is not None:
        if not base_url.startswith(("http://", "https://")):
            problems.append(f"{prefix}_BASE_URL={base_url!r} is not an http(s) URL")
            return None
        if model is None:
            problems.append(f"{prefix}_MODEL is required with {prefix}_BASE_URL={base_url}")
            return None
        return Endpoint(model=model, base_url=base_url, api_key=api_key or NO_API_KEY)
    if api_key is None:
        problems.append(
            f"{prefix}_MODEL={model} names no endpoint: set {prefix}_BASE_URL for an "
            "OpenAI-compatible server, or OPENAI_API_KEY for OpenAI"
        )
        return None
    return Endpoint(model=model or default_model, api_key=api_key)


def _tracing(env: Mapping[str, str], problems: list[str]) -> Tracing | None:
    """Span export as the standard OpenTelemetry variables ask for it, read as the relay and
    the worker read them: on with ``OTEL_TRACES_EXPORTER=otlp`` or an OTLP endpoint
    (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, the full URL, or ``OTEL_EXPORTER_OTLP_ENDPOINT``,
    the collector's base URL) and no exporter named; off with ``OTEL_TRACES_EXPORTER=none``,
    ``OTEL_SDK_DISABLED=true`` or none of them. What this agent cannot do (another exporter,
    another protocol, an unknown sampler, a ratio outside 0 to 1) is a problem, not a silent
    fallback."""
    if (_get(env, "OTEL_SDK_DISABLED") or "").lower() == "true":
        return None
    traces_endpoint = _get(env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    base = _get(env, "OTEL_EXPORTER_OTLP_ENDPOINT")
    exporter = _get(env, "OTEL_TRACES_EXPORTER")
    if exporter is None:
        if traces_endpoint is None and base is None:
            return None
    elif exporter == "none":
        return None
    elif exporter != "otlp":
        problems.append(
            f"OTEL_TRACES_EXPORTER={exporter!r}: this agent exports spans over OTLP only "
            "(otlp or none)"
        )
        return None
    protocol = _get(env, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or _get(
        env, "OTEL_EXPORTER_OTLP_PROTOCOL"
    )
    if protocol is not None and protocol != "http/protobuf":
        problems.append(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: this agent sends OTLP over HTTP with "
            "protobuf only (http/protobuf)"
        )
    sampler = _get(env, "OTEL_TRACES_SAMPLER")
    if sampler is not None and sampler not in SAMPLERS:
        problems.append(f"OTEL_TRACES_SAMPLER={sampler!r} is not one of {', '.join(SAMPLERS)}")
    ratio = _get(env, "OTEL_TRACES_SAMPLER_ARG")
    if sampler is not None and sampler.endswith("traceidratio") and ratio is not None:
        try:
            in_range = 0.0 <= float(ratio) <= 1.0
        except ValueError:
            in_range = False
        if not in_range:
            problems.append(f"OTEL_TRACES_SAMPLER_ARG={ratio!r}: a ratio from 0 to 1 for {sampler}")
    if traces_endpoint is not None:
        endpoint = traces_endpoint
    else:
        endpoint = (base or DEFAULT_OTLP_ENDPOINT).rstrip("/") + "/v1/traces"
    if not endpoint.startswith(("http://", "https://")):
        # Named by its variable only: the value may carry a credential.
        named = (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
            if traces_endpoint
            else "OTEL_EXPORTER_OTLP_ENDPOINT"
        )
        problems.append(f"{named} is not an http(s) URL")
        return None
    return Tracing(endpoint, _get(env, "OTEL_SERVICE_NAME") or DEFAULT_SERVICE_NAME)


def livekit_problems(env: Mapping[str, str], argv: Sequence[str] = ()) -> list[str]:
    """What is missing to reach the LiveKit server (LiveKit's own variable names).

    A value given as a command-line option (``--url``, ``--api-key``, ``--api-secret``)
    counts as set.
    """
    problems = []
    for name, flag in (
        ("LIVEKIT_URL", "--url"),
        ("LIVEKIT_API_KEY", "--api-key"),
        ("LIVEKIT_API_SECRET", "--api-secret"),
    ):
        if _get(env, name) is None and not any(a == flag or a.startswith(flag + "=") for a in argv):
            problems.append(f"{name} is not set: the agent cannot join LiveKit rooms")
    return problems


def load(
    env: Mapping[str, str] | None = None,
    *,
    require_llm: bool = True,
) -> tuple[Settings, list[str]]:
    """Settings from ``env`` (default ``os.environ``) and the notes on what is missing.

    Raises :class:`ConfigError` with every problem found: a secret the agent must not hold, a
    missing LLM (unless ``require_llm`` is false: a caller that brings its own model),
    malformed values.
    """
    env = os.environ if env is None else env
    problems: list[str] = []
    notes: list[str] = []

    worker_url = _get(env, "WORKER_URL") or DEFAULT_WORKER_URL
    if not worker_url.startswith(("http://", "https://")):
        problems.append(f"WORKER_URL={worker_url!r} is not an http(s) URL")

    for held in ("RELAY_AGENT_SECRET", "RELAY_WORKER_SECRET", "RELAY_OPERATOR_SECRET"):
        if _get(env, held) is not None:
            problems.append(
                f"{held} is set: the agent holds no secret of the relay's; each job gets a "
                "session token for its one user in its dispatch (unset it here)"
            )
    agent_name = _get(env, "AGENT_NAME") or DEFAULT_AGENT_NAME
    if len(agent_name) > 128 or not all(c.isalnum() or c in "-_." for c in agent_name):
        problems.append(f"AGENT_NAME={agent_name!r} must be letters, digits, '-', '_' or '.'")

    llm = _endpoint(env, "AGENT_LLM", OPENAI_LLM_MODEL, problems)
    if llm is None and require_llm:
        problems.append(
            "no LLM: set AGENT_LLM_BASE_URL and AGENT_LLM_MODEL (an OpenAI-compatible "
            "server, AGENT_LLM_API_KEY if it needs one) or OPENAI_API_KEY; without a model "
            "the agent cannot decide anything, so it does not start"
        )

    stt: Endpoint | None = None
    stt_kind = (_get(env, "AGENT_STT") or "openai").lower()
    if stt_kind == "openai":
        stt = _endpoint(env, "AGENT_STT", OPENAI_STT_MODEL, problems)
        if stt is None:
            notes.append(
                "no STT (set AGENT_STT_BASE_URL and AGENT_STT_MODEL, or OPENAI_API_KEY): "
                "the agent cannot hear the user; it greets and answers text typed in the room"
            )
    elif stt_kind == "none":
        notes.append("AGENT_STT=none: the agent cannot hear the user; it answers typed text only")
    else:
        problems.append(f"AGENT_STT={stt_kind!r} is not one of openai, none")

    tts: Endpoint | EspeakSettings | None = None
    tts_kind = _get(env, "AGENT_TTS")
    tts_kind = tts_kind.lower() if tts_kind else None
    if tts_kind == "espeak":
        program = _get(env, "AGENT_ESPEAK_BIN") or "espeak-ng"
        if shutil.which(program) is None:
            problems.append(
                f"AGENT_TTS=espeak but {program} is not installed or not on PATH "
                "(apt-get install espeak-ng)"
            )
        tts = EspeakSettings(
            program=program,
            voice=_get(env, "AGENT_ESPEAK_VOICE") or "en",
            words_per_minute=_int(env, "AGENT_ESPEAK_WPM", 170, 80, 450, problems),
        )
    elif tts_kind in (None, "openai"):
        tts = _endpoint(env, "AGENT_TTS", OPENAI_TTS_MODEL, problems)
        if tts is None:
            notes.append(
                "no TTS (set AGENT_TTS=espeak, or AGENT_TTS_BASE_URL and AGENT_TTS_MODEL, or "
                "OPENAI_API_KEY): the agent cannot speak; its replies reach the room as text only"
            )
    elif tts_kind == "none":
        notes.append("AGENT_TTS=none: the agent cannot speak; its replies reach the room as text")
    else:
        problems.append(f"AGENT_TTS={tts_kind!r} is not one of espeak, openai, none")

    executor = (_get(env, "AGENT_JOB_EXECUTOR") or "thread").lower()
    if executor not in ("thread", "process"):
        problems.append(f"AGENT_JOB_EXECUTOR={executor!r} is not one of thread, process")
        executor = "thread"

    load_threshold: float | None = None
    raw_threshold = _get(env, "AGENT_LOAD_THRESHOLD")
    if raw_threshold is not None:
        try:
            load_threshold = float(raw_threshold)
        except ValueError:
            load_threshold = math.nan
        if math.isnan(load_threshold) or load_threshold <= 0:
            problems.append(f"AGENT_LOAD_THRESHOLD={raw_threshold!r} must be a positive number")
            load_threshold = None

    raw_port = _get(env, "AGENT_HTTP_PORT")
    http_port = _int(env, "AGENT_HTTP_PORT", 0, 0, 65535, problems) if raw_port else None

    raw_drain = _get(env, "AGENT_DRAIN_TIMEOUT")
    drain_timeout_s = _int(env, "AGENT_DRAIN_TIMEOUT", 0, 0, 86400, problems) if raw_drain else None

    settings = Settings(
        worker_url=worker_url,
        agent_name=agent_name,
        llm=llm or Endpoint(model=""),
        stt=stt,
        tts=tts,
        tts_voice=_get(env, "AGENT_TTS_VOICE") or OPENAI_TTS_VOICE,
        stt_language=_get(env, "AGENT_STT_LANGUAGE") or "en",
        greet=_flag(env, "AGENT_GREETING", True, problems),
        max_tool_steps=_int(env, "AGENT_MAX_TOOL_STEPS", 6, 1, 50, problems),
        job_executor="process" if executor == "process" else "thread",
        idle_processes=_int(env, "AGENT_IDLE_PROCESSES", 1, 0, 16, problems),
        load_threshold=load_threshold,
        http_port=http_port,
        drain_timeout_s=drain_timeout_s,
        tracing=_tracing(env, problems),
    )
    if problems:
        raise ConfigError(problems)
    return settings, notes
