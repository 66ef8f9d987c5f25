"""Configuration: what is missing is said clearly, and a missing LLM stops the agent."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import agent
import config

AGENT = Path(__file__).resolve().parents[1] / "agent.py"

SECRET = "ws-0123456789abcdef0123"


def load(**env: str) -> tuple[config.Settings, list[str]]:
    return config.load(env)


def problems(**env: str) -> list[str]:
    with pytest.raises(config.ConfigError) as e:
        config.load(env)
    return e.value.problems


def test_nothing_configured_names_every_fatal_problem() -> None:
    found = problems()
    assert len(found) == 1
    assert found[0].startswith("no LLM:")
    assert "does not start" in found[0]


@pytest.mark.parametrize(
    "held", ["RELAY_AGENT_SECRET", "RELAY_WORKER_SECRET", "RELAY_OPERATOR_SECRET"]
)
def test_the_agent_refuses_to_hold_a_relay_secret(held: str) -> None:
    found = problems(**{held: SECRET}, OPENAI_API_KEY="sk-test")
    assert len(found) == 1 and found[0].startswith(f"{held} is set")
    assert "session token" in found[0] and SECRET not in found[0]


def test_openai_key_alone_configures_every_model() -> None:
    settings, notes = load(OPENAI_API_KEY="sk-test")
    assert notes == []
    assert settings.agent_name == config.DEFAULT_AGENT_NAME
    assert settings.worker_url == config.DEFAULT_WORKER_URL
    assert settings.llm == config.Endpoint(model=config.OPENAI_LLM_MODEL, api_key="sk-test")
    assert settings.stt is not None and settings.stt.model == config.OPENAI_STT_MODEL
    assert isinstance(settings.tts, config.Endpoint)
    assert settings.tts.model == config.OPENAI_TTS_MODEL
    assert "sk-test" not in repr(settings)


def test_local_llm_without_stt_or_tts_says_what_the_agent_cannot_do() -> None:
    settings, notes = load(
        AGENT_NAME="helper-7",
        AGENT_LLM_BASE_URL="http://127.0.0.1:11434/v1",
        AGENT_LLM_MODEL="llama3.2",
        WORKER_URL="http://127.0.0.1:4002",
    )
    assert settings.agent_name == "helper-7"
    assert settings.worker_url == "http://127.0.0.1:4002"
    assert settings.llm.base_url == "http://127.0.0.1:11434/v1"
    assert settings.llm.api_key == config.NO_API_KEY
    assert settings.stt is None and settings.tts is None
    assert len(notes) == 2
    assert notes[0].startswith("no STT") and "cannot hear" in notes[0]
    assert notes[1].startswith("no TTS") and "cannot speak" in notes[1]


def test_espeak_tts() -> None:
    settings, notes = load(
        OPENAI_API_KEY="sk-test",
        AGENT_TTS="espeak",
        AGENT_STT="none",
        AGENT_ESPEAK_VOICE="en-gb",
    )
    assert settings.tts == config.EspeakSettings(voice="en-gb")
    assert settings.stt is None
    assert notes == ["AGENT_STT=none: the agent cannot hear the user; it answers typed text only"]


def test_malformed_values_are_each_named() -> None:
    found = problems(
        AGENT_NAME="has space",
        AGENT_LLM_BASE_URL="http://127.0.0.1:8000/v1",
        AGENT_STT="whisper",
        AGENT_TTS="espeak",
        AGENT_ESPEAK_BIN="no-such-espeak-program",
        AGENT_GREETING="maybe",
        AGENT_MAX_TOOL_STEPS="0",
        AGENT_JOB_EXECUTOR="fiber",
        WORKER_URL="127.0.0.1:3002",
    )
    text = "\n".join(found)
    for expected in (
        "AGENT_LLM_MODEL is required with AGENT_LLM_BASE_URL",
        "no LLM:",
        "AGENT_STT='whisper'",
        "no-such-espeak-program is not installed",
        "AGENT_GREETING='maybe'",
        "AGENT_MAX_TOOL_STEPS='0'",
        "AGENT_JOB_EXECUTOR='fiber'",
        "WORKER_URL='127.0.0.1:3002'",
        "AGENT_NAME='has space'",
    ):
        assert expected in text, expected


def test_livekit_settings_or_flags() -> None:
    assert len(config.livekit_problems({})) == 3
    assert (
        config.livekit_problems(
            {}, ["start", "--url", "ws://x", "--api-key=k", "--api-secret", "s"]
        )
        == []
    )
    env = {"LIVEKIT_URL": "ws://x", "LIVEKIT_API_KEY": "k", "LIVEKIT_API_SECRET": "s"}
    assert config.livekit_problems(env) == []


def run_agent(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", "/tmp"),
        # The modules these tests import (this checkout's), not whatever the venv installed.
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
    }
    return subprocess.run(
        [sys.executable, str(AGENT), *args],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_start_without_configuration_exits_with_the_reasons() -> None:
    done = run_agent("start")
    assert done.returncode == agent.EXIT_CONFIG
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith("voice-relay-agent: no LLM:")
    assert done.stdout == ""


def test_start_without_livekit_names_each_variable() -> None:
    done = run_agent("start", OPENAI_API_KEY="sk-test")
    assert done.returncode == agent.EXIT_CONFIG
    for name in ("LIVEKIT_URL", "LIVEKIT_API_KEY", "LIVEKIT_API_SECRET"):
        assert f"voice-relay-agent: {name} is not set" in done.stderr
    assert "sk-test" not in done.stderr
