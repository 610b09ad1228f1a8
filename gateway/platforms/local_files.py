"""Files attached in the terminal chat: ``/attach PATH [caption]`` as a message with one item, read on demand.

The item's ``file_id`` is ``path:<absolute path>``, its size the file's size when it was attached,
so a file over the limit is refused before it is read; the bytes are read only when the gateway
fetches them. A path with spaces is written in quotes (``/attach "my notes.txt" summarise``).
"""

from __future__ import annotations

import asyncio
import mimetypes
import os
from dataclasses import dataclass
from pathlib import Path

from gateway.media.errors import MediaError, MediaTooLarge
from gateway.platforms.base import MediaItem, check_size

#: The terminal chat's command that attaches a file.
ATTACH = "/attach"
#: How a terminal item's file_id starts.
PATH_PREFIX = "path:"


@dataclass(frozen=True)
class Attachment:
    """A parsed ``/attach`` line: the item to send and the caption that goes with it."""

    item: MediaItem
    caption: str


class AttachError(ValueError):
    """An ``/attach`` line that names no readable file; the message is the line to show."""


def is_attach(line: str) -> bool:
    """Whether ``line`` is an ``/attach`` command (with or without its arguments)."""
    return line == ATTACH or line.startswith(ATTACH + " ")


def parse_attach(line: str) -> Attachment:
    """The file and caption of an ``/attach PATH [caption]`` line; :class:`AttachError` says what is wrong."""
    rest = line[len(ATTACH) :].strip()
    if not rest:
        raise AttachError("usage: /attach PATH [caption]")
    if rest[0] in "\"'":
        end = rest.find(rest[0], 1)
        if end < 0:
            raise AttachError(f"the path starting with {rest[0]} has no closing quote")
        raw, caption = rest[1:end], rest[end + 1 :]
    else:
        raw, _, caption = rest.partition(" ")
    path = Path(os.path.expanduser(raw)).resolve()
    try:
        stat = path.stat()
    except OSError as error:
        raise AttachError(f"cannot attach {raw}: {error.strerror or error}") from error
    if not path.is_file():
        raise AttachError(f"cannot attach {raw}: not a file")
    return Attachment(item_for(path, stat.st_size), caption.strip())


def item_for(path: Path, size: int) -> MediaItem:
    """The item for a local file: its kind from the type its name suggests."""
    mime = mimetypes.guess_type(path.name)[0] or ""
    if mime.startswith("image/"):
        kind = "image"
    elif mime.startswith("audio/"):
        kind = "audio"
    else:
        kind = "document"
    return MediaItem(kind=kind, file_id=f"{PATH_PREFIX}{path}", name=path.name, mime=mime, size=size)


async def read_file(item: MediaItem, limit: int) -> bytes:
    """The bytes of a terminal item, at most ``limit`` of them (the file may have grown since it was attached)."""
    check_size(item, limit)
    if not item.file_id.startswith(PATH_PREFIX):
        raise MediaError(f"{item.name or item.kind} is not a local file")
    path = Path(item.file_id[len(PATH_PREFIX) :])

    def read() -> bytes:
        with path.open("rb") as file:
            return file.read(limit + 1)

    try:
        data = await asyncio.to_thread(read)
    except OSError as error:
        raise MediaError(f"cannot read {item.name or path}: {error.strerror or error}") from error
    if len(data) > limit:
        raise MediaTooLarge(item.name, len(data), limit, reported=False)
    return data
