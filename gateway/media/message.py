"""A message's items taken in as its session keeps them: one content text, the refs, what to tell the person.

The turn calls :meth:`ItemIntake.take` for each incoming message before it is bounded and stored.
Each item is fetched through the platform it came from (its adapter's ``fetch``), made readable
and kept by :func:`~gateway.media.intake.take_in`; the person's own text comes first in the
content, then each item's text (a document's, a transcript, or the line saying what went wrong),
and the refs go under ``_items`` for the agent to show (agent/items.py). A message without items
costs nothing here.

Every item reserves its bytes in the process's :class:`~gateway.media.in_flight.BytesInFlight`
(``media.max_bytes_in_flight``) before it is fetched and gives them back once it is stored and read,
so a flood of media across many chats waits its turn instead of holding every download at once. A
message's items go one after another, so a message never holds one reservation while waiting for
the next.
"""

from __future__ import annotations

import hashlib
import logging
import mimetypes
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import PurePosixPath
from typing import Any

from gateway.config.models import MediaSettings
from gateway.media.errors import MediaError
from gateway.media.images import prepare_image
from gateway.media.in_flight import BytesInFlight
from gateway.media.intake import Fetch, Taken, take_in
from gateway.media.transcribe import Transcriber, Transcribes
from gateway.platforms.base import IncomingMessage, MediaItem
from gateway.store.media import MediaStore
from gateway.store.taken import TakenRecords

log = logging.getLogger(__name__)

#: The ``file_id`` of an item the model or a tool made: no platform holds it, so it cannot be fetched again.
MADE_PREFIX = "made:"


@dataclass(frozen=True)
class TakenMessage:
    """``content`` for the session message, ``refs`` for its ``_items``, and ``problems`` — one sentence per
    item that could not be taken in, for the reply that tells the person."""

    content: str
    refs: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


class ItemIntake:
    """Takes in every item of a message through its platform's fetch, into its chat's media store, within
    the process's bound on bytes in flight (one per process: the runner builds one intake)."""

    def __init__(
        self,
        store: MediaStore,
        settings: MediaSettings,
        transcriber: Transcriber | None,
        fetchers: Mapping[str, Fetch],
        *,
        in_flight: BytesInFlight | None = None,
        records: TakenRecords | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.transcriber = transcriber
        self.fetchers = dict(fetchers)
        #: What each message's items became, for a retried turn (no second download or transcription).
        self.records = records
        #: Bytes being taken in now, over every chat (``media.max_bytes_in_flight``).
        self.in_flight = in_flight or BytesInFlight(settings.bytes_in_flight)

    async def take(self, message: IncomingMessage, transcriber: Transcribes | None = None) -> TakenMessage:
        """The message with its items taken in: once per inbox entry (a retried turn reads what the first
        attempt took in). ``transcriber`` stands in for the intake's own (one that meters a turn's budgets)."""
        if not message.items:
            return TakenMessage(message.text)
        if self.records is not None and (kept := await self.records.get(message.chat, message.entry_id)):
            return TakenMessage(kept["content"], kept["refs"], kept["problems"])
        fetch = self.fetchers.get(message.platform, _cannot_fetch)
        hears = transcriber if transcriber is not None and self.transcriber is not None else self.transcriber
        taken = [await self._take_one(item, fetch, message.chat, hears) for item in message.items]
        content = "\n\n".join(part for part in [message.text, *(each.text for each in taken)] if part)
        result = TakenMessage(
            content,
            [each.ref for each in taken],
            [f"{each.ref.get('name') or each.ref['kind']}: {each.problem}" for each in taken if each.problem],
        )
        if self.records is not None:
            await self.records.keep(message.chat, message.entry_id, asdict(result))
        return result

    async def _take_one(self, item: MediaItem, fetch: Fetch, chat: str, transcriber: Transcribes | None) -> Taken:
        """One item within the bound: its reported size reserved (unknown: the most an item may be); one
        refused on its reported size before any fetch reserves nothing."""
        if item.size > self.settings.max_bytes:
            return await take_in(item, fetch, self.store, chat, self.settings, transcriber)
        async with self.in_flight.hold(item.size or self.settings.max_bytes):
            return await take_in(item, fetch, self.store, chat, self.settings, transcriber)

    async def keep_made(self, chat: str, data: bytes, *, mime: str, name: str) -> dict[str, Any]:
        """An image or file the model or a tool made for ``chat``, kept as one the person sent is (an image
        scaled, everything by content hash, within the chat's allowance); its ref (``error`` set when refused)."""
        kind = "image" if mime.startswith("image/") else "document"
        item = MediaItem(kind=kind, file_id=f"{MADE_PREFIX}{name}", name=name, mime=mime, size=len(data))

        async def made(_item: MediaItem, _limit: int) -> bytes:
            return data

        ref = (await take_in(item, made, self.store, chat, self.settings, None)).ref
        if ref.get("mime") != mime and (suffix := mimetypes.guess_extension(str(ref.get("mime")))):
            ref["name"] = str(PurePosixPath(name).with_suffix(suffix))  # stored re-encoded (too heavy as it was)
        return ref

    async def fetch_again(self, chat: str, sha: str) -> tuple[bytes, str] | None:
        """An image whose bytes the chat's allowance dropped (``media.max_total_bytes``), fetched again from
        its platform by the file id kept with its record, scaled as when it came and kept again: ``(bytes,
        mime)``, or None when it cannot be had (no record, no fetch for the platform, the platform refused)."""
        about = await self.store.about(chat, sha)
        fetch = self.fetchers.get(chat.partition(":")[0])
        if about is None or not about.file_id or about.file_id.startswith(MADE_PREFIX) or fetch is None:
            return None
        item = MediaItem(kind="image", file_id=about.file_id, name=about.name, mime=about.mime)
        try:
            async with self.in_flight.hold(self.settings.max_bytes):
                data = await fetch(item, self.settings.max_bytes)
                picture = await prepare_image(data, max_side=self.settings.image_max_side)
                if hashlib.sha256(picture.data).hexdigest() != sha:
                    raise MediaError("the platform now serves other bytes under its file id")
                await self.store.put(chat, picture.data, mime=picture.mime, name=about.name, file_id=about.file_id)
        except MediaError as error:
            log.info("%s: image %s could not be fetched again: %s", chat, sha[:12], error)
            return None
        return picture.data, picture.mime


async def _cannot_fetch(item: MediaItem, limit: int) -> bytes:
    raise MediaError(f"{item.name or item.kind} came from a platform this gateway cannot fetch from")
