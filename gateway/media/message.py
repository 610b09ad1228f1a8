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

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.config.models import MediaSettings
from gateway.media.errors import MediaError
from gateway.media.in_flight import BytesInFlight
from gateway.media.intake import Fetch, Taken, take_in
from gateway.media.transcribe import Transcriber
from gateway.platforms.base import IncomingMessage, MediaItem
from gateway.store.media import MediaStore


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

    def __init__(self, store: MediaStore, settings: MediaSettings, transcriber: Transcriber | None,
                 fetchers: Mapping[str, Fetch], *, in_flight: BytesInFlight | None = None) -> None:
        self.store = store
        self.settings = settings
        self.transcriber = transcriber
        self.fetchers = dict(fetchers)
        #: Bytes being taken in now, over every chat (``media.max_bytes_in_flight``).
        self.in_flight = in_flight or BytesInFlight(settings.bytes_in_flight)

    async def take(self, message: IncomingMessage) -> TakenMessage:
        if not message.items:
            return TakenMessage(message.text)
        fetch = self.fetchers.get(message.platform, _cannot_fetch)
        taken = [await self._take_one(item, fetch, message.chat) for item in message.items]
        content = "\n\n".join(part for part in [message.text, *(each.text for each in taken)] if part)
        return TakenMessage(content, [each.ref for each in taken],
                            [f"{each.ref.get('name') or each.ref['kind']}: {each.problem}" for each in taken
                             if each.problem])


    async def _take_one(self, item: MediaItem, fetch: Fetch, chat: str) -> Taken:
        """One item within the bound: its reported size reserved (unknown: the most an item may be); one
        refused on its reported size before any fetch reserves nothing."""
        if item.size > self.settings.max_bytes:
            return await take_in(item, fetch, self.store, chat, self.settings, self.transcriber)
        async with self.in_flight.hold(item.size or self.settings.max_bytes):
            return await take_in(item, fetch, self.store, chat, self.settings, self.transcriber)


async def _cannot_fetch(item: MediaItem, limit: int) -> bytes:
    raise MediaError(f"{item.name or item.kind} came from a platform this gateway cannot fetch from")
