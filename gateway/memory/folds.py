"""What a compaction keeps about the people who wrote what it folds: committed with it, then added to their memory.

A person's memory lives under their own hash tag and a chat's session under the chat's, so no single Redis
script (one Redis Cluster slot) can write both. The fold's entries are therefore committed in the chat's own
keys, in the very commit that archives the folded messages (the session meta's ``memory_pending``): a commit
that lands carries its entries, one that does not carries none. Publishing them to each person's memory comes
after, and may be repeated at any point: adding a text a scope keeps already changes nothing, and the pending
list is cleared only once every entry of it was added. A crash between the two is finished by the chat's next
turn (:meth:`FoldMemory.publish` runs before anything else reads the memory).

The entries come from :func:`agent.compaction.memory_notes.memory_notes` over the folded messages alone, never
from the summary, so they are the same whether a model or the deterministic notes wrote the summary.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from agent.compaction.memory_notes import memory_notes
from agent.messages import Message
from gateway.events import EventBus, MemoryWriteEvent
from gateway.store import SessionStore
from gateway.store.locks import Lock
from gateway.store.memory import MemoryStore
from gateway.store.meta import SessionMeta

log = logging.getLogger(__name__)

#: Entries one compaction keeps per person at most (the firmest first): a fold is not a dictation.
PER_PERSON = 20
#: Pending entries a session holds at most (compactions that could not publish yet, oldest dropped last).
MAX_PENDING = 400


def folded_messages(before: Sequence[Message], after: Sequence[Message], unstored: Sequence[Message]) -> list[Message]:
    """The messages a compaction folded away: stored ones no longer in the live list, and those the turn made
    and folded before they were ever stored."""
    kept = {message.get("_id") for message in after if message.get("_id")}
    return [m for m in before if m.get("_id") and m["_id"] not in kept] + list(unstored)


def fold_records(folded: Sequence[Message], *, chat: str, scope: str) -> list[dict[str, Any]]:
    """The entries the folded messages give their writers, as the commit records them (with when each was said:
    what a person said before they forgot it is not kept again)."""
    said = {str(m.get("_id")): float(m["_ts"]) for m in folded if isinstance(m.get("_ts"), int | float)}
    return [
        {"person": note.person, "scope": scope, "text": note.text, "chat": chat, "message_id": note.message_id}
        | ({"said_at": said[note.message_id]} if note.message_id in said else {})
        for note in memory_notes(folded, limit_per_person=PER_PERSON)
    ]


def pending_after(meta: SessionMeta, records: Sequence[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The session's ``memory_pending`` once a commit adds ``records`` (None: nothing pending either way)."""
    pending = [*meta.memory_pending, *records][-MAX_PENDING:]
    return pending or None


def _said_at(record: dict[str, Any]) -> float | None:
    said = record.get("said_at")
    return float(said) if isinstance(said, int | float) and not isinstance(said, bool) else None


class FoldMemory:
    """Turns what compactions fold into entries of the writers' memory."""

    def __init__(self, store: SessionStore, memory: MemoryStore, events: EventBus) -> None:
        self.store = store
        self.memory = memory
        self.events = events

    def commit_fields(
        self,
        meta: SessionMeta,
        before: Sequence[Message],
        after: Sequence[Message],
        unstored: Sequence[Message],
        *,
        chat: str,
        scope: str,
    ) -> dict[str, Any]:
        """The meta fields a compaction commit writes for memory: the fold's entries, pending, and the memory
        view cleared (the block is chosen again for the new prefix)."""
        records = fold_records(folded_messages(before, after, unstored), chat=chat, scope=scope)
        return {"memory_pending": pending_after(meta, records), "memory_view": None}

    async def publish(self, chat: str, session_id: str, lock: Lock, platform: str) -> int:
        """Add the session's pending entries to their people's memory, then clear them; how many were new."""
        meta = await self.store.meta(chat, session_id)
        if not meta.memory_pending:
            return 0
        added: dict[str, int] = {}
        for record in meta.memory_pending:
            person, text = str(record.get("person") or ""), str(record.get("text") or "")
            if not person or self.memory.refusal(text) is not None:
                continue
            try:
                result = await self.memory.add(
                    person,
                    str(record.get("scope")),
                    text,
                    source="compaction",
                    chat=str(record.get("chat") or chat),
                    message_id=str(record.get("message_id") or ""),
                    said_at=_said_at(record),
                )
            except ValueError as error:  # a record the store cannot take (a scope of a bad shape): skipped
                log.warning("%s: a folded memory entry was not kept: %s", chat, error)
                continue
            added[person] = added.get(person, 0) + result.changed
        await self.store.update_meta(chat, session_id, lock=lock, memory_pending=None)
        for person, count in added.items():
            if count:
                await self.events.emit(
                    MemoryWriteEvent(
                        platform=platform, chat=chat, person=person, source="compaction", action="add", entries=count
                    )
                )
        return sum(added.values())
