"""Time as Redis keeps it: its server's clock (``TIME``), which every bucket and expiry is decided on, and a
wait for a key to expire that leaves the deciding to Redis."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

#: Rounding of the scripts' microsecond arithmetic, in seconds.
TICK = 0.001
#: Seconds before a wait for Redis to expire a key is given up as a hang (the keys the tests expire live 50 ms).
PATIENCE = 30.0


async def redis_seconds(redis: Redis) -> float:
    """The Redis server's clock (``TIME``), the one every bucket decision is made on."""
    seconds, micros = await redis.time()
    return seconds + micros / 1_000_000


async def seconds_since(redis: Redis, moment: float) -> float:
    """Seconds on the server's clock from ``moment`` to now: at least the span of anything awaited in between."""
    return await redis_seconds(redis) - moment


async def until_gone(redis: Redis, key: str, timeout: float = PATIENCE) -> None:
    """Return once Redis no longer has ``key``: an expiry is Redis' to decide, on its own clock, so the test
    watches for it rather than guessing how long it takes. ``timeout`` only ends a test that hangs."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while await redis.exists(key):
        assert loop.time() < deadline, f"{key} still there after {timeout:g} s"
        await asyncio.sleep(0.01)
