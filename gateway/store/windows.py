"""Model windows that providers' context-length refusals taught, kept for every process of a deployment.

One hash per key prefix::

    {prefix}:windows:learned    hash    "<endpoint>|<model>" -> tokens

A window is only ever lowered (:data:`~gateway.store.scripts.WINDOW_LEARN`), so two processes
learning at once keep the smaller figure, and a restart keeps what was learned. Reads are served
from a copy in the process, refreshed from Redis at most every :data:`REFRESH_SECONDS`, so planning
a turn never waits on Redis; what this process learns is in its copy at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from redis.asyncio import Redis
from redis.exceptions import RedisError

from agent.windows import MemoryWindowBook
from gateway.store import scripts
from gateway.store.channel import RedisChannel
from gateway.store.keys import check_key_part, text_of

#: Seconds a process trusts its copy of the learned windows before reading them again.
REFRESH_SECONDS = 5.0


def learned_windows_key(prefix: str) -> str:
    return f"{check_key_part('prefix', prefix)}:windows:learned"


def _field(endpoint: str, model: str) -> str:
    return f"{endpoint}|{model}"


class LearnedWindows:
    """A :class:`agent.windows.WindowBook` in Redis, shared by every process on the same key prefix."""

    def __init__(
        self,
        channel: RedisChannel,
        prefix: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        refresh_seconds: float = REFRESH_SECONDS,
    ) -> None:
        self.channel = channel
        self.key = learned_windows_key(prefix)
        self.clock = clock
        self.refresh_seconds = refresh_seconds
        self._copy: dict[str, int] = {}
        self._read_at: float | None = None

    def learned(self, endpoint: str, model: str) -> int | None:
        return self._copy.get(_field(endpoint, model))

    async def learn(self, endpoint: str, model: str, tokens: int) -> int:
        field = _field(endpoint, model)
        kept = int(await scripts.WINDOW_LEARN.run(self.channel, [self.key], [field, int(tokens)]))
        self._copy[field] = min(kept, self._copy.get(field, kept))
        return kept

    async def refresh(self, *, force: bool = False) -> None:
        """Read what every process learned, unless the copy is younger than :attr:`refresh_seconds`."""
        now = self.clock()
        if not force and self._read_at is not None and now - self._read_at < self.refresh_seconds:
            return
        stored = await self.channel.call("HGETALL", self.key)
        self._read_at = now
        self._copy = {text_of(field): int(text_of(value)) for field, value in _pairs(stored)}

    def all(self) -> dict[str, int]:
        """Every learned window by ``endpoint|model`` (for ``foldgate doctor``)."""
        return dict(self._copy)


def _pairs(reply: object) -> list[tuple[object, object]]:
    """HGETALL's answer as (field, value) pairs, whether it came as a flat list or a mapping."""
    if isinstance(reply, dict):
        return list(reply.items())
    items = list(reply) if isinstance(reply, (list, tuple)) else []
    return list(zip(items[0::2], items[1::2]))


async def read_learned(url: str, prefix: str, *, timeout: float) -> MemoryWindowBook | None:
    """What refusals taught the gateways on the Redis at ``url``, for a command that runs beside them
    (``foldgate doctor``); None when that Redis does not answer within ``timeout`` seconds."""
    client = Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout)
    try:
        stored = await client.hgetall(learned_windows_key(prefix))
    except (OSError, RedisError):
        return None
    finally:
        await client.aclose()
    book = MemoryWindowBook()
    for field, value in stored.items():
        endpoint, _, model = text_of(field).partition("|")
        book.windows[(endpoint, model)] = int(text_of(value))
    return book
