"""Shared fixtures: a real Redis-protocol server, a client on it, and a SessionStore under a throwaway prefix.

``redis_url`` is the machine's server at 127.0.0.1:6379 when it answers, otherwise one
embedded server started for the whole test session. ``FOLDGATE_TEST_REDIS_URL`` overrides
the choice: a URL to use, or ``embedded`` to run the suite on the embedded server.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

import pytest
import pytest_asyncio
import redis as sync_redis
from redis.asyncio import Redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from gateway.store.channel import PipelinedConnection
from gateway.server.lifecycle import EmbeddedRedis
from gateway.store import SessionStore

if TYPE_CHECKING:
    from tests.fakes.bot_api import FakeBotAPI
    from tests.fakes.tls import TestPKI
    from tests.test_discord import FakeDiscordAPI

LOCAL_REDIS_URL = "redis://127.0.0.1:6379/0"


def _answers_ping(url: str) -> bool:
    client = sync_redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5, retry=Retry(NoBackoff(), 0))
    try:
        return bool(client.ping())
    except (sync_redis.exceptions.ConnectionError, sync_redis.exceptions.TimeoutError, OSError):
        return False
    finally:
        client.close()


@pytest.fixture(scope="session", autouse=True)
def own_home_directory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Point ``~`` at an empty directory: a developer's own ``~/.foldgate/config.yaml`` must not
    change what the tests read, and no test may write into the real one."""
    previous = os.environ.get("HOME")
    os.environ["HOME"] = str(tmp_path_factory.mktemp("user-home"))
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("HOME", None)
        else:
            os.environ["HOME"] = previous


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of the Redis-protocol server the tests use (shared by the whole session)."""
    chosen = os.environ.get("FOLDGATE_TEST_REDIS_URL", "").strip()
    if chosen and chosen != "embedded":
        yield chosen
        return
    if not chosen and _answers_ping(LOCAL_REDIS_URL):
        yield LOCAL_REDIS_URL
        return
    server = EmbeddedRedis(tmp_path_factory.mktemp("redis-home"))
    url = asyncio.run(server.start())
    try:
        yield url
    finally:
        asyncio.run(server.stop())


@pytest_asyncio.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    """An asyncio client (``decode_responses=True``) on the test server."""
    client = Redis.from_url(redis_url, decode_responses=True)
    try:
        yield client
    finally:
        await client.aclose()


@pytest_asyncio.fixture
async def key_prefix(redis: Redis) -> AsyncIterator[str]:
    """A unique key prefix; every key under it is deleted after the test."""
    prefix = f"fgtest-{uuid.uuid4().hex}"
    try:
        yield prefix
    finally:
        stale = [key for pattern in (f"{prefix}:*", f"{prefix}.*")  # and its bots' keys (<prefix>.<bot>:…)
                 async for key in redis.scan_iter(match=pattern, count=1000)]
        for start in range(0, len(stale), 500):
            await redis.delete(*stale[start : start + 500])


@pytest_asyncio.fixture
async def channel(redis: Redis) -> AsyncIterator[PipelinedConnection]:
    """The pipelined connection the gateway sends its message-path commands over, to the test server."""
    connection = PipelinedConnection.like(redis)
    try:
        yield connection
    finally:
        await connection.aclose()


@pytest_asyncio.fixture
async def store(redis: Redis, key_prefix: str, channel: PipelinedConnection) -> SessionStore:
    """A SessionStore under the test's own prefix, on the pipelined channel (as the gateway builds it)."""
    return SessionStore(redis, prefix=key_prefix, channel=channel)


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> "TestPKI":
    """A throwaway CA and a server certificate for localhost, shared by every TLS test of the run."""
    from tests.fakes.tls import make_pki

    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest_asyncio.fixture
async def bot_api() -> AsyncIterator["FakeBotAPI"]:
    """A fake Telegram Bot API on loopback (see tests/fakes/bot_api.py)."""
    from tests.fakes.bot_api import FakeBotAPI

    async with FakeBotAPI() as api:
        yield api


@pytest_asyncio.fixture
async def discord_api() -> AsyncIterator["FakeDiscordAPI"]:
    """A fake Discord HTTP API on loopback (see tests/test_discord.py, which also patches discord.py onto it)."""
    from tests.test_discord import FakeDiscordAPI

    async with FakeDiscordAPI() as api:
        yield api
