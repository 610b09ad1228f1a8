"""Telegram media: what a message carries as :class:`~gateway.platforms.base.MediaItem`, and its bytes on demand.

A photo arrives as several sizes of one picture; the largest whose reported size is within the
byte limit is taken (the public Bot API serves files up to 20 MB), so a big photo is still read at
a size that can be fetched. An image sent as a file (``image/*``) is an image, any other file a
document; a voice message and a video note's sound are voice, a music file audio.

Fetching asks ``getFile`` for the file's path, then streams it through aiogram's own download
(its session, or the local Bot API server's disk) into a buffer that refuses to grow past the
limit, so an oversized file costs at most ``limit`` bytes of memory and stops there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiogram import Bot
from aiogram.exceptions import TelegramAPIError
from aiogram.types import Message, PhotoSize
from aiohttp import ClientError

from gateway.config.models import TELEGRAM_DOWNLOAD_LIMIT
from gateway.media.download import CHUNK, DOWNLOAD_SECONDS, LimitedBuffer
from gateway.media.errors import MediaError, MediaTooLarge
from gateway.media.units import size_text
from gateway.platforms.base import MediaItem, check_size
from gateway.platforms.telegram.answers import UnreadableAnswer

log = logging.getLogger("gateway.platforms.telegram")  # the adapter's log: one logger to filter for Telegram

#: The most the public Bot API lets a bot download (getFile refuses bigger files).
BOT_API_DOWNLOAD_LIMIT = TELEGRAM_DOWNLOAD_LIMIT


def message_items(message: Message, max_bytes: int = BOT_API_DOWNLOAD_LIMIT) -> tuple[MediaItem, ...]:
    """The media ``message`` carries (none for text, stickers, videos and the like): the first of
    :data:`ITEM_READERS` that finds its kind in the message."""
    for read in ITEM_READERS:
        item = read(message, max_bytes)
        if item is not None:
            return (item,)
    return ()


def _photo_item(message: Message, max_bytes: int) -> MediaItem | None:
    return _photo(message.photo, max_bytes) if message.photo else None


def _document_item(message: Message, max_bytes: int) -> MediaItem | None:
    """A file: an image when its type says so (``image/*``), else a document."""
    document = message.document
    if document is None:
        return None
    mime = document.mime_type or ""
    kind = "image" if mime.startswith("image/") else "document"
    return MediaItem(
        kind=kind, file_id=document.file_id, name=document.file_name or kind, mime=mime, size=document.file_size or 0
    )


def _voice_item(message: Message, max_bytes: int) -> MediaItem | None:
    voice = message.voice
    if voice is None:
        return None
    return MediaItem(
        kind="voice",
        file_id=voice.file_id,
        name="voice.ogg",
        mime=voice.mime_type or "audio/ogg",
        size=voice.file_size or 0,
        duration=float(voice.duration),
    )


def _video_note_item(message: Message, max_bytes: int) -> MediaItem | None:
    """A round video, read as voice: what is said in it is what counts."""
    note = message.video_note
    if note is None:
        return None
    return MediaItem(
        kind="voice",
        file_id=note.file_id,
        name="video_note.mp4",
        mime="video/mp4",
        size=note.file_size or 0,
        duration=float(note.duration),
    )


def _audio_item(message: Message, max_bytes: int) -> MediaItem | None:
    """A music file, named by its file name, else by its performer and title."""
    audio = message.audio
    if audio is None:
        return None
    name = audio.file_name or " - ".join(part for part in (audio.performer, audio.title) if part) or "audio"
    return MediaItem(
        kind="audio",
        file_id=audio.file_id,
        name=name,
        mime=audio.mime_type or "",
        size=audio.file_size or 0,
        duration=float(audio.duration),
    )


#: What a message may carry, in the order looked for: the first found is the one item taken.
ITEM_READERS: tuple[Callable[[Message, int], MediaItem | None], ...] = (
    _photo_item,
    _document_item,
    _voice_item,
    _video_note_item,
    _audio_item,
)


def _photo(sizes: list[PhotoSize], max_bytes: int) -> MediaItem:
    """The largest size of a photo within ``max_bytes`` (unknown sizes count as within); the smallest when none is."""
    by_area = sorted(sizes, key=lambda size: (size.width * size.height, size.file_size or 0))
    within = [size for size in by_area if (size.file_size or 0) <= max_bytes]
    chosen = within[-1] if within else by_area[0]
    return MediaItem(
        kind="image",
        file_id=chosen.file_id,
        name="photo.jpg",
        mime="image/jpeg",
        size=chosen.file_size or 0,
        width=chosen.width,
        height=chosen.height,
    )


async def fetch_file(bot: Bot, item: MediaItem, limit: int) -> bytes:
    """The bytes of ``item`` by ``getFile`` and a bounded download; :class:`MediaError` says why not."""
    check_size(item, limit)
    name = item.name or item.kind
    try:
        file = await bot.get_file(item.file_id)
    except TelegramAPIError as error:
        if "too big" in error.message.lower():
            raise MediaTooLarge(name, item.size or limit + 1, limit, reported=bool(item.size)) from error
        raise MediaError(f"Telegram would not give out {name} ({error.message})") from error
    except UnreadableAnswer as error:  # the operator's log names the server; the chat hears only what failed
        log.warning("telegram: %s", error)
        raise MediaError(f"Telegram's answer about {name} could not be read") from error
    except (TimeoutError, ClientError, OSError) as error:
        raise MediaError(f"could not reach Telegram for {name} ({type(error).__name__})") from error
    if file.file_size is not None and file.file_size > limit:
        raise MediaTooLarge(name, file.file_size, limit)
    if not file.file_path:
        raise MediaError(f"Telegram gave no download path for {name}")
    expected: int | None = file.file_size
    buffer = LimitedBuffer(name, limit)
    try:
        await bot.download_file(
            file.file_path, destination=buffer, timeout=DOWNLOAD_SECONDS, chunk_size=CHUNK, seek=False
        )
    except MediaError:
        raise
    except (TimeoutError, ClientError, OSError) as error:
        raise MediaError(
            f"the download of {name} stopped after {size_text(buffer.tell())}: the connection "
            f"failed ({type(error).__name__})"
        ) from error
    data = buffer.getvalue()
    if expected is not None and len(data) != expected:
        raise MediaError(
            f"the download of {name} stopped after {size_text(len(data))} of {size_text(expected)}: "
            "the connection closed before the whole file arrived"
        )
    return data
