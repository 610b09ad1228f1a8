"""Messages' vectors for a meaning-based search, kept beside the chat's messages (``memory.embeddings``).

Every key of a chat carries its hash tag, so each step below is one script on one cluster slot::

    {prefix}:{<chat>}:emb:meta     hash    model (the model and vector length the vectors were made with),
                                           generation (+1 each time a model change dropped them),
                                           mark:<sid> (the highest message id of the session looked at)
    {prefix}:{<chat>}:emb:vec      hash    "<sid>:<message id>" -> the vector, little-endian float32 bytes
    {prefix}:{<chat>}:emb:order    list    "<sid>:<message id>" in the order vectors were kept, so a reader
                                           that holds the first n reads only what came after
    {prefix}:{<chat>}:emb:pending  set     "<sid>:<message id>" waiting to be embedded
    {prefix}:{<chat>}:emb:lock     string  the embedder working on the chat now (token, PX)

and one key of no one chat::

    {prefix}:embeddings:due        zset    chat -> when its messages may be looked at (ms): marked after each
                                           turn, pushed later while the endpoint is away
    {prefix}:embeddings:due:backfilled:<model>   set once every chat of the index was made due for that model

Message ids only grow within a session, so ``mark:<sid>`` is all it takes to find a session's new
messages without reading its old ones. What is taken from ``pending`` leaves it only in the step that
keeps its vector (or finds it has none), under the chat's embedding lock: a process that dies
mid-request leaves its batch pending for the next, and no two processes work on one chat at once.
A vector of 1,536 float32 is 6 KB; 100,000 messages of a chat take about 600 MB at that size, 150 MB
at 384.

Vectors are read through redis-py without decoding (the channel decodes every reply as text).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.client import NEVER_DECODE

from agent.messages import Message
from gateway.store.bodies import decode_stored
from gateway.store.channel import Arg, RedisChannel, Script
from gateway.store.keys import ChatKeys, chat_index_key, check_key_part, text_of
from gateway.store.routes import run

# Adopt a model: vectors made with another are dropped (and every session looked at again); returns 1 then.
# KEYS: lock, meta, vec, order, pending. ARGV: token, model.
ADOPT = Script.of(
    """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if redis.call('HGET', KEYS[2], 'model') == ARGV[2] then return 0 end
redis.call('DEL', KEYS[3], KEYS[4], KEYS[5])
for _, field in ipairs(redis.call('HKEYS', KEYS[2])) do
  if string.sub(field, 1, 5) == 'mark:' then redis.call('HDEL', KEYS[2], field) end
end
redis.call('HSET', KEYS[2], 'model', ARGV[2])
redis.call('HINCRBY', KEYS[2], 'generation', 1)
return 1
"""
)
# Queue a session's new messages and move its mark on. KEYS: lock, meta, pending.
# ARGV: token, model, sid, mark, ids...; returns how many wait, -1 when the lock is not ours, -2 for another model.
QUEUE = Script.of(
    """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if redis.call('HGET', KEYS[2], 'model') ~= ARGV[2] then return -2 end
local field = 'mark:' .. ARGV[3]
if tonumber(ARGV[4]) > tonumber(redis.call('HGET', KEYS[2], field) or '0') then
  redis.call('HSET', KEYS[2], field, ARGV[4])
end
for i = 5, #ARGV do redis.call('SADD', KEYS[3], ARGV[i]) end
return redis.call('SCARD', KEYS[3])
"""
)
# Keep vectors and let their ids (and those found to need none) leave pending. KEYS: lock, meta, vec, order, pending.
# ARGV: token, model, n, n pairs of id and vector, then the ids done; returns how many wait (-1, -2 as QUEUE).
KEEP = Script.of(
    """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if redis.call('HGET', KEYS[2], 'model') ~= ARGV[2] then return -2 end
local n = tonumber(ARGV[3])
for i = 0, n - 1 do
  local id = ARGV[4 + 2 * i]
  if redis.call('HSET', KEYS[3], id, ARGV[5 + 2 * i]) == 1 then redis.call('RPUSH', KEYS[4], id) end
end
for j = 4 + 2 * n, #ARGV do redis.call('SREM', KEYS[5], ARGV[j]) end
return redis.call('SCARD', KEYS[5])
"""
)
# Let go of the chat's embedding lock if it is still ours. KEYS: lock. ARGV: token.
RELEASE = Script.of("if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0")
# The chats due by now, taken off the due set (another process does not take them too). KEYS: due. ARGV: now, count.
TAKE_DUE = Script.of(
    """
