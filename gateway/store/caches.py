"""What this process keeps of the sessions it read, so the per-message path reads only what is new.

:class:`TranscriptCache` holds live transcripts across turns; :class:`ReadAhead` holds, for one
snapshot, the session that the step handing out an inbox entry (claim, finish_entry) read in the
same round trip.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agent.messages import Message

#: How long a session read ahead by the step that handed out an inbox entry may stand in for a
#: fresh read: far below the shortest lock ttl (1 s), so a worker that stalled reads again.
READ_AHEAD_SECONDS = 0.5


@dataclass
class HeldTranscript:
    """A chat's live transcript as last read, complete up to the session's ``next_id`` then."""

    session_id: str
    next_id: int
    messages: dict[str, Message]
    tokens: int

    @property
    def key(self) -> tuple[str, int]:
        return self.session_id, self.next_id


def held_args(held: HeldTranscript | None) -> tuple[str, int]:
    """What a script is told of the held transcript (``read_snapshot``'s held sid and next_id)."""
    return held.key if held else ("", 0)


class TranscriptCache:
    """Live transcripts this process read lately, so a turn fetches and decodes only what is new.

    Stored message bodies never change and ids only grow, so what a chat's session held up to
    its ``next_id`` stays valid: the snapshot script then sends only newer messages (plus any
    older id it finds in the list that is not held here). Least recently used chats are dropped
    beyond ``max_tokens`` held in all; ``0`` turns the cache off. Callers get copies.
    """

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max(0, int(max_tokens))
        self.tokens = 0
        self._chats: collections.OrderedDict[str, HeldTranscript] = collections.OrderedDict()

    def get(self, chat: str) -> HeldTranscript | None:
        held = self._chats.get(chat)
        if held is not None:
            self._chats.move_to_end(chat)
        return held

    def put(self, chat: str, session_id: str, next_id: int, messages: Sequence[Message]) -> None:
        self.drop(chat)
        if not self.max_tokens:
            return
        tokens = sum(int(message.get("_tok") or 0) for message in messages)
        if tokens > self.max_tokens:
            return
        self._chats[chat] = HeldTranscript(session_id, next_id, {m["_id"]: m for m in messages}, tokens)
        self.tokens += tokens
        self._evict()

    def _evict(self) -> None:
        while self.tokens > self.max_tokens:
            _chat, oldest = self._chats.popitem(last=False)
            self.tokens -= oldest.tokens

    def extend(self, chat: str, held: HeldTranscript, next_id: int, fresh: Sequence[Message]) -> bool:
        """Add what was appended after ``held`` was read (the usual turn): no rebuild of the rest.

        False, changing nothing, when ``held`` is no longer the chat's entry (evicted meanwhile).
        """
        if self._chats.get(chat) is not held:
            return False
        tokens = sum(int(message.get("_tok") or 0) for message in fresh)
        if held.tokens + tokens > self.max_tokens:
            self.drop(chat)  # grown past the whole budget: not held, as put would refuse it (others stay)
            return True
        held.messages.update((message["_id"], message) for message in fresh)
        held.next_id = next_id
        held.tokens += tokens
        self.tokens += tokens
        self._evict()
        return True

    def drop(self, chat: str) -> None:
        held = self._chats.pop(chat, None)
        if held is not None:
            self.tokens -= held.tokens


@dataclass(frozen=True)
class _Ahead:
    reply: Any  # what read_snapshot returned
    held: HeldTranscript | None  # the held transcript it was read against
    until: float  # monotonic time until which it may be used


class ReadAhead:
    """The session a lock or entry step read for the entry it handed out, kept for :meth:`take`.

    It stands for the session only while this process holds the chat's lock and writes nothing
    to it: every write drops it (:meth:`drop`), and so do the lock's release and the next read. It
    is also used only within :data:`READ_AHEAD_SECONDS` of the step that read it, and within half
    the lock's ttl after a claim. A worker that stalled longer may have lost the lock meanwhile,
    and then reads afresh (its writes are fenced in any case).
    """

    def __init__(self, transcripts: TranscriptCache) -> None:
        self.transcripts = transcripts
        self._chats: dict[str, _Ahead] = {}

    def keep(
        self, chat: str, reply: Any, held: HeldTranscript | None, *, sent: float, lock_ttl: float | None = None
    ) -> None:
        """Keep ``reply`` (read against ``held`` by a step sent at monotonic ``sent``), or drop the
        chat's read-ahead when the step read none."""
        if not reply:
            self._chats.pop(chat, None)
            return
        window = READ_AHEAD_SECONDS if lock_ttl is None else min(READ_AHEAD_SECONDS, lock_ttl / 2)
        self._chats[chat] = _Ahead(reply, held, sent + window)

    def drop(self, chat: str) -> None:
        self._chats.pop(chat, None)

    def take(self, chat: str) -> tuple[Any, HeldTranscript | None] | None:
        """The chat's read-ahead (reply, held) if it is still good to use, once; None otherwise."""
        ahead = self._chats.pop(chat, None)
        if ahead is not None and ahead.held is self.transcripts.get(chat) and time.monotonic() < ahead.until:
            return ahead.reply, ahead.held
        return None
