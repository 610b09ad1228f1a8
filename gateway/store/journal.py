"""The messages a reply has put on the platform, recorded under the chat's lock.

A turn that is tried again after a crash must not post a second copy of what the first
attempt already sent. So every message a reply posts is recorded here the moment the
platform returns its id — before the reply goes on — in a hash of the chat (same hash
tag as the chat's other keys, :meth:`gateway.store.keys.ChatKeys.reply`)::

    {prefix}:{<chat>}:reply:<entry id>     hash  "<index>" -> message id, "<index>:text" -> the text it
                                                 shows (edited replies), "finals" -> final chunks
                                                 delivered (draft replies)

and the retried reply loads it: an edited reply edits those messages, a draft reply
sends only the chunks not yet delivered. The write (``reply_record.lua``) checks the chat
lock's token, so a worker whose lock expired cannot record into a newer attempt's reply
(it raises :class:`gateway.store.errors.StaleLock`). The only window in which a message can
still go out twice is between the platform accepting it and this one Redis round trip. The
hash expires a day after its last write.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.store import scripts
from gateway.store.channel import RedisChannel
from gateway.store.keys import ChatKeys, check_key_part, text_of
from gateway.store.locks import Lock
from gateway.store.routes import run

#: How long a reply's record is kept after its last write (a retry comes within minutes).
JOURNAL_TTL_MS = 24 * 3600 * 1000


class ReplyJournal:
    """One reply's record: what its messages are on the platform, for the attempt that follows a crash."""

    def __init__(self, channel: RedisChannel, prefix: str, lock: Lock, entry_id: str) -> None:
        keys = ChatKeys(prefix, check_key_part("chat", lock.chat))
        self.channel = channel
        self.lock = lock
        self.lock_key = keys.lock
        self.key = keys.reply(check_key_part("entry id", entry_id))

    async def load(self) -> dict[str, str]:
        """Everything recorded so far (empty for a first attempt)."""
        raw = await self.channel.call("HGETALL", self.key)
        pairs = raw.items() if isinstance(raw, dict) else zip(raw[::2], raw[1::2])
        return {text_of(field): text_of(value) for field, value in pairs}

    async def record(self, facts: Mapping[str, str]) -> None:
        """Record facts (a message id at a position and its text, the finals delivered) before the reply goes on."""
        pairs = [part for fact in facts.items() for part in fact]
        await run(
            scripts.REPLY_RECORD, self.channel, [self.lock_key, self.key], [self.lock.token, JOURNAL_TTL_MS, *pairs]
        )
