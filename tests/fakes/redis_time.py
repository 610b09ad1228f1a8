"""Time as Redis keeps it: its server's clock (``TIME``), which every bucket and expiry is decided on; and what
the server itself says has happened — a key expired, a connection blocked in a command — for the tests to wait
on, leaving the deciding to Redis rather than guessing how long it takes."""

from __future__ import annotations

from redis.asyncio import Redis

from tests.fakes.waiting import PATIENCE, wait_for

#: Rounding of the scripts' microsecond arithmetic, in seconds.
TICK = 0.001


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

    async def gone() -> bool:
        return not await redis.exists(key)

    await wait_for(gone, timeout, what=f"Redis to let {key} go", interval=0.01)


async def until_blocked(redis: Redis, client_id: int, timeout: float = PATIENCE) -> None:
    """Return once the server shows connection ``client_id`` blocked in a command (flag ``b``): the command was
    written and the server holds its reply back — the moment a test that cuts a connection under a command, or
    talks past one, acts in."""

    async def blocked() -> bool:
        clients = {int(client["id"]): client for client in await redis.client_list()}
        return "b" in clients.get(client_id, {}).get("flags", "")

    await wait_for(blocked, timeout, what=f"connection {client_id} to block in its command", interval=0.01)
