"""The store's two routes to Redis, and which operation takes which.

``channel`` (a :class:`gateway.store.channel.RedisChannel`) carries every script, and so the whole
per-message path: claim / acquire_lock, extend_lock, release_lock, release_if_idle, snapshot (and
its read of stored ids the held transcript lacks), append, archive_original, update_meta,
finish_entry, commit_compaction, plus the other scripted steps (session creation, /resume, the
replacement of a missing session, session_outline, active, archive, quarantines, stored repairs).
The gateway passes :func:`gateway.store.channel.channel_for`: one auto-pipelined connection on a single
server, where a command costs microseconds and a busy loop iteration's commands leave in one
write; on Redis Cluster (or with options only redis-py has) the same commands go through
redis-py. A store built without a channel sends them through ``redis`` itself.

``redis`` (the redis-py client) carries the single commands that are not sent for every message:
meta (HGETALL: after a compaction, in commands and recovery), stored_session (GET: a chat's first
message, recovery), get_messages (HMGET: history and search), quarantined (LRANGE), seen
(SET NX EX) and indexed_sessions (ZRANGE; building a missing index also GET, ZADD and SCAN). There
redis-py's per-command CPU does not add up, its connection retries apply, and SCAN can be sent to
the cluster node owning the chat's slot, which only redis-py's cluster client can target.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis

from gateway.store.channel import Arg, RedisChannel, RedisPyChannel, Script
from gateway.store.errors import script_errors


class Routes:
    """A redis-py client (``decode_responses=True``) and the channel the scripts go through."""

    def __init__(self, redis: Redis, channel: RedisChannel | None = None) -> None:
        self.redis = redis
        self.channel: RedisChannel = channel or RedisPyChannel(redis)

    async def script(self, script: Script, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        """Run ``script`` on the channel; its coded error replies raise the store's exceptions."""
        return await run(script, self.channel, keys, args)


async def run(script: Script, channel: RedisChannel, keys: Sequence[str], args: Sequence[Arg]) -> Any:
    """Run ``script`` on ``channel``; its coded error replies raise the store's exceptions
    (:func:`gateway.store.errors.script_errors`), so no caller reads a script's error text."""
    with script_errors():
        return await script.run(channel, keys, args)
