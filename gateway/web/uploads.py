"""A chat message sent with files: the web chat's multipart form, read as a stream with a byte limit.

The composer posts ``multipart/form-data`` (it works without JavaScript: a file input and a
caption), so a file is never read into memory whole before it is checked: each file is read a
chunk at a time into a :class:`~gateway.media.download.LimitedBuffer`, the chunks growing smaller
near the limit, and the first chunk that would take it past ``media.max_bytes`` stops the read with
:class:`~gateway.media.errors.MediaTooLarge` and the refusal is sent at once: the buffer never holds
more than the limit, the request is read at most one :data:`CHUNK` ahead of it (aiohttp's reader
looks ahead for the boundary), and the rest of the body is never held. The text fields are bounded the same way.
"""

from __future__ import annotations

import mimetypes
from dataclasses import dataclass, field

from aiohttp import BodyPartReader, hdrs, web

from gateway.media.download import LimitedBuffer
from gateway.media.errors import MediaError
from gateway.platforms.base import MediaItem

#: Bytes read from the request at a time.
CHUNK = 64 * 1024
#: The fewest asked for at once (aiohttp's reader needs room for the boundary).
MIN_CHUNK = 1024
#: Files one message may carry (an album's worth).
MAX_FILES = 10
#: The form's file field.
FILE_FIELD = "file"


@dataclass(frozen=True)
class Upload:
    """One file as the browser sent it: its name, its type (as sent, else guessed from the name), its bytes."""

    name: str
    mime: str
    data: bytes


@dataclass(frozen=True)
class SentForm:
    """The fields of a sent message: its text (the caption when files come with it), its nonce, its files."""

    text: str = ""
    nonce: str = ""
    files: list[Upload] = field(default_factory=list)


class FormError(ValueError):
    """A form the page cannot take (too many files, a field too long); the message says which, to the person."""


def is_multipart(request: web.Request) -> bool:
    return request.content_type == "multipart/form-data"


def item_kind(mime: str) -> str:
    """What the gateway takes a file in as, by its type: ``image/*`` an image, ``audio/*`` audio, else a document."""
    major = mime.partition("/")[0].lower()
    return {"image": "image", "audio": "audio"}.get(major, "document")


def upload_mime(name: str, declared: str) -> str:
    """The type the browser declared, or one guessed from the file name when it declared none of use."""
    declared = declared.split(";")[0].strip().lower()
    if declared and declared != "application/octet-stream":
        return declared
    return mimetypes.guess_type(name)[0] or declared


def media_item(upload: Upload, file_id: str) -> MediaItem:
    """The item a stored upload is handed to the intake as (``file_id`` names the stored bytes)."""
    return MediaItem(
        kind=item_kind(upload.mime),
        file_id=file_id,
        name=upload.name,
        mime=upload.mime,
        size=len(upload.data),
    )


async def read_send_form(
    request: web.Request, *, max_file_bytes: int, max_text_bytes: int, max_files: int = MAX_FILES
) -> SentForm:
    """The message a multipart post sends. Raises :class:`~gateway.media.errors.MediaTooLarge` as soon as a
    file passes ``max_file_bytes`` (having read no more than that of it), :class:`FormError` for the rest."""
    text, nonce, files = "", "", []
    reader = await request.multipart()
    while (part := await reader.next()) is not None:
        if not isinstance(part, BodyPartReader):  # a nested multipart is no field of this form
            raise FormError("the form holds a part it does not know")
        if part.name == FILE_FIELD:
            if not part.filename:  # the file input left empty
                await part.release()
                continue
            if len(files) >= max_files:
                raise FormError(f"one message takes at most {max_files} files")
            name = part.filename
            data = await _read_bounded(part, LimitedBuffer(name, max_file_bytes))
            files.append(Upload(name, upload_mime(name, part.headers.get(hdrs.CONTENT_TYPE, "")), data))
        elif part.name in ("text", "nonce"):
            value = await _read_text(part, max_text_bytes)
            text, nonce = (value, nonce) if part.name == "text" else (text, value)
        else:
            await part.release()
    return SentForm(text.strip(), nonce, files)


async def _read_bounded(part: BodyPartReader, buffer: LimitedBuffer) -> bytes:
    """The part's bytes; the buffer refuses (raising) the chunk that would take it past its limit."""
    while chunk := await part.read_chunk(max(MIN_CHUNK, min(CHUNK, buffer.limit - buffer.tell() + 1))):
        buffer.write(chunk)
    return buffer.getvalue()


async def _read_text(part: BodyPartReader, limit: int) -> str:
    try:
        data = await _read_bounded(part, LimitedBuffer(part.name or "the text", limit))
    except MediaError as error:
        raise FormError("the message is too long") from error
    try:
        return data.decode(part.get_charset("utf-8"))
    except (UnicodeDecodeError, LookupError) as error:
        raise FormError("the message is not text the page can read") from error
