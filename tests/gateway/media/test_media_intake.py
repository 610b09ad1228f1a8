"""take_in end to end on a real Redis: each kind of item taken in (its ref, its text), and every bad input —
too large before download, a failed or cut download, a corrupt image, an unreadable document, a failed
transcription — a ref with an error and a line saying it, never an exception."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import pytest_asyncio
from aiohttp import web
from PIL import Image
from redis.asyncio import Redis

from gateway.config.models import MediaSettings, TranscriptionSettings
from gateway.media.download import download
from gateway.media.intake import Taken, take_in
from gateway.media.source import ChatMedia
from gateway.media.transcribe import Transcriber
from gateway.store.channel import PipelinedConnection
from gateway.store.media import MediaStore
from tests.fakes.media import pdf
from tests.fakes.transcription import Failure, FakeTranscriptionServer, Heard

CHAT = "tg:4242"
MB = 1024 * 1024
SETTINGS = MediaSettings()


@dataclass(frozen=True)
class Item:
    """The shape a platform hands in (gateway.platforms.base.MediaItem)."""

    kind: str
    file_id: str
    name: str = ""
    mime: str = ""
    size: int = 0
    width: int = 0
    height: int = 0
    duration: float = 0.0


class Files:
    """The platform's downloader: serves bytes by file id and records what it was asked for."""

    def __init__(self, **files: bytes) -> None:
        self.files = files
        self.asked: list[tuple[str, int]] = []

    async def __call__(self, item: Item, limit: int) -> bytes:
        self.asked.append((item.file_id, limit))
        return self.files[item.file_id]


def jpeg(size: tuple[int, int]) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (10, 120, 200)).save(out, "JPEG")
    return out.getvalue()


@pytest.fixture
def media(redis: Redis, key_prefix: str, channel: PipelinedConnection) -> MediaStore:
    return MediaStore(
        redis, key_prefix, max_bytes=SETTINGS.max_bytes, max_total_bytes=SETTINGS.max_total_bytes, channel=channel
    )


@pytest_asyncio.fixture
async def service() -> AsyncIterator[FakeTranscriptionServer]:
    async with FakeTranscriptionServer() as server:
        yield server


@pytest_asyncio.fixture
async def transcriber(service: FakeTranscriptionServer) -> AsyncIterator[Transcriber]:
    made = Transcriber(TranscriptionSettings(provider="custom", base_url=service.base_url, timeout_seconds=2))
    try:
        yield made
    finally:
        await made.aclose()


async def taken(item: Item, fetch: Files, media: MediaStore, transcriber: Transcriber | None = None) -> Taken:
    return await take_in(item, fetch, media, CHAT, SETTINGS, transcriber)


# --------------------------------------------------------------------------- taken in


async def test_a_photo_is_stored_scaled_and_named_only_by_its_ref(media: MediaStore) -> None:
    got = await taken(
        Item("image", "AgAC-1", "photo.jpg", "image/jpeg", 900_000, 4000, 3000),
        Files(**{"AgAC-1": jpeg((4000, 3000))}),
        media,
    )
    assert (got.text, got.problem) == ("", "")
    ref = got.ref
    assert {key: ref[key] for key in ("kind", "name", "mime", "file_id", "w", "h")} == {
        "kind": "image",
        "name": "photo.jpg",
        "mime": "image/jpeg",
        "file_id": "AgAC-1",
        "w": 2048,
        "h": 1536,
    }
    assert "error" not in ref
    stored = await ChatMedia(media, CHAT).read(ref["sha"])
    assert stored is not None and stored[1] == "image/jpeg" and len(stored[0]) == ref["bytes"]
    assert Image.open(io.BytesIO(stored[0])).size == (2048, 1536)


async def test_a_pdf_gives_its_text_under_a_header_and_keeps_its_bytes(media: MediaStore) -> None:
    data = pdf("Invoice 0425", "Total 42 EUR")
    got = await taken(
        Item("document", "BQAC-7", "invoice-0425.pdf", "application/pdf", len(data)), Files(**{"BQAC-7": data}), media
    )
    assert got.text == "[document invoice-0425.pdf, 2 pages]\n[page 1]\nInvoice 0425\n\n[page 2]\nTotal 42 EUR"
    assert (got.ref["pages"], got.ref["bytes"], got.problem) == (2, len(data), "")
    assert await media.get(CHAT, got.ref["sha"]) == (data, "application/pdf")


async def test_a_text_file_gives_its_text(media: MediaStore) -> None:
    data = "2026-04-25 12:00:01 ERROR disk full\n".encode("utf-16")
    got = await taken(Item("document", "f", "app.log", "text/plain", len(data)), Files(f=data), media)
    assert got.text == "[document app.log, 74 bytes]\n2026-04-25 12:00:01 ERROR disk full\n"
    assert "pages" not in got.ref and "error" not in got.ref


async def test_a_photo_sent_as_a_file_is_taken_in_as_an_image(media: MediaStore) -> None:
    got = await taken(Item("document", "f", "scan.jpg", "image/jpeg", 0), Files(f=jpeg((640, 480))), media)
    assert (got.ref["kind"], got.ref["w"], got.ref["h"], got.text) == ("image", 640, 480, "")


async def test_voice_is_transcribed_under_a_header(
    media: MediaStore, service: FakeTranscriptionServer, transcriber: Transcriber
) -> None:
    service.enqueue(Heard("Buy milk on the way home."))
    voice = b"OggS" + bytes(500)
    got = await taken(
        Item("voice", "AwAC-3", "", "audio/ogg", len(voice), duration=12),
        Files(**{"AwAC-3": voice}),
        media,
        transcriber,
    )
    assert got.text == "[voice message, 0:12, transcribed]\nBuy milk on the way home."
    assert (got.ref["seconds"], got.ref["bytes"], got.problem) == (12.0, len(voice), "")
    assert service.requests[0].file_name == "voice.ogg"
    assert await media.get(CHAT, got.ref["sha"]) == (voice, "audio/ogg")


