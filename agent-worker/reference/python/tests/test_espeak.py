"""The espeak-ng TTS gives real, non-silent speech as LiveKit audio frames."""

from __future__ import annotations

import asyncio
import shutil
import struct

import numpy as np
import pytest

from espeak_tts import (
    ESPEAK_SAMPLE_RATE,
    EspeakTTS,
    WavStreamError,
    parse_wav_header,
)

needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng missing")


def wav_header(rate: int = 22050, channels: int = 1, bits: int = 16) -> bytes:
    fmt = struct.pack("<HHIIHH", 1, channels, rate, rate * channels * bits // 8, channels * 2, bits)
    return (
        b"RIFF" + struct.pack("<I", 0x7FFFFFFF) + b"WAVE"
        + b"fmt " + struct.pack("<I", len(fmt)) + fmt
        + b"data" + struct.pack("<I", 0x7FFFF000)
    )  # fmt: skip


def test_parse_wav_header() -> None:
    header = wav_header()
    assert parse_wav_header(header) == (22050, 1, 44)
    for cut in range(len(header)):
        assert parse_wav_header(header[:cut]) is None
    assert parse_wav_header(header + b"\x00\x01") == (22050, 1, 44)
    with pytest.raises(WavStreamError):
        parse_wav_header(b"OggS" + b"\x00" * 60)
    with pytest.raises(WavStreamError):
        parse_wav_header(wav_header(bits=8))


@needs_espeak
async def test_espeak_speaks_non_silent_frames() -> None:
    tts = EspeakTTS()
    frames = []
    async with asyncio.timeout(30):
        async with tts.synthesize("Hello from the agent. You drew the Tower.") as stream:
            async for audio in stream:
                frames.append(audio.frame)
    assert frames
    assert all(f.sample_rate == ESPEAK_SAMPLE_RATE and f.num_channels == 1 for f in frames)
    pcm = np.concatenate([np.frombuffer(f.data, dtype=np.int16) for f in frames])
    seconds = pcm.size / ESPEAK_SAMPLE_RATE
    rms = float(np.sqrt(np.mean((pcm / 32768.0) ** 2)))
    assert 1.0 < seconds < 10.0
    assert rms > 0.02
    assert int(np.abs(pcm).max()) > 3000


@needs_espeak
async def test_espeak_reads_text_from_stdin_not_argv() -> None:
    tts = EspeakTTS()
    assert tts.command()[-1] == "--stdin"
    frames = []
    async with asyncio.timeout(30):
        async with tts.synthesize("--version -w /tmp/x") as stream:
            async for audio in stream:
                frames.append(audio.frame)
    assert sum(f.samples_per_channel for f in frames) > ESPEAK_SAMPLE_RATE // 2


def test_missing_program_is_refused() -> None:
    with pytest.raises(FileNotFoundError):
        EspeakTTS(program="no-such-espeak-program")
