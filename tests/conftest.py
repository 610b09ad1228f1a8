"""Shared fixtures: a real Redis-protocol server, a client on it, and a SessionStore under a throwaway prefix.

``redis_url`` is the machine's server at 127.0.0.1:6379 when it answers, otherwise one
embedded server started for the whole test session. ``FOLDGATE_TEST_REDIS_URL`` overrides
the choice: a URL to use, or ``embedded`` to run the suite on the embedded server.

Hypothesis draws the same examples on every run unless a randomized search is asked for (see
the comment above ``HYPOTHESIS_CHOICE``), and keeps its files outside the checkout.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import uuid
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import pytest_asyncio
import redis as sync_redis
from hypothesis import HealthCheck, settings
from hypothesis.configuration import set_hypothesis_home_dir
from hypothesis.database import DirectoryBasedExampleDatabase
from redis.asyncio import Redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from gateway.server.lifecycle import EmbeddedRedis
from gateway.store import SessionStore
from gateway.store.channel import PipelinedConnection

if TYPE_CHECKING:
    from playwright import async_api as playwright

    from gateway.platforms.discord import DiscordAdapter
    from gateway.worker.runner import GatewayRunner
    from tests.fakes.bot_api import FakeBotAPI
    from tests.fakes.discord_api import FakeDiscordAPI
    from tests.fakes.llm_server import FakeLLMServer
    from tests.fakes.tls import TestPKI

LOCAL_REDIS_URL = "redis://127.0.0.1:6379/0"

# ------------------------------------------------------------------------------ hypothesis
#
# A run of the suite must give the same answer as the last one, so hypothesis is derandomized by
# default (the "ci" profile; CI sets CI=true and gets the same): each property test draws the same
# examples every time, and a failure is one that reproduces. Searching for new failures is a
# separate, deliberate run with ten times the examples, drawn at random:
#
#     FOLDGATE_HYPOTHESIS=search ./dev test        (or: ./dev test --hypothesis-profile=search)
#
# Hypothesis keeps its files (caches; in a search, the failing examples it tries first next time)
# under $HYPOTHESIS_STORAGE_DIRECTORY, by default in the system's temporary directory, never in
# the checkout.

#: The variable that picks the profile: unset (or "ci") for the same examples every run, "search" to look for new ones.
HYPOTHESIS_CHOICE = "FOLDGATE_HYPOTHESIS"
#: How many times its usual examples a test draws in a search.
SEARCH_FACTOR = 10
#: Health checks that time the test rather than judge it: on a loaded machine they fail tests that are fine.
TIMING_HEALTH_CHECKS = [HealthCheck.too_slow]


def _hypothesis_home() -> Path:
    """Where hypothesis keeps its files: the caller's choice, else a directory of this user's outside the
    checkout. Exported, so xdist workers and the children tests start use it too."""
    chosen = os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY", "").strip()
    user = os.getuid() if hasattr(os, "getuid") else "user"
    home = Path(chosen) if chosen else Path(tempfile.gettempdir()) / f"foldgate-hypothesis-{user}"
    os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = str(home)
    set_hypothesis_home_dir(home)  # in case hypothesis already looked before this module ran
    return home


def _register_hypothesis_profiles(home: Path) -> None:
    """``ci``: derandomized, no example database, no deadline; a test's own ``@settings`` (its
    max_examples, its health checks) still apply on top. ``search``: random, ten times the examples."""
    base = settings.get_profile("default")
    settings.register_profile(
        "ci",
        base,
        derandomize=True,
        database=None,
        print_blob=True,
        deadline=None,
        suppress_health_check=TIMING_HEALTH_CHECKS,
    )
    settings.register_profile(
        "search",
        base,
        derandomize=False,
        print_blob=True,
        deadline=None,
        max_examples=base.max_examples * SEARCH_FACTOR,
        suppress_health_check=TIMING_HEALTH_CHECKS,
        database=DirectoryBasedExampleDatabase(home / "examples"),
    )


_register_hypothesis_profiles(_hypothesis_home())


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Load the profile before the test modules build their ``@settings`` (each takes what it does not set
    from the profile loaded then); ``--hypothesis-profile``, applied after this, still wins."""
    asked = os.environ.get(HYPOTHESIS_CHOICE, "").strip()
    if asked not in ("", "ci", "search"):
        raise pytest.UsageError(
            f"{HYPOTHESIS_CHOICE}={asked!r}: set it to 'search' for a randomized search, "
            "or leave it unset for the same examples on every run"
        )
    settings.load_profile(asked or "ci")


