"""Voice and audio to text through an OpenAI-compatible ``POST {base_url}/audio/transcriptions``.

The request is the one OpenAI documents and local servers (whisper.cpp's server, faster-whisper
servers, vLLM) copy: multipart form data with ``file`` (the audio, named with an extension the
server can tell the format by) and ``model``; the answer is ``{"text": "..."}``. Every failure — a
refusal (401, 413, 429, ...), a server error, a timeout, an answer without text — is a
:class:`TranscriptionError` whose message says which, so the chat can be told why its voice message
was not heard. Nothing is retried here: a voice message is not worth holding a turn for.
"""

from __future__ import annotations

import mimetypes
from pathlib import PurePosixPath
from typing import Protocol

import httpx

from agent import json_codec
from gateway.config.models import TranscriptionSettings
from gateway.media.errors import TranscriptionError

#: Extensions for the formats voice arrives in, where :mod:`mimetypes` has none or a poor one.
_EXTENSIONS = {
    "audio/ogg": ".ogg", "audio/opus": ".ogg", "audio/mpeg": ".mp3", "audio/mp3": ".mp3", "audio/mp4": ".m4a",
    "audio/x-m4a": ".m4a", "audio/m4a": ".m4a", "audio/aac": ".m4a", "audio/wav": ".wav", "audio/x-wav": ".wav",
    "audio/wave": ".wav", "audio/webm": ".webm", "audio/flac": ".flac", "audio/x-flac": ".flac",
    "video/mp4": ".mp4", "video/webm": ".webm",
}
_SHOWN_DETAIL = 200


class Transcribes(Protocol):
    """What takes voice in: :class:`Transcriber`, or one that meters it against a budget."""

    model: str

    async def transcribe(self, data: bytes, *, name: str, mime: str, seconds: float = 0.0) -> str: ...


class Transcriber:
    """One transcription endpoint; :meth:`transcribe` turns audio bytes into text."""

    def __init__(self, settings: TranscriptionSettings, *, client: httpx.AsyncClient | None = None) -> None:
        self.url = f"{settings.endpoint}/audio/transcriptions"
        self.model = settings.model
        self.timeout = settings.timeout_seconds
        key = settings.api_key.get_secret_value() if settings.api_key else ""
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._own_client = client is None
        self.client = client or httpx.AsyncClient(timeout=httpx.Timeout(settings.timeout_seconds))

    async def transcribe(self, data: bytes, *, name: str, mime: str, seconds: float = 0.0) -> str:
        """The words spoken in ``data`` (``""`` for silence); raises :class:`TranscriptionError`. ``seconds`` is the
        audio's length when the platform said it (what a budget's meter prices it by)."""
        files = {"file": (upload_name(name, mime), data, mime or "application/octet-stream")}
        try:
            response = await self.client.post(self.url, headers=self.headers, data={"model": self.model},
                                              files=files, timeout=self.timeout)
        except httpx.TimeoutException as error:
            raise TranscriptionError(f"the transcription service did not answer within {self.timeout:g} s") from error
        except httpx.HTTPError as error:
            raise TranscriptionError(f"the transcription service could not be reached ({type(error).__name__})") from error
        if response.status_code >= 400:
            raise TranscriptionError(_refusal(response))
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


def transcriber_from(settings: TranscriptionSettings) -> Transcriber | None:
    """The configured transcriber, or None when ``media.transcription.provider`` is ``off``."""
    return None if settings.provider == "off" else Transcriber(settings)


def upload_name(name: str, mime: str) -> str:
    """A file name whose extension tells the server the format (a Telegram voice message has no name)."""
    base = PurePosixPath(name).name if name else "voice"
    if PurePosixPath(base).suffix:
        return base
    kind = mime.split(";", 1)[0].strip().lower()
    return base + (_EXTENSIONS.get(kind) or mimetypes.guess_extension(kind) or ".ogg")


def _refusal(response: httpx.Response) -> str:
    """``the transcription service answered 429 Too Many Requests: <its own words>``."""
    status = f"{response.status_code} {response.reason_phrase}".strip()
    detail = ""
    try:
        body = json_codec.loads(response.content)
        error = body.get("error") if isinstance(body, dict) else None
        detail = str(error.get("message", "") if isinstance(error, dict) else error or body.get("detail") or "")
    except (ValueError, AttributeError):
        detail = response.text.strip()
    detail = " ".join(detail.split())[:_SHOWN_DETAIL]
    return f"the transcription service answered {status}" + (f": {detail}" if detail else "")
