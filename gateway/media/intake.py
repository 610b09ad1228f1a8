"""One item a person sent, taken in: checked, fetched, made readable, stored, described.

:func:`take_in` is what a turn calls for each item of an incoming message. It returns a
:class:`Taken`: the item's ref for the stored message's ``_items`` (a plain dict, the shape of
``agent.items.ItemRef``) and the text to add to the message's ``content`` (a document's text, a
transcript, or a line saying what went wrong; ``""`` for an image taken in, which the agent sends
as an image part). Bad input never raises — an item over ``media.max_bytes`` (checked on the size
the platform reports, BEFORE fetching), a failed download, a corrupt image or PDF, a type that
cannot be read, a transcription that failed: each gives a ref with ``"error"`` (the reason) and a
line saying it, and ``Taken.problem`` for the one reply the person gets. What does raise is the
infrastructure (Redis down), so the turn is retried as for any other failure.

In a ref, ``bytes`` is the size of the stored bytes (a scaled image's, not the original's), or the
size the platform reported when nothing was stored. ``sha`` is ``""`` when no bytes were stored
(refused before or at download); when bytes were stored and ``"error"`` is present (a scanned PDF,
voice that was not transcribed), the item is kept and only its content is missing from the text.
A document that is an image (a photo sent as a file) is taken in as an image.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.config.models import MediaSettings
from gateway.media.errors import MediaError
from gateway.media.extract import read_document
from gateway.media.images import prepare_image
from gateway.media.lines import document_header, refused_line, sound_header
from gateway.media.transcribe import Transcribes
from gateway.media.units import size_text
from gateway.outage import is_redis_outage
from gateway.platforms.base import MediaItem
from gateway.store.media import MediaStore

log = logging.getLogger(__name__)

#: The most of a document's text a message carries (about 100K tokens): counting and storing a 20 MB
#: text file whole would stall the event loop; the long-message bound excerpts what is kept further.
MAX_TEXT_CHARS = 400_000

#: The platform's downloader: the item and the most bytes it may take -> the bytes (raises on failure).
Fetch = Callable[[MediaItem, int], Awaitable[bytes]]


@dataclass(frozen=True)
class Taken:
    """An item taken in: ``ref`` for ``_items``, ``text`` for ``content`` (may be ``""``), and ``problem``
    (``""`` when all went well) — the reason, for the reply that tells the person."""

    ref: dict[str, Any] = field(default_factory=dict)
    text: str = ""
    problem: str = ""


async def take_in(
    item: MediaItem,
    fetch: Fetch,
    store: MediaStore,
    chat: str,
    settings: MediaSettings,
    transcriber: Transcribes | None,
) -> Taken:
    """Take ``item`` in for ``chat``: never raises for bad input (see the module); Redis failures do raise."""
    ref: dict[str, Any] = {
        "kind": item.kind,
        "sha": "",
        "name": item.name,
        "mime": item.mime,
        "bytes": item.size,
        "file_id": item.file_id,
    }
    if item.kind in ("voice", "audio"):
        ref["seconds"] = float(item.duration)
    limit = settings.max_bytes
    if item.size > limit:
        return _refused(ref, f"it is {size_text(item.size)}, over the {size_text(limit)} limit")
    try:
        data = await fetch(item, limit)
    except MediaError as error:
        return _refused(ref, str(error))
    except Exception as error:
        log.warning(
            "media download failed in chat %s (%s %r): %s: %s", chat, item.kind, item.name, type(error).__name__, error
        )
        return _refused(ref, f"the download failed ({type(error).__name__})")
    if len(data) > limit:
        return _refused(ref, f"it is {size_text(len(data))}, over the {size_text(limit)} limit")
    try:
        return await _readable(item, ref, data, store, chat, settings, transcriber)
    except MediaError as error:
        return _refused(ref, str(error))
    except Exception as error:
        if is_redis_outage(error):
            raise  # the turn waits for Redis and takes the item in again
        log.warning(
            "media item could not be read in chat %s (%s %r): %s", chat, item.kind, item.name, type(error).__name__
        )
        return _refused(ref, f"it could not be read ({type(error).__name__})")


async def _readable(
    item: MediaItem,
    ref: dict[str, Any],
    data: bytes,
    store: MediaStore,
    chat: str,
    settings: MediaSettings,
    transcriber: Transcribes | None,
) -> Taken:
    """The fetched bytes made readable and kept, by kind."""
    if item.kind == "image" or (item.kind == "document" and item.mime.lower().startswith("image/")):
        taken = await _image(ref, data, store, chat, settings)
        if taken is not None:
            return taken
    if item.kind == "document":
        return await _document(ref, data, store, chat)
    return await _sound(ref, data, store, chat, transcriber)


async def _image(
    ref: dict[str, Any], data: bytes, store: MediaStore, chat: str, settings: MediaSettings
) -> Taken | None:
    """An image stored scaled; None for a document whose bytes are no image Pillow reads (it stays a document)."""
    try:
        picture = await prepare_image(data, max_side=settings.image_max_side)
    except MediaError as error:
        if ref["kind"] != "image":
            return None
        return _refused(ref, str(error))
    ref.update(kind="image", mime=picture.mime, bytes=len(picture.data), w=picture.width, h=picture.height)
    ref["sha"] = await store.put(chat, picture.data, mime=picture.mime, name=ref["name"], file_id=ref["file_id"])
    return Taken(ref)


async def _document(ref: dict[str, Any], data: bytes, store: MediaStore, chat: str) -> Taken:
    ref["sha"] = await store.put(chat, data, mime=ref["mime"], name=ref["name"], file_id=ref["file_id"])
    ref["bytes"] = len(data)
    extracted = await read_document(data, name=ref["name"], mime=ref["mime"])
    if extracted.pages:
        ref["pages"] = extracted.pages
    header = document_header(ref["name"], pages=extracted.pages, size=len(data), problem=extracted.problem)
    if extracted.problem:
        ref["error"] = extracted.problem
        return Taken(ref, header, extracted.problem)
    text = extracted.text
    if len(text) > MAX_TEXT_CHARS:  # the whole file stays in the media store; the session gets its head
        text = (
            f"{text[:MAX_TEXT_CHARS]}\n[… the text goes on for {len(text) - MAX_TEXT_CHARS:,} more characters; "
            "the whole file is kept]"
        )
    return Taken(ref, f"{header}\n{text}")


async def _sound(
    ref: dict[str, Any], data: bytes, store: MediaStore, chat: str, transcriber: Transcribes | None
) -> Taken:
    """Voice or audio: stored first (so nothing is lost if transcription fails), then transcribed."""
    ref["sha"] = await store.put(chat, data, mime=ref["mime"], name=ref["name"], file_id=ref["file_id"])
    ref["bytes"] = len(data)
    seconds = ref.get("seconds", 0.0)
    if transcriber is None:
        problem = "transcription is off here (media.transcription.provider)"
    else:
        try:
            words = await transcriber.transcribe(data, name=ref["name"], mime=ref["mime"], seconds=seconds)
        except MediaError as error:
            problem = str(error)
        else:
            header = sound_header(ref["kind"], ref["name"], seconds=seconds)
            return Taken(ref, f"{header}\n{words or '(no speech)'}")
    ref["error"] = problem
    return Taken(ref, sound_header(ref["kind"], ref["name"], seconds=seconds, problem=problem), problem)


def _refused(ref: dict[str, Any], reason: str) -> Taken:
    log.info("media item not taken in (%s %r): %s", ref["kind"], ref["name"], reason)
    ref["error"] = reason
    return Taken(ref, refused_line(ref["kind"], ref["name"], reason), reason)
