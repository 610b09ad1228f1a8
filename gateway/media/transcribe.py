"""Voice and audio to text through an OpenAI-compatible ``POST {base_url}/audio/transcriptions``.

The request is the one OpenAI documents and local servers (whisper.cpp's server, faster-whisper
servers, vLLM) copy: multipart form data with ``file`` (the audio, named with an extension the
server can tell the format by) and ``model``; the answer is ``{"text": "..."}``. Every failure — a
refusal (401, 413, 429, ...), a server error, a timeout, an answer without text — is a
:class:`TranscriptionError` whose message says which, so the chat can be told why its voice message
was not heard. Nothing is retried here: a voice message is not worth holding a turn for.

The one refusal that is not final is audio too long or too large for the endpoint
(:mod:`gateway.media.audio_limits`): the limit it names is kept in the window book, shared by every
process, and the voice is cut into pieces under it (:mod:`gateway.media.audio_pieces`), heard one
after another and their texts joined in order. A voice the book already knows to be over a limit is
cut before the first request, so the endpoint refuses it once per deployment, not once per voice.
"""

from __future__ import annotations

import asyncio
import logging
import mimetypes
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Protocol

import httpx

from agent import json_codec
from agent.windows import MemoryWindowBook, WindowBook
from gateway.config.models import TranscriptionSettings
from gateway.media import audio_limits
from gateway.media.audio_limits import AudioLimit, AudioLimits, too_long
from gateway.media.audio_pieces import (
    PIECE_MIME,
    PIECE_SUFFIX,
    CannotCut,
    audio_seconds,
    over_limits,
    pieces_within,
)
from gateway.media.errors import TranscriptionError

log = logging.getLogger(__name__)

#: Extensions for the formats voice arrives in, where :mod:`mimetypes` has none or a poor one.
_EXTENSIONS = {
    "audio/ogg": ".ogg",
    "audio/opus": ".ogg",
    "audio/mpeg": ".mp3",
    "audio/mp3": ".mp3",
    "audio/mp4": ".m4a",
    "audio/x-m4a": ".m4a",
    "audio/m4a": ".m4a",
    "audio/aac": ".m4a",
    "audio/wav": ".wav",
    "audio/x-wav": ".wav",
    "audio/wave": ".wav",
    "audio/webm": ".webm",
    "audio/flac": ".flac",
    "audio/x-flac": ".flac",
    "video/mp4": ".mp4",
    "video/webm": ".webm",
}
_SHOWN_DETAIL = 200
#: Refusals as too long one voice may meet (a limit learned, then a lower one) before it is given up on.
MAX_TOO_LONG = 3


@dataclass
class HeardTally:
    """How much of one voice the endpoint transcribed, for a meter to settle by: ``seconds`` of audio that
    accepted requests carried (None once the whole voice went in one request, its length not measured) and
    ``sending``, the seconds of the request in flight (None: the whole voice, length not measured)."""

    seconds: float | None = 0.0
    sending: float | None = 0.0


class Transcribes(Protocol):
    """What takes voice in: :class:`Transcriber`, or one that meters it against a budget."""

    model: str

    async def transcribe(self, data: bytes, *, name: str, mime: str, seconds: float = 0.0) -> str: ...


class TooLongRefusal(TranscriptionError):
    """The endpoint refused the audio as too long or too large; ``limit`` is what it named (None: nothing)."""

    def __init__(self, message: str, limit: AudioLimit | None) -> None:
        super().__init__(message)
        self.limit = limit


