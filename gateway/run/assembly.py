"""The gateway's wiring: from settings to a started runner over Redis, and back to nothing.

Every way of running foldgate (``foldgate run``, the demo, replays, benchmarks, tests) opens
its gateway here, so they all run the same parts joined the same way (the worker's own parts
are built by :func:`gateway.run.build.build_runner`), and a failed start leaves no server or
connection behind.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from agent.tokens import encoding
from gateway.agents import AgentBuilder
from gateway.api.adapter import PLATFORM as API_PLATFORM
from gateway.api.adapter import ApiAdapter
from gateway.config import Settings
from gateway.delivery.budget import SendBudget
from gateway.events import EventBus
from gateway.platforms.base import PlatformAdapter
from gateway.run.build import build_runner
from gateway.server.lifecycle import EmbeddedRedis, connect_or_embed
from gateway.startup_errors import REDIS_CONNECT_SECONDS, redis_failure
from gateway.store import SessionStore
from gateway.store.activity import ActivityLog
from gateway.store.channel import channel_for
from gateway.store.inbox import Inbox
from gateway.store.live import LiveHub
from gateway.store.windows import LearnedWindows
from gateway.web.chat_platform import PLATFORM as WEB_PLATFORM
from gateway.web.chat_platform import WebChatAdapter
from gateway.worker.runner import GatewayRunner


@dataclass
class RunningGateway:
    """A running gateway's parts, so the CLI, the demo and tests start and stop it the same way."""

    settings: Settings
    runner: GatewayRunner
    store: SessionStore
    events: EventBus
    agents: AgentBuilder
    redis: Any
    embedded: EmbeddedRedis | None
    #: Every chat's turns, compactions and errors, recorded for the operator view.
    activity: ActivityLog
    budget: SendBudget
    #: Web chat replies on their way to the browsers of any process.
    live: LiveHub
    #: False for one bot of several: the connection (and embedded server) is the process's, closed by it.
    owns_connection: bool = True

    async def close(self, *, grace_seconds: float = 10.0, cut_short: asyncio.Event | None = None) -> int:
        """Stop everything; running turns get ``grace_seconds`` (until ``cut_short`` is set) to finish.

        Returns how many turns were cancelled instead: their messages wait in the inbox for the next start.
        """
        cancelled = await self.runner.stop(grace_seconds=grace_seconds, cut_short=cut_short)
        for adapter in self.runner.adapters.values():
            with contextlib.suppress(Exception):
                await adapter.stop()
        await self.agents.aclose()
        await self.live.aclose()
        await self.store.channel.aclose()
        if self.owns_connection:
            await self.redis.aclose()
            if self.embedded:
                await self.embedded.stop()
        return cancelled


def message_path(redis: Any, settings: Settings) -> tuple[SessionStore, Inbox]:
    """The store and inbox a gateway's workers use, on one shared channel to Redis.

    The caller closes the channel (``store.channel.aclose()``) before the redis-py client.
    """
    channel = channel_for(redis)
    store = SessionStore(
        redis,
        settings.redis.key_prefix,
        channel=channel,
        transcript_cache_tokens=settings.gateway.transcript_cache_tokens,
    )
    inbox = Inbox(
        redis, settings.redis.key_prefix, dedupe_ttl_seconds=settings.gateway.dedupe_ttl_seconds, channel=channel
    )
    return store, inbox


async def connect(
    settings: Settings, *, exclusive: bool = False, notice: Callable[[str], None] | None = None
) -> tuple[Any, EmbeddedRedis | None]:
    """The process's connection to Redis: ``redis.url``, or the embedded server under home.

    ``exclusive`` refuses an embedded server that another live foldgate runs on the same home:
    a serving gateway must not have its server stop under it when that foldgate quits.
    A Redis that cannot be reached raises :class:`~gateway.startup_errors.StartupError` naming ``redis.url``.
    """
    try:  # a configured server gets a deadline: a firewall that drops packets must not hang the start
        async with asyncio.timeout(REDIS_CONNECT_SECONDS if settings.redis.url.strip() else None):
            return await connect_or_embed(
                settings.redis.url or None,
                settings.home_path,
                cluster=settings.redis.cluster,
                notice=notice,
                share=not exclusive,
            )
    except (OSError, TimeoutError, ValueError, RedisError) as error:
        raise redis_failure(error, settings) from error