def pytest_sessionstart(session: pytest.Session) -> None:
    """A derandomized run also draws no constants from the modules imported so far.

    Hypothesis now and then draws a literal it found in the code under test, from the modules
    loaded in this process; under xdist which test files a worker ran before decides that set,
    so the same test could get other examples on another run. Without them the examples
    depend on the test alone.
    """
    if not settings.default.derandomize:
        return
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants
    except ImportError:  # a hypothesis without local constants: nothing varies
        return
    if hasattr(providers, "_get_local_constants"):
        none_found = Constants()
        providers._get_local_constants = lambda: none_found


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a search, a test that sets its own max_examples draws ``SEARCH_FACTOR`` times as many too.

    A test's ``@settings`` win over the profile, so the profile alone would leave most property
    tests at their usual count; hypothesis offers no public way to scale them.
    """
    if not settings.get_current_profile_name().startswith("search"):  # also "search-with-verbose-verbosity"
        return
    for item in items:
        test = getattr(item, "function", None)
        chosen = getattr(test, "_hypothesis_internal_use_settings", None)
        if chosen is None or not getattr(test, "_hypothesis_internal_settings_applied", False):
            continue  # not a property test, or one without @settings: the profile's count applies
        if not isinstance(chosen, settings):
            warnings.warn(f"{item.nodeid}: could not raise its max_examples for the search", stacklevel=1)
            continue
        if chosen.max_examples == settings.default.max_examples:
            continue  # its @settings left max_examples to the profile
        test._hypothesis_internal_use_settings = settings(chosen, max_examples=chosen.max_examples * SEARCH_FACTOR)


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
        stale = [
            key
            for pattern in (f"{prefix}:*", f"{prefix}.*")  # and its bots' keys (<prefix>.<bot>:…)
            async for key in redis.scan_iter(match=pattern, count=1000)
        ]
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
def pki(tmp_path_factory: pytest.TempPathFactory) -> TestPKI:
    """A throwaway CA and a server certificate for localhost, shared by every TLS test of the run."""
    from tests.fakes.tls import make_pki

    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest_asyncio.fixture
async def bot_api() -> AsyncIterator[FakeBotAPI]:
    """A fake Telegram Bot API on loopback (see tests/fakes/bot_api.py)."""
    from tests.fakes.bot_api import FakeBotAPI

    async with FakeBotAPI() as api:
        yield api


@pytest.fixture
def api(bot_api: FakeBotAPI) -> FakeBotAPI:
    """The fake Telegram Bot API under the name the Telegram adapter's tests give it (the server of ``bot_api``)."""
    return bot_api


@pytest_asyncio.fixture
async def discord_api(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeDiscordAPI]:
    """A fake Discord HTTP API on loopback (see tests/fakes/discord_api.py), with discord.py's REST calls
    pointed at it for the test."""
    import discord

    from tests.fakes.discord_api import FakeDiscordAPI

    async with FakeDiscordAPI() as api:
        monkeypatch.setattr(discord.http.Route, "BASE", api.base)
        yield api


@pytest_asyncio.fixture
async def adapter(discord_api: FakeDiscordAPI) -> AsyncIterator[DiscordAdapter]:
    """The real Discord adapter, logged in to ``discord_api`` and knowing its server; no gateway connection."""
    from tests.fakes.discord_api import open_adapter

    made = await open_adapter(discord_api)
    yield made
    await made.stop()


@pytest_asyncio.fixture
async def gateway(
    adapter: DiscordAdapter, llm: FakeLLMServer, redis: Redis, redis_url: str, key_prefix: str
) -> AsyncIterator[GatewayRunner]:
    """The gateway ``foldgate run`` opens, with the shipped settings, whose platform is the Discord ``adapter``;
    its model is the requesting module's own ``llm`` fixture (the fake provider that module scripts).

    The adapter is bound to the runner's intake rather than started: the tests hand it gateway payloads
    themselves (``tests.fakes.discord_api.receive``) instead of connecting it to a gateway websocket.
    """
    from tests.fakes.gateway import make_settings
    from tests.fakes.platform_gateway import platform_gateway

    settings = make_settings(redis_url, key_prefix, llm.openai_base_url, context_length=64_000)
    async with platform_gateway(settings, redis, {"dc": adapter}) as running:
        adapter.bind(running.runner.intake)
        yield running.runner


@pytest_asyncio.fixture
async def browser() -> AsyncIterator[playwright.Browser]:
    """Headless Chromium, launched for the test (see tests/fakes/browser.py; its modules skip without one)."""
    from playwright import async_api as playwright

    from tests.fakes.browser import CHROMIUM, CHROMIUM_ARGS

    async with playwright.async_playwright() as driver:
        launched = await driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            await launched.close()
