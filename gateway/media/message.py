"""A message's items taken in as its session keeps them: one content text, the refs, what to tell the person.

The turn calls :meth:`ItemIntake.take` for each incoming message before it is bounded and stored.
Each item is fetched through the platform it came from (its adapter's ``fetch``), made readable
and kept by :func:`~gateway.media.intake.take_in`; the person's own text comes first in the
content, then each item's text (a document's, a transcript, or the line saying what went wrong),
and the refs go under ``_items`` for the agent to show (agent/items.py). A message without items
costs nothing here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.config.models import MediaSettings
from gateway.media.errors import MediaError
from gateway.media.intake import Fetch, take_in
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
    """Takes in every item of a message through its platform's fetch, into one chat's media store."""

    def __init__(self, store: MediaStore, settings: MediaSettings, transcriber: Transcriber | None,
                 fetchers: Mapping[str, Fetch]) -> None:
        self.store = store
        self.settings = settings
        self.transcriber = transcriber
        self.fetchers = dict(fetchers)

    async def take(self, message: IncomingMessage) -> TakenMessage:
        if not message.items:
            return TakenMessage(message.text)
        fetch = self.fetchers.get(message.platform, _cannot_fetch)
        taken = [await take_in(item, fetch, self.store, message.chat, self.settings, self.transcriber)
                 for item in message.items]
        content = "\n\n".join(part for part in [message.text, *(each.text for each in taken)] if part)
        return TakenMessage(content, [each.ref for each in taken],
                            [f"{each.ref.get('name') or each.ref['kind']}: {each.problem}" for each in taken
                             if each.problem])


async def _cannot_fetch(item: MediaItem, limit: int) -> bytes:
    raise MediaError(f"{item.name or item.kind} came from a platform this gateway cannot fetch from")