def _halved(refused_bytes: int, transcriber: Transcriber) -> AudioLimit:
    """What a refusal that names no limit teaches: half the size that was refused (a voice meets at most
    :data:`MAX_TOO_LONG` refusals, so this halves at most that often before the person is told)."""
    log.info(
        "%s at %s refused %s bytes of audio as too much without naming its limit: trying half",
        transcriber.model,
        transcriber.endpoint,
        f"{refused_bytes:,}",
    )
    return AudioLimit("bytes", max(1, refused_bytes // 2))


class Transcriber:
    """One transcription endpoint; :meth:`transcribe` turns audio bytes into text. ``book`` keeps the audio
    limits refusals taught (the gateway's shared window book; one of this process's own when None)."""

    def __init__(
        self,
        settings: TranscriptionSettings,
        *,
        client: httpx.AsyncClient | None = None,
        book: WindowBook | None = None,
    ) -> None:
        self.endpoint = settings.endpoint
        self.url = f"{settings.endpoint}/audio/transcriptions"
        self.model = settings.model
        self.timeout = settings.timeout_seconds
        key = settings.api_key.get_secret_value() if settings.api_key else ""
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.book: WindowBook = book if book is not None else MemoryWindowBook()
        self._own_client = client is None
        self.client = client or httpx.AsyncClient(timeout=httpx.Timeout(settings.timeout_seconds))

    @property
    def limits(self) -> AudioLimits:
        """The limits refusals taught for this model at this endpoint, in any process."""
        return audio_limits.known_limits(self.book, self.endpoint, self.model)

    async def transcribe(
        self, data: bytes, *, name: str, mime: str, seconds: float = 0.0, tally: HeardTally | None = None
    ) -> str:
        """The words spoken in ``data`` (``""`` for silence); raises :class:`TranscriptionError`. ``seconds`` is the
        audio's length when the platform said it (what a budget's meter prices it by); ``tally`` is told how much
        audio the endpoint heard, piece by piece."""
        tally = tally if tally is not None else HeardTally()
        limits = self.limits
        if await self._known_over(data, limits):
            return await self._in_pieces(data, tally, limits, refusal=None)
        try:
            return await self._sent(tally, None, data, upload_name(name, mime), mime or "application/octet-stream")
        except TooLongRefusal as refusal:
            limit = refusal.limit or _halved(len(data), self)
            return await self._in_pieces(data, tally, await self._learn(limit, limits), refusal=refusal)

    async def _known_over(self, data: bytes, limits: AudioLimits) -> bool:
        """Whether a limit already learned (here or in another process) would refuse ``data`` as it is."""
        if not limits.known:
            return False
        length: float | None = None
        if limits.seconds is not None:
            try:
                length = await asyncio.to_thread(audio_seconds, data)
            except CannotCut:  # not decodable here: the endpoint may still read it, so it goes whole
                length = None
        return over_limits(len(data), length, limits)

    async def _learn(self, limit: AudioLimit, limits: AudioLimits) -> AudioLimits:
        """``limits`` lowered by what a refusal named, kept in the book so no process meets that refusal again (a
        book that cannot be written — Redis away — fails the turn as any Redis outage does, to be retried)."""
        kept = await audio_limits.learn(self.book, self.endpoint, self.model, limit)
        log.info(
            "%s at %s takes at most %s %s of audio: learned from its refusal",
            self.model,
            self.endpoint,
            f"{kept:,}",
            limit.unit,
        )
        return limits.lowered(AudioLimit(limit.unit, kept))

    async def _in_pieces(
        self, data: bytes, tally: HeardTally, limits: AudioLimits, refusal: TooLongRefusal | None
    ) -> str:
        """The voice heard in pieces under ``limits``; a piece refused as too long teaches a lower limit and the
        rest is cut again under it (at most :data:`MAX_TOO_LONG` refusals in all)."""
        texts: list[str] = []
        start, refusals = 0.0, int(refusal is not None)
        while True:
            try:
                pieces = await asyncio.to_thread(pieces_within, data, limits, start=start)
            except CannotCut as error:
                log.info("a voice over %s's limit at %s could not be cut: %s", self.model, self.endpoint, error)
                raise refusal or TranscriptionError(
                    f"it is over the transcription service's limit and cannot be cut into pieces: {error}"
                ) from error
            sending = len(data)
            try:
                for piece in pieces:
                    upload, sending = f"voice{PIECE_SUFFIX}", len(piece.data)
                    texts.append(await self._sent(tally, piece.seconds, piece.data, upload, PIECE_MIME))
                    start = piece.end
                return " ".join(text for text in texts if text)
            except TooLongRefusal as refused:
                refusals += 1
                if refusals > MAX_TOO_LONG:
                    raise
                limit = refused.limit or _halved(sending, self)
                limits, refusal = await self._learn(limit, limits), refused

    async def _sent(self, tally: HeardTally, length: float | None, data: bytes, upload: str, mime: str) -> str:
        """One request counted in ``tally``: in flight while it is sent, heard once the endpoint took it
        (``length`` None: the whole voice, not measured); a refused one costs nothing."""
        tally.sending = length
        try:
            words = await self._post(data, upload, mime)
        except TranscriptionError:
            tally.sending = 0.0
            raise
        tally.sending = 0.0
        tally.seconds = None if length is None or tally.seconds is None else tally.seconds + length
        return words

    async def _post(self, data: bytes, upload: str, mime: str) -> str:
        """One request: the text heard, or :class:`TranscriptionError` (:class:`TooLongRefusal` for too much)."""
        files = {"file": (upload, data, mime)}
        try:
            response = await self.client.post(
                self.url, headers=self.headers, data={"model": self.model}, files=files, timeout=self.timeout
            )
        except httpx.TimeoutException as error:
            raise TranscriptionError(f"the transcription service did not answer within {self.timeout:g} s") from error
        except httpx.HTTPError as error:
            reason = f"the transcription service could not be reached ({type(error).__name__})"
            raise TranscriptionError(reason) from error
        if response.status_code >= 400:
            detail = _detail(response)
            line = _refusal(response, detail)
            if (refused := too_long(response.status_code, detail)) is not None:
                raise TooLongRefusal(line, refused.limit)
            raise TranscriptionError(line)
        try:
            text = json_codec.loads(response.content).get("text")
        except (ValueError, AttributeError):
            text = None
        if not isinstance(text, str):
            raise TranscriptionError("the transcription service answered without text")
        return text.strip()

    async def aclose(self) -> None:
        if self._own_client:
            await self.client.aclose()


def transcriber_from(settings: TranscriptionSettings, book: WindowBook | None = None) -> Transcriber | None:
    """The configured transcriber, or None when ``media.transcription.provider`` is ``off``; ``book`` keeps the
    audio limits it learns (the gateway passes its shared window book)."""
    return None if settings.provider == "off" else Transcriber(settings, book=book)


def upload_name(name: str, mime: str) -> str:
    """A file name whose extension tells the server the format (a Telegram voice message has no name)."""
    base = PurePosixPath(name).name if name else "voice"
    if PurePosixPath(base).suffix:
        return base
    kind = mime.split(";", 1)[0].strip().lower()
    return base + (_EXTENSIONS.get(kind) or mimetypes.guess_extension(kind) or ".ogg")


def _detail(response: httpx.Response) -> str:
    """The service's own words for a refusal: its error message, else its body, on one line."""
    try:
        body = json_codec.loads(response.content)
        error = body.get("error") if isinstance(body, dict) else None
        detail = str(error.get("message", "") if isinstance(error, dict) else error or body.get("detail") or "")
    except (ValueError, AttributeError):
        detail = response.text.strip()
    return " ".join(detail.split())


def _refusal(response: httpx.Response, detail: str) -> str:
    """``the transcription service answered 429 Too Many Requests: <its own words>``."""
    status = f"{response.status_code} {response.reason_phrase}".strip()
    shown = detail[:_SHOWN_DETAIL]
    return f"the transcription service answered {status}" + (f": {shown}" if shown else "")
