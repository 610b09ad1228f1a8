"""Asking a Redis-protocol server whether it is ready and who it is, with short timeouts and no retries.

Both the start of a new embedded server and the check of one found on a home ask these, so
a server that does not answer is told apart quickly from one that is still loading.
"""

from __future__ import annotations

import os
from pathlib import Path

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError


def _client(url: str, timeout: float) -> Redis:
    return Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout, retry=Retry(NoBackoff(), 0))


async def answers_ping(url: str, timeout: float = 1.0) -> bool:
    """True when a Redis-protocol server at ``url`` answers PING (loading counts as not yet)."""
    client = _client(url, timeout)
    try:
        return bool(await client.ping())
    except (RedisConnectionError, RedisTimeoutError, OSError):
        return False
    finally:
        await client.aclose()


async def identify(url: str, timeout: float = 5.0) -> tuple[int, Path] | None:
    """Pid and data directory of the server at ``url`` (INFO and CONFIG answer even while it loads)."""
    client = _client(url, timeout)
    try:
        info = await client.info("server")
        directory = next(iter((await client.config_get("dir")).values()), "")
        return int(info["process_id"]), Path(os.fsdecode(directory))
    except (RedisError, OSError, KeyError, ValueError):
        return None
    finally:
        await client.aclose()
