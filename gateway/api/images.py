"""A request's image parts, read and kept while the request is answered, so its turn reads them as any
platform's photos.

An image part is a ``data:`` URL (base64) or an ``https://`` URL. Either is read here, at request time, with
``media.max_bytes`` as its limit, and stored in the session's media store under
``upload:<chat id>/<sha256>`` (as the web chat keeps a page's uploads): the item handed in names bytes that
are kept already, and :meth:`gateway.api.adapter.ApiAdapter.fetch` reads them back in whichever process runs
the turn. An https URL is downloaded here rather than by the turn because then the client hears at once what
went wrong with it (413 for an image over the limit, 400 naming the part for one that cannot be had) instead
of finding a line about it in the answer, and because the turn may run later or again (queued behind another
message, retried after a crash) when a signed URL no longer works. It is fetched only from a public address
(:mod:`gateway.api.public_fetch`) unless ``platforms.api.fetch_private_urls`` is true (:func:`image_download`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Awaitable, Callable

from redis.exceptions import RedisError

from gateway.api.adapter import chat_key
from gateway.api.errors import ApiError, invalid, not_stored
from gateway.api.public_fetch import download_public
from gateway.api.requests import ChatCompletionRequest, ImagePart
from gateway.api.turns import STORE_RETRY_SECONDS
from gateway.media.download import download
from gateway.media.errors import MediaError, MediaTooLarge
from gateway.media.units import size_text
from gateway.platforms.base import MediaItem
from gateway.store.media import MediaStore
from gateway.web.live_adapter import upload_file_id

#: Image parts one message may carry (an album's worth, as the web chat takes): each may be a download.
MAX_IMAGES = 10
_DATA_URL = re.compile(r"data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[^;,]*)*?);base64,(?P<data>.*)", re.DOTALL)
#: Downloads an https URL: (url, limit, name) -> bytes (:func:`gateway.media.download.download` by default).
Download = Callable[[str, int, str], Awaitable[bytes]]


def too_large_image(param: str, error: MediaTooLarge) -> ApiError:
    return ApiError(
        413,
        f"{param}: the image is {size_text(error.size)}, over this gateway's {size_text(error.limit)} limit.",
        param=param,
        code="image_too_large",
    )


def decode_data_url(url: str, param: str, limit: int) -> tuple[bytes, str]:
    """The bytes and type of a base64 ``data:`` URL; 400 naming ``param`` for one that is not, 413 for bytes
    over ``limit`` (told by the URL's length before it is decoded)."""
    found = _DATA_URL.fullmatch(url)
    if found is None:
        raise invalid(param, f"{param}: an image must be a base64 data: URL or an https:// URL.")
    encoded = found["data"].strip()
    if len(encoded) // 4 * 3 > limit + 2:  # base64 is 4 characters for 3 bytes (with up to 2 of padding)
        raise too_large_image(param, MediaTooLarge("the image", len(encoded) // 4 * 3, limit))
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise invalid(param, f"{param}: the data: URL is not valid base64.") from None
    if not data:
        raise invalid(param, f"{param}: the data: URL holds no bytes.")
    if len(data) > limit:
        raise too_large_image(param, MediaTooLarge("the image", len(data), limit))
    mime = (found["mime"] or "").lower()
    if mime and not mime.startswith("image/"):
        raise invalid(param, f"{param}: the data: URL is of type {mime}, not an image.")
    return data, mime


async def _bounded_download(url: str, limit: int, name: str) -> bytes:
    return await download(url, limit=limit, name=name)


def image_download(fetch_private_urls: bool) -> Download:
    """How an https image is downloaded: from public addresses only, as shipped; from any address (and through
    the environment's proxy) when ``platforms.api.fetch_private_urls`` says the key holders may reach them."""
    return _bounded_download if fetch_private_urls else download_public


async def read_image(part: ImagePart, param: str, limit: int, fetch: Download = download_public) -> tuple[bytes, str]:
    """The bytes an image part names and their type ("" when the URL does not say): decoded, or downloaded
    within ``limit``."""
    url = part.image_url.url.strip()
    if url.startswith("data:"):
        return decode_data_url(url, param, limit)
    if not url.lower().startswith("https://"):
        raise invalid(param, f"{param}: an image must be a base64 data: URL or an https:// URL.")
    try:
        return await fetch(url, limit, "the image"), ""
    except MediaTooLarge as error:
        raise too_large_image(param, error) from None
    except MediaError as error:
        raise invalid(param, f"{param}: {error}.") from None


async def keep_images(
    asked: ChatCompletionRequest,
    index: int | None,
    store: MediaStore | None,
    chat_id: str,
    fetch: Download = download_public,
) -> tuple[MediaItem, ...]:
    """The image parts of the request's message ``index`` (the person's new message; None: no such message)
    read, stored for chat ``api:<chat_id>`` and named as items."""
    if index is None or not asked.messages[index].images():
        return ()
    if store is None:
        raise ApiError(400, "This gateway takes no images.", param=f"messages[{index}].content", code="unsupported")
    if len(asked.messages[index].images()) > MAX_IMAGES:
        raise invalid(f"messages[{index}].content", f"A message may carry at most {MAX_IMAGES} images.")
    items: list[MediaItem] = []
    for part_index, part in asked.messages[index].images():
        param = f"messages[{index}].content[{part_index}]"
        data, mime = await read_image(part, param, store.max_bytes, fetch)
        file_id = upload_file_id(chat_id, hashlib.sha256(data).hexdigest())
        name = f"image-{len(items) + 1}"
        try:
            await store.put(chat_key(chat_id), data, mime=mime, name=name, file_id=file_id)
        except (RedisError, OSError) as error:
            raise not_stored(STORE_RETRY_SECONDS) from error
        items.append(MediaItem(kind="image", file_id=file_id, name=name, mime=mime, size=len(data)))
    return tuple(items)
