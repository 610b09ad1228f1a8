"""The stored images the pages show as thumbnails, served to the page that may see them and to nobody else.

The bytes are read from the chat's own media store (:class:`~gateway.store.media.MediaStore`
keeps each chat's items under that chat's keys), so a route that names its chat by the page's
own access check — the browser's chat cookie, or the operator's token with the chat in the
path — cannot reach another chat's item whatever hash it is asked for. Only raster images are
served, as the type they were stored as: a stored file named anything else (an HTML page, an SVG,
a script) is never handed to a browser from this origin.
"""

from __future__ import annotations

import re

from aiohttp import web

from gateway.store.media import MediaStore

#: Types a browser shows as a picture and never runs.
SHOWN_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_SHA = re.compile(r"[0-9a-f]{64}")


async def image_response(store: MediaStore, chat: str, sha: str) -> web.Response:
    """The image ``sha`` of ``chat`` as stored; 404 for anything else (another chat's, a document, dropped bytes)."""
    found = await store.get(chat, sha) if _SHA.fullmatch(sha) else None
    if found is None or found[1] not in SHOWN_TYPES:
        raise web.HTTPNotFound(text="no such image in this chat\n")
    data, mime = found
    return web.Response(body=data, content_type=mime, headers={"Content-Disposition": "inline"})