async def open_gateway(
    settings: Settings, adapters: dict[str, PlatformAdapter], *, exclusive: bool = False, **builder_options: Any
) -> RunningGateway:
    """Connect to Redis (or start the embedded server) and build a started runner that owns the connection.

    Whatever was opened before a failure is closed again.
    """
    redis, embedded = await connect(settings, exclusive=exclusive, notice=builder_options.get("notice"))
    try:
        gateway = await open_on(redis, settings, adapters, **builder_options)
    except BaseException:
        await _release(None, None, None, redis, embedded)
        raise
    gateway.embedded, gateway.owns_connection = embedded, True
    return gateway


async def open_on(
    redis: Any, settings: Settings, adapters: dict[str, PlatformAdapter], **builder_options: Any
) -> RunningGateway:
    """A started runner for ``settings`` on a connection the caller owns (one bot of several shares it):
    its own channel, keys (``redis.key_prefix``), agents, send budget and activity. The gateway it returns does
    not close ``redis``; the caller sets :attr:`RunningGateway.owns_connection` when it should.
    A half-built one is closed again before the error is raised.
    """
    store: SessionStore | None = None
    agents: AgentBuilder | None = None
    runner: GatewayRunner | None = None
    try:
        store, inbox = message_path(redis, settings)
        try:  # the message path logs in on a connection of its own: a refusal shows here, not in a worker
            async with asyncio.timeout(REDIS_CONNECT_SECONDS if settings.redis.url.strip() else None):
                await store.channel.call("PING")
        except (OSError, TimeoutError, RedisError) as error:
            raise redis_failure(error, settings) from error
        events = EventBus()
        activity = ActivityLog(redis, store.channel, settings.redis.key_prefix)
        events.subscribe(activity.record)  # whichever process serves the operator view reads them
        agents = AgentBuilder(settings, **builder_options)
        learned = LearnedWindows(store.channel, settings.redis.key_prefix)
        await learned.refresh(force=True)
        await agents.settle_windows(learned)
        budget = SendBudget(store.channel, settings.redis.key_prefix)
        live = LiveHub(redis, store.channel, settings.redis.key_prefix)
        # Any process may run a web chat's turn, served here or not: each one can send its replies.
        web = WebChatAdapter(live)
        # Likewise an API session's: its reply reaches the process holding the request whichever process runs it.
        api = ApiAdapter(live)
        platforms = {**adapters, WEB_PLATFORM: web, API_PLATFORM: api}
        runner = build_runner(settings, store, inbox, agents, platforms, events=events, budget=budget)
        web.media = runner.media_store  # files sent from the page are read back from where the page kept them
        api.media = runner.media_store  # and a request's images from where the API server kept them
        await runner.start()
        encoding()  # the tokenizer loads now rather than on the first message
    except BaseException:
        await _release(runner, agents, store, None, None)
        raise
    return RunningGateway(
        settings, runner, store, events, agents, redis, None, activity, budget, live, owns_connection=False
    )


async def _release(
    runner: GatewayRunner | None,
    agents: AgentBuilder | None,
    store: SessionStore | None,
    redis: Any,
    embedded: EmbeddedRedis | None,
) -> None:
    """Close what a half-opened gateway holds, so a failed start leaves no server or connection behind."""
    steps = [
        runner.stop if runner else None,
        agents.aclose if agents else None,
        store.channel.aclose if store else None,
        redis.aclose if redis is not None else None,
        embedded.stop if embedded else None,
    ]
    for step in steps:
        if step is not None:
            with contextlib.suppress(Exception):
                await step()