# --------------------------------------------------------------------------- bad input: one clear outcome


async def test_an_item_over_the_limit_is_refused_before_it_is_fetched(media: MediaStore) -> None:
    files = Files()
    got = await taken(Item("image", "big", "huge.png", "image/png", 25 * MB), files, media)
    assert files.asked == []
    assert got.ref["error"] == got.problem == "it is 25 MB, over the 20 MB limit"
    assert got.ref["sha"] == "" and got.text == "[image huge.png was not taken in: it is 25 MB, over the 20 MB limit]"


async def test_every_fetch_is_given_the_limit_and_more_than_it_is_refused(media: MediaStore) -> None:
    files = Files(f=b"x" * (SETTINGS.max_bytes + 1))
    got = await taken(Item("document", "f", "a.txt", "text/plain", 0), files, media)
    assert files.asked == [("f", SETTINGS.max_bytes)]
    assert got.ref["error"].startswith("it is 20 MB, over the 20 MB limit") and got.ref["sha"] == ""


async def test_a_download_cut_short_is_said_in_the_reply_and_the_ref() -> None:
    async def cut(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.content_length = 2 * MB
        await response.prepare(request)
        await response.write(b"\x00" * MB)
        assert request.transport is not None
        request.transport.close()
        return response

    app = web.Application()
    app.router.add_get("/file/{id}", cut)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]

    async def fetch(item: Item, limit: int) -> bytes:
        return await download(f"http://127.0.0.1:{port}/file/{item.file_id}", limit=limit)

    try:
        got = await take_in(
            Item("document", "d1", "report.pdf", "application/pdf", 2 * MB),
            fetch,
            _unused_store(),
            CHAT,
            SETTINGS,
            None,
        )
    finally:
        await runner.cleanup()
    assert (
        got.problem
        == "the download of the file stopped after 1 MB: the connection closed before the whole file arrived"
    )
    assert got.text == f"[document report.pdf was not taken in: {got.problem}]" and got.ref["sha"] == ""


async def test_a_platform_error_while_fetching_is_a_failed_download(media: MediaStore) -> None:
    async def refusing(item: Item, limit: int) -> bytes:
        raise RuntimeError("Telegram server says - Bad Request: file is too big")

    got = await take_in(Item("image", "f", "p.jpg"), refusing, media, CHAT, SETTINGS, None)
    assert got.problem == "the download failed (RuntimeError)" and got.ref["sha"] == ""


async def test_a_corrupt_image_is_refused_and_nothing_is_stored(media: MediaStore) -> None:
    got = await taken(Item("image", "f", "p.jpg", "image/jpeg"), Files(f=b"\xff\xd8 not really a jpeg"), media)
    assert got.problem.startswith("corrupt image: ") and got.ref["sha"] == ""
    assert await media.held_bytes(CHAT) == 0


async def test_an_unreadable_document_is_kept_and_says_why_it_has_no_text(media: MediaStore) -> None:
    scanned = pdf("", "", "")
    got = await taken(Item("document", "s", "scan.pdf", "application/pdf"), Files(s=scanned), media)
    assert got.text == "[document scan.pdf, 3 pages: no text layer (a scanned PDF?), so its text cannot be read]"
    assert got.ref["error"] == got.problem and got.ref["pages"] == 3
    assert await media.get(CHAT, got.ref["sha"]) == (scanned, "application/pdf")
    heic = await taken(
        Item("document", "h", "IMG_0001.HEIC", "image/heic"), Files(h=b"\x00\x00\x00\x18ftypheic"), media
    )
    assert heic.ref["kind"] == "document" and heic.problem.startswith("cannot read this type (image/heic)")


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        (Failure.status(500, "boom"), "the transcription service answered 500 Internal Server Error: boom"),
        (
            Failure.status(429, "Rate limit reached"),
            "the transcription service answered 429 Too Many Requests: Rate limit",
        ),
    ],
)
async def test_voice_that_cannot_be_transcribed_is_kept_and_says_why(
    media: MediaStore, service: FakeTranscriptionServer, transcriber: Transcriber, answer: Failure, problem: str
) -> None:
    service.enqueue(answer)
    voice = b"OggS" + bytes(300)
    got = await taken(
        Item("audio", "a", "interview.mp3", "audio/mpeg", duration=2467), Files(a=voice), media, transcriber
    )
    assert got.problem.startswith(problem) and got.ref["error"] == got.problem
    assert got.text == f"[audio interview.mp3, 41:07: not transcribed: {got.problem}]"
    assert await media.get(CHAT, got.ref["sha"]) == (voice, "audio/mpeg")


async def test_voice_without_a_transcriber_is_kept_and_says_transcription_is_off(media: MediaStore) -> None:
    got = await taken(Item("voice", "v", "", "audio/ogg", duration=3), Files(v=b"OggS"), media)
    assert (
        got.text == "[voice message, 0:03: not transcribed: transcription is off here (media.transcription.provider)]"
    )
    assert got.ref["sha"] and got.ref["error"]


def _unused_store() -> MediaStore:
    """A store the test never reaches (the download fails first); its client is never connected."""
    return MediaStore(
        Redis(host="127.0.0.1", port=9), "fg", max_bytes=SETTINGS.max_bytes, max_total_bytes=SETTINGS.max_total_bytes
    )
