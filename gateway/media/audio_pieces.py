"""A voice too long for a transcription endpoint, cut into consecutive pieces that each fit its limits.

The voice is decoded with PyAV (FFmpeg inside its wheels: Telegram's OGG/Opus, MP3, M4A, WAV, WebM all read
the same), mixed down to 16 kHz mono — what Whisper-family models hear anyway — and re-encoded piece after
piece as MP3 at 32 kbit/s, a format every OpenAI-compatible endpoint takes. Decoding streams through a small
FIFO, so an hour of voice never sits in memory as raw samples.

A piece is planned :data:`SAFETY` under the limit: encoder padding, the container's own bytes and the form
around the upload all count at the endpoint. A byte limit is checked on the pieces as encoded, and the cut is
redone with shorter pieces when one came out too heavy (speech at a variable bit rate can run above its
average). The work is CPU-bound: callers run it in a thread.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from fractions import Fraction

import av
import av.error
from av.audio.frame import AudioFrame
from av.audio.stream import AudioStream

from gateway.media.audio_limits import AudioLimits

PIECE_RATE = 16_000
PIECE_BIT_RATE = 32_000
PIECE_MIME = "audio/mpeg"
PIECE_SUFFIX = ".mp3"
_PIECE_CODEC = "libmp3lame"
_PIECE_FORMAT = "mp3"
_PIECE_BYTES_PER_SECOND = PIECE_BIT_RATE // 8
#: A piece is planned this share of a limit.
SAFETY = 0.9
#: Bytes the multipart form around a piece takes (boundaries, the model field, headers of the part).
FORM_BYTES = 2_048
#: A limit that leaves pieces shorter than this is no limit to work within: it is reported, not obeyed.
MIN_PIECE_SECONDS = 1.0
#: Times a cut is redone with pieces half as long before a byte limit is given up on.
_MAX_RECUTS = 4


class CannotCut(Exception):
    """The voice cannot be cut into pieces: not decodable as audio, or the limit leaves no room for a piece."""


@dataclass(frozen=True)
class Piece:
    """One piece of the voice, encoded: where it starts in the voice and how long it is, in seconds."""

    data: bytes
    start: float
    seconds: float

    @property
    def end(self) -> float:
        return self.start + self.seconds


def over_limits(size: int, seconds: float | None, limits: AudioLimits) -> bool:
    """Whether a voice of ``size`` bytes and ``seconds`` (None: not known) would be refused as it is."""
    if limits.bytes is not None and size + FORM_BYTES > limits.bytes:
        return True
    return limits.seconds is not None and seconds is not None and seconds > limits.seconds * SAFETY


def planned_seconds(limits: AudioLimits) -> float:
    """How long a piece may be under every known limit; raises :class:`CannotCut` when that is too short."""
    room = [limits.seconds * SAFETY] if limits.seconds is not None else []
    if limits.bytes is not None:
        room.append((limits.bytes * SAFETY - FORM_BYTES) / _PIECE_BYTES_PER_SECOND)
    seconds = min(room, default=float("inf"))
    if seconds < MIN_PIECE_SECONDS:
        raise CannotCut(f"its limit leaves pieces of {max(seconds, 0.0):.1f} s, too short to transcribe")
    return seconds


def audio_seconds(data: bytes) -> float:
    """How long the voice in ``data`` is: from its container when it says, else by decoding it all."""
    try:
        with av.open(io.BytesIO(data), mode="r") as source:
            if not source.streams.audio:
                raise CannotCut("it holds no audio")
            if source.duration:
                return float(source.duration) / av.time_base
            stream = source.streams.audio[0]
            if stream.duration and stream.time_base:
                return float(stream.duration * stream.time_base)
            return sum(frame.samples / (frame.sample_rate or PIECE_RATE) for frame in source.decode(stream))
    except (av.error.FFmpegError, ValueError) as error:
        raise CannotCut(f"it could not be decoded as audio ({type(error).__name__})") from error


def pieces_within(data: bytes, limits: AudioLimits, *, start: float = 0.0) -> list[Piece]:
    """The voice from ``start`` seconds on, cut into pieces under every limit in ``limits``."""
    seconds = planned_seconds(limits)
    for _ in range(_MAX_RECUTS):
        pieces = cut(data, seconds=seconds, start=start)
        if limits.bytes is None or all(len(piece.data) + FORM_BYTES <= limits.bytes for piece in pieces):
            return pieces
        seconds /= 2
        if seconds < MIN_PIECE_SECONDS:
            break
    raise CannotCut("its pieces stay over the endpoint's size limit however short they are cut")


def cut(data: bytes, *, seconds: float, start: float = 0.0) -> list[Piece]:
    """The voice from ``start`` seconds on, in consecutive pieces of ``seconds`` (the last one shorter)."""
    try:
        with av.open(io.BytesIO(data), mode="r") as source:
            if not source.streams.audio:
                raise CannotCut("it holds no audio")
            pieces = _Pieces(round(seconds * PIECE_RATE), round(start * PIECE_RATE))
            resampler = av.AudioResampler(format="s16p", layout="mono", rate=PIECE_RATE)
            for frame in source.decode(source.streams.audio[0]):
                pieces.feed(resampler.resample(frame))
            pieces.feed(resampler.resample(None))
            return pieces.finish()
    except (av.error.FFmpegError, ValueError) as error:
        raise CannotCut(f"it could not be decoded as audio ({type(error).__name__})") from error


class _Pieces:
    """Samples in, pieces out: the open piece takes samples until it holds its share, then the next one opens."""

    def __init__(self, share: int, skip: int) -> None:
        self.share = max(share, 1)
        self.skip = skip
        self.next_start = skip
        self.done: list[Piece] = []
        self.fifo = av.AudioFifo()
        self.open: _Writer | None = None

    def feed(self, frames: list[AudioFrame]) -> None:
        for frame in frames:
            frame.pts = None  # the FIFO checks timing continuity; the pieces time themselves
            self.fifo.write(frame)
        while self.fifo.samples:
            if self.skip:
                dropped = self.fifo.read(min(self.skip, self.fifo.samples))
                self.skip -= dropped.samples if dropped is not None else self.skip
                continue
            if self.open is None:
                self.open = _Writer(self.next_start)
            taken = self.fifo.read(min(self.share - self.open.samples, self.fifo.samples))
            if taken is None:
                break
            self.open.add(taken)
            if self.open.samples >= self.share:
                self._close()

    def finish(self) -> list[Piece]:
        if self.open is not None and self.open.samples:
            self._close()
        if not self.done:
            raise CannotCut("no sound could be decoded from it" if not self.skip else "it ends before that point")
        return self.done

    def _close(self) -> None:
        assert self.open is not None
        piece = self.open.close()
        self.done.append(piece)
        self.next_start += round(piece.seconds * PIECE_RATE)
        self.open = None


class _Writer:
    """One piece being encoded into MP3 in memory."""

    def __init__(self, start_sample: int) -> None:
        self.start_sample = start_sample
        self.samples = 0
        self.buffer = io.BytesIO()
        self.container = av.open(self.buffer, mode="w", format=_PIECE_FORMAT)
        stream = self.container.add_stream(_PIECE_CODEC, rate=PIECE_RATE)
        assert isinstance(stream, AudioStream)  # an audio codec makes an audio stream
        self.stream = stream
        self.stream.layout = "mono"
        self.stream.bit_rate = PIECE_BIT_RATE

    def add(self, frame: AudioFrame) -> None:
        frame.pts = self.samples
        frame.time_base = Fraction(1, PIECE_RATE)
        self.container.mux(self.stream.encode(frame))
        self.samples += frame.samples

    def close(self) -> Piece:
        self.container.mux(self.stream.encode(None))
        self.container.close()
        return Piece(self.buffer.getvalue(), self.start_sample / PIECE_RATE, self.samples / PIECE_RATE)
