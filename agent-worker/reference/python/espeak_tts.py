"""A local text-to-speech for LiveKit Agents that runs the ``espeak-ng`` program.

``espeak-ng --stdout`` writes a WAV stream (16-bit mono PCM, 22 050 Hz for its own voices);
this TTS reads the header, then pushes the PCM to LiveKit Agents' audio emitter as it
arrives, so playback starts before the whole sentence is synthesized. The text goes to the
program on stdin, never on its command line. Robotic, but real speech, and it works offline.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import struct
import uuid
from typing import Any

from livekit.agents import (
    DEFAULT_API_CONNECT_OPTIONS,
    APIConnectionError,
    APIConnectOptions,
    APIError,
    tts,
)

#: The sample rate of espeak-ng's own voices (MBROLA voices differ; they are refused).
ESPEAK_SAMPLE_RATE = 22050

#: How long one synthesis may run before the program is killed.
SYNTHESIS_TIMEOUT_S = 60.0

_READ_SIZE = 4096


class WavStreamError(ValueError):
    """The program's output is not the 16-bit mono PCM WAV stream expected."""


def parse_wav_header(header: bytes) -> tuple[int, int, int] | None:
    """``(sample_rate, channels, offset of the PCM data)`` of a streamed WAV header.

    ``None`` when ``header`` is too short to hold the ``data`` chunk's start yet. The sizes
    in a streamed header are placeholders and are ignored.
    """
    if len(header) < 12:
        return None
    if header[:4] != b"RIFF" or header[8:12] != b"WAVE":
        raise WavStreamError("not a RIFF/WAVE stream")
    pos = 12
    rate = channels = bits = 0
    while True:
        if len(header) < pos + 8:
            return None
        chunk_id = header[pos : pos + 4]
        (size,) = struct.unpack("<I", header[pos + 4 : pos + 8])
        body = pos + 8
        if chunk_id == b"data":
            if rate == 0:
                raise WavStreamError("the data chunk comes before the fmt chunk")
            if bits != 16:
                raise WavStreamError(f"{bits}-bit samples, expected 16-bit PCM")
            return rate, channels, body
        if len(header) < body + size:
            return None
        if chunk_id == b"fmt ":
            fmt, channels, rate = struct.unpack("<HHI", header[body : body + 8])
            (bits,) = struct.unpack("<H", header[body + 14 : body + 16])
            if fmt != 1:
                raise WavStreamError(f"WAV format {fmt}, expected PCM (1)")
        pos = body + size + (size & 1)


class EspeakTTS(tts.TTS[Any]):
    """``espeak-ng`` as a LiveKit Agents TTS (non-streaming: one synthesis per sentence)."""

    def __init__(
        self,
        *,
        voice: str = "en",
        words_per_minute: int = 170,
        program: str = "espeak-ng",
    ) -> None:
        super().__init__(
            capabilities=tts.TTSCapabilities(streaming=False),
            sample_rate=ESPEAK_SAMPLE_RATE,
            num_channels=1,
        )
        resolved = shutil.which(program)
        if resolved is None:
            raise FileNotFoundError(f"{program} is not installed or not on PATH")
        self._program = resolved
        self._voice = voice
        self._wpm = words_per_minute

    @property
    def model(self) -> str:
        return f"espeak-ng/{self._voice}"

    @property
    def provider(self) -> str:
        return "espeak-ng"

    def command(self) -> list[str]:
        """The program's command line (the text itself is written to its stdin)."""
        return [
            self._program,
            "--stdout",
            "-b",
            "1",
            "-v",
            self._voice,
            "-s",
            str(self._wpm),
            "--stdin",
        ]

    def synthesize(
        self, text: str, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS
    ) -> EspeakChunkedStream:
        return EspeakChunkedStream(tts=self, input_text=text, conn_options=conn_options)


class EspeakChunkedStream(tts.ChunkedStream):
    def __init__(self, *, tts: EspeakTTS, input_text: str, conn_options: APIConnectOptions) -> None:
        super().__init__(tts=tts, input_text=input_text, conn_options=conn_options)
        self._espeak = tts

    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        try:
            proc = await asyncio.create_subprocess_exec(
                *self._espeak.command(),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as e:
            raise APIConnectionError(f"cannot run espeak-ng: {e}", retryable=False) from e
        try:
            async with asyncio.timeout(SYNTHESIS_TIMEOUT_S):
                await self._pump(proc, output_emitter)
        except TimeoutError as e:
            raise APIError("espeak-ng took too long", retryable=False) from e
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()

    async def _pump(
        self, proc: asyncio.subprocess.Process, output_emitter: tts.AudioEmitter
    ) -> None:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        stderr_task = asyncio.create_task(proc.stderr.read())
        proc.stdin.write(self.input_text.encode("utf-8"))
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            await proc.stdin.drain()
        proc.stdin.close()

        header = b""
        started = False
        odd = b""
        while chunk := await proc.stdout.read(_READ_SIZE):
            if not started:
                header += chunk
                try:
                    parsed = parse_wav_header(header)
                except WavStreamError as e:
                    raise APIError(f"espeak-ng output: {e}", retryable=False) from e
                if parsed is None:
                    continue
                rate, channels, offset = parsed
                if rate != ESPEAK_SAMPLE_RATE or channels != 1:
                    raise APIError(
                        f"espeak-ng voice gives {rate} Hz x{channels}; "
                        f"only {ESPEAK_SAMPLE_RATE} Hz mono voices are supported",
                        retryable=False,
                    )
                output_emitter.initialize(
                    request_id=uuid.uuid4().hex[:12],
                    sample_rate=rate,
                    num_channels=1,
                    mime_type="audio/pcm",
                )
                started = True
                chunk = header[offset:]
            data = odd + chunk
            cut = len(data) - (len(data) & 1)
            odd = data[cut:]
            if cut:
                output_emitter.push(data[:cut])

        code = await proc.wait()
        stderr = (await stderr_task).decode("utf-8", "replace").strip()
        if code != 0:
            raise APIError(f"espeak-ng exited with {code}: {stderr[:200]}", retryable=False)
        if not started:
            raise APIError("espeak-ng wrote no audio", retryable=False)