local chats = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
if #chats > 0 then redis.call('ZREM', KEYS[1], unpack(chats)) end
return chats
"""
)


class LockLost(Exception):
    """The chat's embedding lock expired (or a model change came) while the batch was out: nothing was kept."""


def key_of(session_id: str, message_id: str) -> str:
    """``<sid>:<message id>``: a message's field in the chat's vectors."""
    return f"{session_id}:{message_id}"


def split_key(key: str) -> tuple[str, str]:
    sid, _, message_id = key.partition(":")
    return sid, message_id


@dataclass(frozen=True)
class VectorsAt:
    """Where a chat's vectors stand: the model they were made with, its generation and how many there are."""

    model: str
    generation: int
    count: int


class EmbeddingStore:
    """Every chat's message vectors, pending ids and the due set (see the module docstring)."""

    def __init__(self, redis: Redis, channel: RedisChannel, prefix: str) -> None:
        self.redis = redis
        self.channel = channel
        self.prefix = check_key_part("prefix", prefix)
        self.due_key = f"{self.prefix}:embeddings:due"

    def keys(self, chat: str) -> dict[str, str]:
        base = ChatKeys(self.prefix, check_key_part("chat", chat)).base
        return {name: f"{base}:emb:{name}" for name in ("lock", "meta", "vec", "order", "pending")}

    def _k(self, chat: str, *names: str) -> list[str]:
        keys = self.keys(chat)
        return [keys[name] for name in names]

    # ----------------------------------------------------------------- the due set

    async def mark(self, chat: str, *, at: float | None = None) -> None:
        """The chat has new messages: due now (or at ``at``), unless it is due already (an endpoint's backoff
        is not cut short by a busy chat)."""
        await self.channel.call("ZADD", self.due_key, "NX", _ms(at), check_key_part("chat", chat))

    async def defer(self, chat: str, at: float) -> None:
        """The chat is looked at again no sooner than ``at`` (seconds since the epoch)."""
        await self.channel.call("ZADD", self.due_key, "GT", _ms(at), check_key_part("chat", chat))

    async def take_due(self, count: int, *, now: float | None = None) -> list[str]:
        """Up to ``count`` chats due by ``now``, taken off the due set."""
        chats = await run(TAKE_DUE, self.channel, [self.due_key], [_ms(now), count])
        return [text_of(chat) for chat in chats or []]

    async def due(self) -> dict[str, float]:
        """Every chat in the due set and when it is due (seconds), for the operator and tests."""
        found = _pairs(await self.channel.call("ZRANGE", self.due_key, 0, -1, "WITHSCORES"))
        return {chat: float(score) / 1000 for chat, score in found.items()}

    async def backfill(self, model: str, *, chunk: int = 1_000) -> int:
        """Once per model for the whole deployment: every chat that ever sent a message made due, so what was
        said before embeddings were on (or under another model) is embedded too; how many chats were marked."""
        if not await self.channel.call("SET", f"{self.due_key}:backfilled:{model}", "1", "NX"):
            return 0
        marked, start, now = 0, 0, _ms(None)
        while True:
            chats = await self.channel.call("ZRANGE", chat_index_key(self.prefix), start, start + chunk - 1)
            if not chats:
                return marked
            await self.channel.call_in_order(*(("ZADD", self.due_key, "NX", now, text_of(chat)) for chat in chats))
            marked, start = marked + len(chats), start + chunk

    # ----------------------------------------------------------------- the embedder's steps, under the lock

    async def lock(self, chat: str, token: str, ttl_seconds: float) -> bool:
        return bool(
            await self.channel.call("SET", self._k(chat, "lock")[0], token, "NX", "PX", int(ttl_seconds * 1000))
        )

    async def release(self, chat: str, token: str) -> None:
        await run(RELEASE, self.channel, self._k(chat, "lock"), [token])

    async def adopt(self, chat: str, token: str, model: str) -> bool:
        """Make ``model`` the chat's; True when vectors of another were dropped (or none were kept yet)."""
        result = int(
            await run(ADOPT, self.channel, self._k(chat, "lock", "meta", "vec", "order", "pending"), [token, model])
        )
        if result < 0:
            raise LockLost(chat)
        return result == 1

    async def marks(self, chat: str) -> dict[str, int]:
        """Per session, the highest message id looked at."""
        fields = _pairs(await self.channel.call("HGETALL", self._k(chat, "meta")[0]))
        return {name[5:]: int(value) for name, value in fields.items() if name.startswith("mark:")}

    async def queue(self, chat: str, token: str, model: str, sid: str, mark: int, ids: Sequence[str]) -> int:
        """Add ``ids`` of session ``sid`` to what waits and move its mark to ``mark``; how many wait."""
        args: list[Arg] = [token, model, check_key_part("session id", sid), mark, *(key_of(sid, i) for i in ids)]
        waiting = int(await run(QUEUE, self.channel, self._k(chat, "lock", "meta", "pending"), args))
        if waiting < 0:
            raise LockLost(chat)
        return waiting

    async def messages(self, chat: str, sid: str, ids: Sequence[str]) -> list[Message]:
        """The stored messages of ``ids`` in session ``sid`` that exist and can be read (an id the session
        never held, as a rotated session's inherited ones, is passed over without a word)."""
        if not ids:
            return []
        msg = ChatKeys(self.prefix, check_key_part("chat", chat)).msg(check_key_part("session id", sid))
        bodies = await self.redis.hmget(msg, list(ids))
        found = [
            decode_stored(message_id, text_of(body) if body is not None else None)[0]
            for message_id, body in zip(ids, bodies)
        ]
        return [message for message in found if message is not None]

    async def pending(self, chat: str, count: int) -> list[str]:
        """Up to ``count`` of the ids that wait (``<sid>:<id>``), lowest first within what was drawn."""
        drawn = await self.channel.call("SRANDMEMBER", self._k(chat, "pending")[0], count)
        return sorted((text_of(key) for key in drawn or []), key=_order)

    async def keep(self, chat: str, token: str, model: str, vectors: Mapping[str, bytes], done: Sequence[str]) -> int:
        """Keep ``vectors`` and let them and ``done`` (ids that need none) leave pending; how many still wait.
        Raises :class:`LockLost` when the lock is no longer ours (nothing is kept then)."""
        pairs = [part for key, vector in vectors.items() for part in (key, vector)]
        args = [token, model, len(vectors), *pairs, *vectors, *done]
        keys = self._k(chat, "lock", "meta", "vec", "order", "pending")
        waiting = int(await run(KEEP, self.channel, keys, args))
        if waiting < 0:
            raise LockLost(chat)
        return waiting

    # ----------------------------------------------------------------- reading

    async def where(self, chat: str) -> VectorsAt:
        meta, order = self._k(chat, "meta", "order")
        (model, generation), count = await self.channel.call_in_order(
            ("HMGET", meta, "model", "generation"), ("LLEN", order)
        )
        return VectorsAt(text_of(model) if model else "", int(generation or 0), int(count))

    async def ids_from(self, chat: str, start: int, stop: int = -1) -> list[str]:
        """The ids of the vectors kept from position ``start`` on (to ``stop``), in the order they were kept."""
        return [text_of(key) for key in await self.channel.call("LRANGE", self._k(chat, "order")[0], start, stop)]

    async def vectors(self, chat: str, ids: Sequence[str]) -> list[bytes | None]:
        """The vectors of ``ids`` as stored (None for an id that has none)."""
        if not ids:
            return []
        raw = await self.redis.execute_command("HMGET", self._k(chat, "vec")[0], *ids, **{NEVER_DECODE: True})
        return [bytes(value) if value is not None else None for value in raw]

    async def waiting(self, chat: str) -> int:
        return int(await self.channel.call("SCARD", self._k(chat, "pending")[0]))


def _pairs(reply: Any) -> dict[str, str]:
    """A reply of name/value pairs as the channel gives it (a flat list) or redis-py does (a dict, or pairs)."""
    if isinstance(reply, Mapping):
        return {text_of(name): text_of(value) for name, value in reply.items()}
    items = list(reply or [])
    if items and isinstance(items[0], (list, tuple)):
        return {text_of(name): text_of(value) for name, value in items}
    return {text_of(items[i]): text_of(items[i + 1]) for i in range(0, len(items), 2)}


def _ms(at: float | None) -> int:
    return int((time.time() if at is None else at) * 1000)


def _order(key: str) -> tuple[str, int, str]:
    sid, message_id = split_key(key)
    return (sid, int(message_id), "") if message_id.isdigit() else (sid, 1 << 62, message_id)
