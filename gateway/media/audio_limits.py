"""What a transcription endpoint's refusal of audio as too long or too large says about its limit.

Endpoints refuse long voice in two ways: by its length (OpenAI's gpt-4o transcription models answer 400 with
``audio duration 1830.53 seconds is longer than 1400 seconds which is the maximum for this model``) and by the
size of the upload (whisper-1 answers 413 with ``Maximum content size limit (26214400) exceeded (26294972 bytes
read)``; other OpenAI-compatible servers name their limit in bytes or megabytes). :func:`too_long` reads such a
refusal, and the limit it names when it names one; the figure the refused request carried (the duration or
the bytes read) is never taken for the limit.

What was learned is kept in the same :class:`~agent.windows.WindowBook` as the models' context windows, per
endpoint and under a model key that names its unit (:func:`book_model`), so every process learns a limit once
and a restart keeps it. The book only ever lowers a figure.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

from agent.windows import WindowBook

Unit = Literal["seconds", "bytes"]

#: HTTP statuses a refusal of too much audio comes with: 413 from a proxy or the API's front, 400 from the model,
#: 422 from a local server's request validation.
_REFUSAL_STATUSES = frozenset({400, 413, 422})
_NUMBER = r"(?P<n>\d+(?:\.\d+)?)"
_TIME_UNIT = r"(?P<u>s|secs?|seconds?|min|mins|minutes?)\b"
_SIZE_UNIT = r"(?P<u>bytes|b|kb|kib|mb|mib|gb|gib)\b"
_SECONDS_PATTERNS = [
    # OpenAI: "... is longer than 1400 seconds which is the maximum for this model"
    re.compile(rf"longer than {_NUMBER} ?{_TIME_UNIT}[^.]*?\bmaximum", re.IGNORECASE),
    # "Audio duration must be between 0.1s and 64s"
    re.compile(rf"between \d+(?:\.\d+)? ?(?:s|secs?|seconds?) and {_NUMBER} ?{_TIME_UNIT}", re.IGNORECASE),
    # "maximum duration is 600 seconds", "exceeds the maximum of 1400 seconds", "max length: 30s"
    re.compile(
        rf"\b(?:maximum|max|limit)\b(?: (?:audio )?(?:duration|length))?(?: (?:is|of|allowed))*:? ?"
        rf"{_NUMBER} ?{_TIME_UNIT}",
        re.IGNORECASE,
    ),
]
_BYTES_PATTERNS = [
    # OpenAI whisper-1: "Maximum content size limit (26214400) exceeded (26294972 bytes read)"
    re.compile(rf"size limit \({_NUMBER}\) exceeded", re.IGNORECASE),
    # "exceeds maximum allowed size (104857600 bytes)", "maximum file size is 25 MB", "limit of 25MB"
    re.compile(
        rf"\b(?:maximum|max|limit)\b(?: (?:allowed|file|upload|content|request|audio))*(?: size)?"
        rf"(?: (?:is|of|allowed))*:? ?\(?{_NUMBER} ?{_SIZE_UNIT}",
        re.IGNORECASE,
    ),
]
#: Words of a refusal that is about too much audio although it names no limit ("Request Entity Too Large";
#: vLLM's "Maximum file size exceeded (parameter=audio_filesize_mb, value=27.96)" names only what it was sent).
_TOO_MUCH = re.compile(
    r"too (?:large|long|big)|longer than|\b(?:size|duration|length)\b[^.]{0,30}\bexceed"
    r"|exceeds? (?:the )?(?:maximum|max|limit)",
    re.IGNORECASE,
)
_SECONDS_PER = {
    "s": 1,
    "sec": 1,
    "secs": 1,
    "second": 1,
    "seconds": 1,
    "min": 60,
    "mins": 60,
    "minute": 60,
    "minutes": 60,
}
# Megabytes are taken as the smaller reading (10^6): a limit read a little low costs a piece more, never a refusal.
_BYTES_PER = {
    "b": 1,
    "bytes": 1,
    "kb": 1_000,
    "kib": 1_024,
    "mb": 1_000_000,
    "mib": 1_048_576,
    "gb": 1_000_000_000,
    "gib": 1_073_741_824,
}


@dataclass(frozen=True)
class AudioLimit:
    """The most audio one request may carry: whole seconds of sound, or bytes of upload."""

    unit: Unit
    value: int


@dataclass(frozen=True)
class TooLong:
    """A refusal of audio as too long or too large; ``limit`` is None when it named no limit."""

    limit: AudioLimit | None


@dataclass(frozen=True)
class AudioLimits:
    """The limits known for one model at one endpoint (None: none learned yet)."""

    seconds: int | None = None
    bytes: int | None = None

    @property
    def known(self) -> bool:
        return self.seconds is not None or self.bytes is not None

    def lowered(self, limit: AudioLimit) -> AudioLimits:
        """These limits with ``limit`` taken in where it is lower (or the first of its unit)."""
        if limit.unit == "seconds":
            return AudioLimits(min(self.seconds or limit.value, limit.value), self.bytes)
        return AudioLimits(self.seconds, min(self.bytes or limit.value, limit.value))


def too_long(status: int, detail: str) -> TooLong | None:
    """The refusal answered with ``status`` and the words ``detail`` read as one of too much audio, or None
    when it is about something else (a key, a format, a rate)."""
    if status not in _REFUSAL_STATUSES:
        return None
    limit = _named_limit(detail)
    if limit is not None:
        return TooLong(limit)
    return TooLong(None) if status == 413 or _TOO_MUCH.search(detail) else None


def _named_limit(detail: str) -> AudioLimit | None:
    """The limit ``detail`` names, seconds first (a duration refusal may also mention sizes)."""
    for pattern in _SECONDS_PATTERNS:
        if (found := pattern.search(detail)) is not None:
            seconds = math.floor(float(found["n"]) * _SECONDS_PER[found["u"].lower()])
            return AudioLimit("seconds", seconds) if seconds >= 1 else None
    for pattern in _BYTES_PATTERNS:
        if (found := pattern.search(detail)) is not None:
            unit = (found.groupdict().get("u") or "bytes").lower()
            size = math.floor(float(found["n"]) * _BYTES_PER[unit])
            return AudioLimit("bytes", size) if size >= 1 else None
    return None


def book_model(model: str, unit: Unit) -> str:
    """The model key a limit is kept under in the window book: its unit said, so it is never read as a window."""
    return f"{model} audio {unit}"


def known_limits(book: WindowBook, endpoint: str, model: str) -> AudioLimits:
    """What the book holds for ``model`` at ``endpoint`` (never waits: the book's copy in this process)."""
    return AudioLimits(
        book.learned(endpoint, book_model(model, "seconds")), book.learned(endpoint, book_model(model, "bytes"))
    )


async def learn(book: WindowBook, endpoint: str, model: str, limit: AudioLimit) -> int:
    """Keep ``limit`` for ``model`` at ``endpoint`` unless a smaller one is known; returns the one now kept."""
    return await book.learn(endpoint, book_model(model, limit.unit), limit.value)
