"""The Redis a benchmark measures on: the one given, the machine's when it answers, else an embedded one for the run."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from redis.asyncio import Redis

from gateway.server.lifecycle import EmbeddedRedis

LOCAL_URL = "redis://127.0.0.1:6379/0"


@contextlib.asynccontextmanager
async def bench_redis(url: str | None = None) -> AsyncIterator[str]:
    """``url``, else the Redis at 127.0.0.1:6379 when it answers, else an embedded server stopped afterwards."""
    if url is not None:
        yield url
        return
    probe = Redis.from_url(LOCAL_URL)
    try:
        await probe.ping()
        answered = True
    except Exception:
        answered = False
    finally:
        await probe.aclose()
    if answered:
        yield LOCAL_URL
        return
    with tempfile.TemporaryDirectory(prefix="fg-bench-") as home:
        embedded = EmbeddedRedis(Path(home))
        try:
            yield await embedded.start()
        finally:
            await embedded.stop()
