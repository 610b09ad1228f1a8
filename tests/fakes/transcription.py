"""A fake transcription service: a real aiohttp server on loopback speaking OpenAI's
``POST /v1/audio/transcriptions``.

Point a :class:`gateway.media.transcribe.Transcriber` at ``server.base_url`` and script its answers::

    async with FakeTranscriptionServer() as server:
        server.enqueue(Heard("hello there"), Failure.status(429, "Rate limit reached"), Failure.hang())
        ...
        assert server.requests[0].model == "whisper-1"

Each request takes the next queued answer; with the queue empty it answers ``Heard(default)``.
The request is checked the way OpenAI checks it, and refused with OpenAI's 400 error body when it
is wrong: it must be ``multipart/form-data`` with a ``file`` part that has a file name with an
extension the service knows, and a ``model`` field; an ``api_key`` given to the server must come
as ``Authorization: Bearer <key>`` (else 401). Every request, well-formed or not, is recorded.

Limits, as the real endpoints refuse too much audio (before any queued answer is taken)::

    FakeTranscriptionServer(max_seconds=10)    # gpt-4o-transcribe's 400: "audio duration 30 seconds is
                                               # longer than 10 seconds which is the maximum for this model"
    FakeTranscriptionServer(max_bytes=40_000)  # whisper-1's 413: "Maximum content size limit (40000)
                                               # exceeded (52311 bytes read)"

With ``max_seconds`` the audio is decoded (PyAV) to measure it; audio that does not decode is refused the way
OpenAI refuses it, and each request records the ``seconds`` it measured.
"""

from __future__ import annotations

import asyncio
import io
from dataclasses import dataclass, field
from pathlib import PurePosixPath

import av
import av.error
from aiohttp import BodyPartReader, web

#: The extensions OpenAI's transcription endpoint accepts.
ACCEPTED_EXTENSIONS = frozenset({".flac", ".m4a", ".mp3", ".mp4", ".mpeg", ".mpga", ".oga", ".ogg", ".wav", ".webm"})


@dataclass(frozen=True)
class Heard:
    """A successful transcription: ``{"text": ...}``."""

    text: str


@dataclass(frozen=True)
class Failure:
    """A failed one: an HTTP status with OpenAI's error body, or a request never answered (``hang``)."""

    status_code: int = 500
    message: str = "The server had an error while processing your request."
    hang: bool = False

    @classmethod
    def status(cls, status_code: int, message: str) -> Failure:
        return cls(status_code, message)

    @classmethod
    def never_answers(cls) -> Failure:
        return cls(hang=True)


Answer = Heard | Failure


@dataclass
class TranscriptionRequest:
    """What arrived: the multipart parts as the service saw them, and the problem it refused, if any."""

    path: str
    headers: dict[str, str]
    model: str | None = None
    file_name: str | None = None
    file_type: str | None = None
    audio: bytes = b""
    fields: dict[str, str] = field(default_factory=dict)
    refused: str = ""
    seconds: float | None = None


class FakeTranscriptionServer:
    """OpenAI's transcription endpoint on loopback, with scripted answers."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        default: str = "ok",
        host: str = "127.0.0.1",
        max_seconds: float | None = None,
        max_bytes: int | None = None,
        names_limit: bool = True,
    ) -> None:
        self.api_key = api_key
        self.max_seconds = max_seconds
        self.max_bytes = max_bytes
        #: False: a body over ``max_bytes`` is refused as a bare proxy does it, "413 Request Entity Too Large".
        self.names_limit = names_limit
        self.default = default
        self.host = host
        self.port = 0
        self.queue: list[Answer] = []
        self.requests: list[TranscriptionRequest] = []
        self._runner: web.AppRunner | None = None
        self._release = asyncio.Event()

    async def __aenter__(self) -> FakeTranscriptionServer:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/audio/transcriptions", self._transcribe)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.1)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, 0).start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._release.set()  # a request left hanging is let go, so the server stops at once
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def enqueue(self, *answers: Answer) -> None:
        self.queue.extend(answers)

    async def _transcribe(self, http: web.Request) -> web.StreamResponse:
        request = TranscriptionRequest(http.path, {name.lower(): value for name, value in http.headers.items()})
        self.requests.append(request)
        if self.api_key is not None and http.headers.get("Authorization") != f"Bearer {self.api_key}":
            return _error(401, "Incorrect API key provided.", "invalid_api_key")
        request.refused = await self._read_form(http, request)
        if request.refused:
            return _error(400, request.refused, "invalid_request_error")
        if (over := self._over_limit(http, request)) is not None:
            return over
        answer = self.queue.pop(0) if self.queue else Heard(self.default)
        if isinstance(answer, Failure):
            if answer.hang:
                await self._release.wait()
            return _error(answer.status_code, answer.message, "server_error" if answer.status_code >= 500 else None)
        return web.json_response({"text": answer.text})

    async def _read_form(self, http: web.Request, request: TranscriptionRequest) -> str:
        """The problem OpenAI would answer 400 with, or ``""``."""
        if not http.content_type.startswith("multipart/form-data"):
            return f"Invalid Content-Type header ({http.content_type}); expected multipart/form-data."
        async for part in await http.multipart():
            if not isinstance(part, BodyPartReader):
                return "Nested multipart bodies are not supported."
            if part.name == "file":
                request.file_name, request.file_type = part.filename, part.headers.get("Content-Type")
                request.audio = bytes(await part.read())
            elif part.name:
                request.fields[part.name] = await part.text()
        request.model = request.fields.get("model")
        if request.file_name is None:
            return "You must provide a file."
        if not request.model:
            return "you must provide a model parameter"
        if PurePosixPath(request.file_name).suffix.lower() not in ACCEPTED_EXTENSIONS:
            return f"Invalid file format. Supported formats: {sorted(ACCEPTED_EXTENSIONS)} (got {request.file_name!r})"
        if not request.audio:
            return "The audio file is empty."
        return ""

    def _over_limit(self, http: web.Request, request: TranscriptionRequest) -> web.Response | None:
        """The refusal of too much audio the real endpoints answer with, or None."""
        read = http.content_length or len(request.audio)
        if self.max_bytes is not None and read > self.max_bytes:
            if not self.names_limit:
                request.refused = "Request Entity Too Large"
                return web.Response(status=413, text=request.refused)
            request.refused = f"Maximum content size limit ({self.max_bytes}) exceeded ({read} bytes read)"
            return _error(413, request.refused, "server_error")
        if self.max_seconds is None:
            return None
        request.seconds = _duration(request.audio)
        if request.seconds is None:
            request.refused = "Audio file might be corrupted or unsupported"
            return _error(400, request.refused, "invalid_request_error", param="file", code="invalid_value")
        if request.seconds > self.max_seconds:
            request.refused = (
                f"audio duration {request.seconds:g} seconds is longer than {self.max_seconds:g} seconds"
                " which is the maximum for this model"
            )
            return _error(400, request.refused, "invalid_request_error", code="invalid_value")
        return None


def _duration(audio: bytes) -> float | None:
    """Seconds of sound in ``audio`` as a decoder hears it, or None when it does not decode."""
    try:
        with av.open(io.BytesIO(audio), mode="r") as container:
            if not container.streams.audio:
                return None
            heard = sum(frame.samples / (frame.sample_rate or 1) for frame in container.decode(audio=0))
    except (av.error.FFmpegError, ValueError):
        return None
    return heard or None


def _error(
    status: int, message: str, kind: str | None, *, param: str | None = None, code: str | None = None
) -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind, "param": param, "code": code}}, status=status)
