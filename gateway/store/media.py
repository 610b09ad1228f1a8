"""The bytes of what people send (photos, documents, voice), kept in Redis by content hash.

A transcript never holds bytes: a message names its items by sha256 (``_items`` refs), and the
bytes live here, once per chat however often the item is sent or referred to, beside the chat's
other keys (:meth:`gateway.store.keys.ChatKeys.media`, one hash tag, so one slot on a cluster)::

    {prefix}:{<chat>}:media:<sha256>   hash  data (the bytes), mime, name, file_id, bytes, stored_at[, dropped_at]
    {prefix}:{<chat>}:media:held       zset  sha -> when its bytes were stored (ms), oldest first
    {prefix}:{<chat>}:media:bytes      the bytes of the held items, together

Bounded per chat: storing an item that would take the chat past ``max_total_bytes`` first drops
the bytes of the chat's OLDEST items (by when they were stored; storing an item again counts as
storing it now) until the new one fits, in the same atomic step (``media_put.lua``). A dropped
item keeps its hash without ``data`` — mime, name, size and the platform's ``file_id`` — so
:meth:`MediaStore.about` still describes it and the platform can be asked for it again;
:meth:`MediaStore.get` answers None for it. Those small hashes stay as long as the transcript that
names them (like message bodies, they are never trimmed).

Routes: the write goes through the channel (a script, like every write of the store); the read of
the bytes goes through redis-py, because the channel decodes every reply as UTF-8 and image bytes
are not text (redis-py's ``NEVER_DECODE`` hands them over raw).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.client import NEVER_DECODE

from gateway.media.errors import MediaTooLarge
from gateway.store import scripts
from gateway.store.channel import RedisChannel
from gateway.store.keys import ChatKeys, check_key_part
from gateway.store.routes import Routes

_FIELDS = ("mime", "name", "file_id", "bytes", "stored_at", "dropped_at")


@dataclass(frozen=True)
class StoredItem:
    """What the store knows of an item besides its bytes; ``held`` is False once its bytes were dropped."""

    sha: str
    mime: str
    name: str
    file_id: str
    size: int
    held: bool


class MediaStore(Routes):
    """Items of every chat by content hash; ``max_bytes`` per item, ``max_total_bytes`` per chat."""

    def __init__(
        self,
        redis: Redis,
        prefix: str = "fg",
        *,
        max_bytes: int,
        max_total_bytes: int,
        channel: RedisChannel | None = None,
    ) -> None:
        super().__init__(redis, channel)
        if not 0 < max_bytes <= max_total_bytes:
            raise ValueError(f"need 0 < max_bytes ({max_bytes}) <= max_total_bytes ({max_total_bytes})")
        self.prefix = check_key_part("prefix", prefix)
        self.max_bytes = max_bytes
        self.max_total_bytes = max_total_bytes

    def keys(self, chat: str) -> ChatKeys:
        return ChatKeys(self.prefix, check_key_part("chat", chat))

    async def put(self, chat: str, data: bytes, *, mime: str, name: str, file_id: str) -> str:
        """Keep ``data`` for ``chat`` and return its sha256 hex; storing the same bytes again stores nothing
        new (it refreshes the item's mime, name and file id, and counts it as stored now).

        May drop the bytes of the chat's oldest items to stay within ``max_total_bytes`` (see the module).
        Raises :class:`MediaTooLarge` for bytes over ``max_bytes``, before any round trip.
        """
        if len(data) > self.max_bytes:
            raise MediaTooLarge(name, len(data), self.max_bytes)
        sha = hashlib.sha256(data).hexdigest()
        keys = self.keys(chat)
        await self.script(
            scripts.MEDIA_PUT,
            [keys.media(sha), keys.media_held, keys.media_bytes],
            [sha, data, mime, name, file_id, int(time.time() * 1000), self.max_total_bytes, keys.media("")],
        )
        return sha

    async def get(self, chat: str, sha: str) -> tuple[bytes, str] | None:
        """The item's bytes and mime, or None when the chat has no such item or its bytes were dropped."""
        data, mime = await self.redis.execute_command(
            "HMGET", self.keys(chat).media(check_key_part("sha", sha)), "data", "mime", **{NEVER_DECODE: True}
        )
        if data is None:
            return None
        return bytes(data), (mime or b"").decode()

    async def about(self, chat: str, sha: str) -> StoredItem | None:
        """What is known of the item without reading its bytes (None: never stored for this chat)."""
        key = self.keys(chat).media(check_key_part("sha", sha))
        values, length = await self.channel.call_in_order(("HMGET", key, *_FIELDS), ("HSTRLEN", key, "data"))
        found = dict(zip(_FIELDS, values))
        if found["stored_at"] is None:
            return None
        return StoredItem(
            sha=sha,
            mime=found["mime"] or "",
            name=found["name"] or "",
            file_id=found["file_id"] or "",
            size=int(found["bytes"] or 0),
            held=bool(length),
        )

    async def held_bytes(self, chat: str) -> int:
        """The bytes the chat's held items take, together (at most ``max_total_bytes``)."""
        return int(await self.channel.call("GET", self.keys(chat).media_bytes) or 0)
