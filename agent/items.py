"""Photos, documents and voice in requests: the newest images go inline, every other item is a stand-in line.

A transcript keeps items as refs under a message's ``_items`` (:class:`ItemRef`), never as bytes:
a long chat that re-sent every old photo as base64 turn after turn would end on HTTP 413. Before
each request :class:`ImageInliner` turns the newest ``max_images`` images of the outgoing
messages (counted from the end, tool results that carry items included) into image parts read
through a :class:`MediaSource`; every other image, and every item that could not be taken in,
is a one-line :func:`stand_in` the model can ``session_fetch`` by id. A document's text and a
voice transcript are already in their message's content, so they need nothing here.

The ref shape and the stand-in line live in :mod:`agent.messages` (the compaction phases and the
recovery tools, which sit below this module, write them too); they are re-exported here.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from agent.messages import ItemKind, ItemRef, Message, is_sendable_image, item_refs, speaker_of, stand_in
from agent.tokens import ITEMS_KEY

__all__ = [
    "DEFAULT_MAX_IMAGES",
    "NOT_READABLE",
    "NO_LONGER_STORED",
    "ImageInliner",
    "ItemKind",
    "ItemRef",
    "MediaSource",
    "stand_in",
]

log = logging.getLogger(__name__)

#: Images sent inline per request unless configured (``media.max_images_per_request``).
DEFAULT_MAX_IMAGES = 4
#: Image formats every route takes (Anthropic takes only these four).
SENDABLE_MIMES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
#: Roles whose content may hold an image part: no route takes one in an assistant or system message.
IMAGE_ROLES = frozenset({"user", "tool"})
DATA_URL_PREFIX = "data:"
#: Follows the stand-in of an image chosen to go inline whose bytes the store no longer has.
NO_LONGER_STORED = "(no longer stored)"
#: Follows the stand-in of an image whose bytes could not be read for this request (the store was away).
NOT_READABLE = "(could not be read just now)"


class MediaSource(Protocol):
    """Where the agent reads an item's bytes, and keeps what the model makes: the gateway adapts the chat's
    media store to it."""

    async def read(self, sha: str) -> tuple[bytes, str] | None:
        """``(bytes, mime)`` of the item stored under ``sha``, or None when it is not stored."""

    async def keep(self, data: bytes, *, mime: str, name: str) -> Mapping[str, Any]:
        """Store an image or file the model (or a tool) made for the person; its :class:`ItemRef` (with
        ``error`` set when it could not be kept)."""


class ImageInliner:
    """Turns item refs into what one request carries (see the module docstring).

    It remembers the data URLs of the images its last request sent, so the requests of one
    turn's tool loop read each image once; that is at most ``max_images`` images held.
    """

    def __init__(self, media: MediaSource | None, *, max_images: int = DEFAULT_MAX_IMAGES, vision: bool = True) -> None:
        self.media = media
        self.max_images = max(0, max_images)
        #: No image goes inline without a store to read it from or a model that can see it.
        self.inline = vision and media is not None
        self._urls: dict[str, str] = {}

    async def prepare(self, messages: list[Message]) -> list[Message]:
        """The messages as this request sends them: ``messages`` itself when none carries items (one pass, no
        copies), else a list in which each carrier is a new dict (``messages`` is never changed)."""
        carriers = [index for index, message in enumerate(messages) if ITEMS_KEY in message]
        if not carriers:
            return messages
        chosen = self._choose(messages, carriers)
        urls = await self._read(set(chosen.values()))
        out = list(messages)
        for index in carriers:
            out[index] = self._render(messages[index], index, chosen, urls)
        return out

    def _choose(self, messages: Sequence[Mapping[str, Any]], carriers: Sequence[int]) -> dict[tuple[int, int], str]:
        """``(message index, ref position) -> sha`` of the newest images to send, one occurrence per image."""
        chosen: dict[tuple[int, int], str] = {}
        if not self.inline or not self.max_images:
            return chosen
        taken: set[str] = set()
        for index in reversed(carriers):
            if messages[index].get("role") not in IMAGE_ROLES:
                continue
            refs = item_refs(messages[index])
            for position in range(len(refs) - 1, -1, -1):
                ref = refs[position]
                if not is_sendable_image(ref) or ref["sha"] in taken:
                    continue
                chosen[(index, position)] = str(ref["sha"])
                taken.add(ref["sha"])
                if len(chosen) >= self.max_images:
                    return chosen
        return chosen

    async def _read(self, shas: set[str]) -> dict[str, str]:
        """``sha -> data URL``, or the note that follows the image's stand-in when it cannot be sent."""
        found = {sha: self._urls[sha] for sha in shas if sha in self._urls}
        missing = sorted(shas - set(found))
        if missing and self.media is not None:
            results = await asyncio.gather(*(self.media.read(sha) for sha in missing), return_exceptions=True)
            for sha, result in zip(missing, results):
                found[sha] = _data_url(sha, result)
        self._urls = {sha: url for sha, url in found.items() if url.startswith(DATA_URL_PREFIX)}
        return found

    def _render(
        self, message: Message, index: int, chosen: Mapping[tuple[int, int], str], urls: Mapping[str, str]
    ) -> Message:
        """A copy of ``message`` whose content shows its items: stand-in lines, and image parts for the chosen."""
        refs = item_refs(message)
        speaker = speaker_of(message)
        ident = message.get("_id") or message.get("_orig_id")
        lines: list[str] = []
        shown: list[dict[str, Any]] = []
        for position, ref in enumerate(refs):
            if ref.get("kind") != "image" and not ref.get("error"):
                continue  # a document's text or a transcript is in the content already
            line = stand_in(ident, ref, speaker=speaker)
            sha = chosen.get((index, position))
            url = urls.get(sha, NOT_READABLE) if sha is not None else ""
            if url.startswith(DATA_URL_PREFIX):
                shown += [{"type": "text", "text": line}, {"type": "image_url", "image_url": {"url": url}}]
            else:
                lines.append(f"{line} {url}" if url else line)
        if not lines and not shown:
            return message  # returned uncopied
        copy = message.copy()
        copy.pop("_tok", None)  # its content changes, so its token count must be made again
        copy["content"] = _with_items(message.get("content"), lines, shown)
        return copy


def _data_url(sha: str, result: tuple[bytes, str] | BaseException | None) -> str:
    """A read's result as a ``data:`` URL, or the note saying why the image cannot be sent (logged without bytes)."""
    if result is None:
        return NO_LONGER_STORED
    if isinstance(result, BaseException):
        log.warning("image %s could not be read for the request: %s", sha[:12], type(result).__name__)
        return NOT_READABLE
    data, mime = result
    if mime not in SENDABLE_MIMES:
        log.warning("image %s is %s, a format no route takes; it goes as its stand-in line", sha[:12], mime)
        return f"(not sent: {' '.join(str(mime).split()) or 'an unknown type'} is not an image format the model takes)"
    return f"{DATA_URL_PREFIX}{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _with_items(content: Any, lines: list[str], shown: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """Content with stand-in lines after its text and the shown images' labelled parts after that."""
    if isinstance(content, list):
        parts = [dict(part) if isinstance(part, Mapping) else {"type": "text", "text": str(part)} for part in content]
        if lines:
            parts.append({"type": "text", "text": "\n".join(lines)})
        return parts + shown
    text = "\n".join(piece for piece in [content or "", *lines] if piece)
    if not shown:
        return text
    return ([{"type": "text", "text": text}] if text else []) + shown
