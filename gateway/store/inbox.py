"""The durable intake: every incoming message is in Redis before the platform is acknowledged.

Intake deduplicates by the platform's update id and appends to the chat's inbox list in
one script (both keys carry the chat's hash tag), then marks the chat ready in a global
sorted set that workers of every process scan. The mark comes AFTER the push, and is
repeated for duplicates, so a chat with pending entries is always marked: a worker that
finds a chat's inbox empty unmarks it, then releases the chat's lock only if the inbox is
still empty (``SessionStore.release_if_idle``, one script); if an entry slipped in, it marks
the chat again before going on. While a worker holds a chat, the chat's score in the set is a
lease in the future, so other processes' dispatchers skip it until the holder's lock could
have expired.

An entry leaves the inbox only when its turn is committed and its reply recorded as sent
(``SessionStore.finish_entry``, one fenced step), so a process that dies mid-turn leaves the entry for the next worker
(at-least-once intake); the session meta's ``last_entry_id``/``replied_entry_id`` make
the retry commit and reply only once.
"""

from __future__ import annotations

import time
from typing import cast

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from gateway.platforms.base import IncomingMessage
from gateway.store import MIN_SEEN_TTL_SECONDS, ChatKeys, scripts
from gateway.store.channel import Arg, RedisChannel, RedisPyChannel, is_noscript
from gateway.store.errors import script_errors
from gateway.store.keys import chat_index_key, ready_key

#: A ``/stop`` no turn honoured is forgotten after this long.
STOP_TTL_SECONDS = 600


class Inbox:
    """Per-chat inbox lists plus the global set of chats with pending entries."""

    def __init__(
        self,
        redis: Redis,
        prefix: str = "fg",
        *,
        dedupe_ttl_seconds: int = MIN_SEEN_TTL_SECONDS,
        channel: RedisChannel | None = None,
    ) -> None:
        """``channel`` carries the commands of the message path (as in :class:`gateway.store.SessionStore`)."""
        if dedupe_ttl_seconds < MIN_SEEN_TTL_SECONDS:
            raise ValueError(f"dedupe ttl must be at least {MIN_SEEN_TTL_SECONDS} s")
        self.redis = redis
        self.channel: RedisChannel = channel or RedisPyChannel(redis)
        self.prefix = prefix
        self.ready_key = ready_key(prefix)
        self.chats_key = chat_index_key(prefix)
        self.dedupe_ttl_seconds = dedupe_ttl_seconds

    def _keys(self, chat: str) -> ChatKeys:
        return ChatKeys(self.prefix, chat)

    async def put(self, message: IncomingMessage) -> bool:
        """Make ``message`` durable; False when this update id was already taken in (a redelivery).

        The chat is marked ready before the push (so a crash right after the push cannot leave
        an entry in an unmarked chat) and again after it (so a worker that unmarked the chat in
        between sees it marked anew). The same round trip records the chat in the index of chats.
        """
        keys = self._keys(message.chat)
        intake_keys = [keys.seen(f"{message.platform}:{message.update_id}"), keys.inbox]
        intake_args: list[Arg] = [self.dedupe_ttl_seconds, message.model_dump_json()]
        now = time.time()
        mark = ("ZADD", self.ready_key, "NX", now, message.chat)
        evalsha = ("EVALSHA", scripts.INTAKE.sha, len(intake_keys), *intake_keys, *intake_args)
        indexed = ("ZADD", self.chats_key, now, message.chat)
        with script_errors():  # the intake's checks refuse a key of the wrong type (WrongKeyType)
            try:  # one round trip when pipelined
                _, queued, _, _ = await self.channel.call_in_order(mark, evalsha, mark, indexed)
            except ResponseError as error:
                if not is_noscript(error):
                    raise
                queued = await scripts.INTAKE.run(self.channel, intake_keys, intake_args)  # the server lost its scripts
                await self.channel.call_in_order(mark, indexed)
        return bool(queued)

    async def mark(self, chat: str) -> None:
        """Mark the chat ready (keeping the score it has: an earlier wait, or a holder's lease)."""
        await self.channel.call("ZADD", self.ready_key, "NX", time.time(), chat)

    async def lease(self, chat: str, seconds: float) -> None:
        """Hide a chat its worker holds from every dispatcher until ``seconds`` from now.

        Marked chats are ordered by score and only those due are handed out, so chats held by
        other processes do not crowd the ones that wait; if the holder dies, the chat becomes
        due again when its lease (the lock's time to live) runs out.
        """
        await self.channel.call("ZADD", self.ready_key, time.time() + seconds, chat)

    async def extend_lease(self, chat: str, seconds: float) -> None:
        """Push a held chat's lease to ``seconds`` from now, only while the chat is marked: a worker
        that unmarked its chat (to release it) never sees it marked again by a late extension."""
        await self.channel.call("ZADD", self.ready_key, "XX", time.time() + seconds, chat)

    async def marked(self) -> int:
        """How many chats are marked, due or leased: zero means every inbox is empty."""
        return int(await self.redis.zcard(self.ready_key))

    async def ready_chats(self, limit: int) -> list[str]:
        """Chats with pending entries that no worker holds, the longest-waiting first."""
        due = await self.channel.call("ZRANGEBYSCORE", self.ready_key, "-inf", time.time(), "LIMIT", 0, limit)
        return [str(chat) for chat in due]

    async def head(self, chat: str) -> str | None:
        """The oldest pending entry of the chat (raw JSON), or None when the inbox is empty."""
        return cast("str | None", await self.redis.lindex(self._keys(chat).inbox, 0))  # decode_responses=True

    async def waiting(self, chat: str, limit: int) -> list[str]:
        """The chat's oldest ``limit`` pending entries (raw JSON), in order, the head first."""
        return [str(raw) for raw in await self.redis.lrange(self._keys(chat).inbox, 0, limit - 1)]

    async def request_stop(self, chat: str, at: float) -> None:
        """A ``/stop`` arrived at ``at``: the chat's running turn, in whichever process, ends at its next check."""
        await self.redis.set(self._keys(chat).stop, repr(at), ex=STOP_TTL_SECONDS)

    async def stop_requested_at(self, chat: str) -> float | None:
        """When the pending ``/stop`` of the chat arrived, or None."""
        value = await self.redis.get(self._keys(chat).stop)
        try:
            return float(value) if value is not None else None
        except ValueError:
            return None

    async def clear_stop(self, chat: str) -> bool:
        """Forget the chat's pending ``/stop``; whether there was one."""
        return bool(await self.redis.delete(self._keys(chat).stop))

    async def drop_bad(self, chat: str, raw: str) -> None:
        """Move an entry that cannot be parsed out of the inbox into the chat's quarantine list."""
        keys = self._keys(chat)
        await self.redis.rpush(keys.quarantine, raw)
        await self.redis.lrem(keys.inbox, 1, raw)

    async def unmark(self, chat: str) -> None:
        """Take the chat off the ready set (its worker then releases the lock only if the inbox is empty)."""
        await self.channel.call("ZREM", self.ready_key, chat)

    async def pending(self, chat: str) -> int:
        return int(await self.redis.llen(self._keys(chat).inbox))
