"""The real Telegram adapter (aiogram) on the fake Bot API (:mod:`tests.fakes.bot_api`), alone or as the
platform of the gateway ``foldgate run`` opens on real Redis (:func:`tests.fakes.platform_gateway.platform_gateway`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from gateway.config import Settings, TelegramSettings
from gateway.platforms.base import IncomingMessage
from gateway.platforms.telegram import TelegramAdapter
from gateway.worker.runner import GatewayRunner
from tests.fakes.bot_api import FakeBotAPI
from tests.fakes.platform_gateway import platform_gateway

#: The model's window in the Telegram gateway tests: far more than any of their chats needs.
WINDOW = 200_000
#: A reply long enough to stream in many pieces (see :func:`tests.fakes.llm_server.streaming`).
ANSWER = " ".join(f"step {i}: the canary stayed green and the queue drained." for i in range(30))


class Collected:
    """An intake that keeps what it is given and, like the gateway's, says False for a redelivery."""

    def __init__(self) -> None:
        self.messages: list[IncomingMessage] = []
        self.failures: dict[str, int] = {}

    async def __call__(self, message: IncomingMessage) -> bool:
        if self.failures.get(message.update_id, 0) > 0:
            self.failures[message.update_id] -= 1
            raise ConnectionError("redis went away")
        if any(seen.update_id == message.update_id for seen in self.messages):
            return False
        self.messages.append(message)
        return True

    @property
    def ids(self) -> set[int]:
        return {int(message.update_id) for message in self.messages}


def telegram_settings(api: FakeBotAPI, **fields: Any) -> TelegramSettings:
    """``platforms.telegram`` for a bot on ``api`` (its token and address) with ``fields``, validated as a
    configuration file's section is, so a value the gateway would refuse fails the test that uses it."""
    return TelegramSettings(token=api.token, api_server=api.base_url, **fields)


def adapter_for(api: FakeBotAPI, settings: TelegramSettings | None = None, **options: Any) -> TelegramAdapter:
    """The adapter for ``settings`` (by default :func:`telegram_settings`'s own), polling every second unless
    ``options`` say otherwise."""
    options.setdefault("poll_timeout", 1)
    return TelegramAdapter(settings or telegram_settings(api), **options)


@contextlib.asynccontextmanager
async def running(adapter: TelegramAdapter, intake: object) -> AsyncIterator[TelegramAdapter]:
    await adapter.start(intake)  # type: ignore[arg-type]
    try:
        yield adapter
    finally:
        await adapter.stop()


@contextlib.asynccontextmanager
async def telegram_gateway(
    settings: Settings, redis: Any, adapter: TelegramAdapter, *, stream_replies: bool | None = None, **gateway: Any
) -> AsyncIterator[GatewayRunner]:
    """The gateway ``foldgate run`` opens for ``settings``, with ``adapter`` as its Telegram platform, started on
    the runner's intake once the gateway is up; yields the runner (its ``events`` are the gateway's).

    Its sends draw on the send budget in Redis, and every setting is the settings' own: a test that runs with
    another one names it (``coalesce_backlog=False``, ``lock_ttl_seconds=2``, ``stream_replies=False``).
    """
    async with platform_gateway(settings, redis, {"tg": adapter}, stream_replies=stream_replies, **gateway) as opened:
        await adapter.start(opened.runner.intake)
        yield opened.runner


@contextlib.asynccontextmanager
async def streaming_gateway(
    settings: Settings, redis: Any, api: FakeBotAPI, preview_interval: float = 0.2, **keys: Any
) -> AsyncIterator[GatewayRunner]:
    """The gateway ``foldgate run`` opens, polling ``api``, its replies streamed and paced by the shared send
    budget; ``keys`` names the settings a test runs with instead of its own (see :func:`telegram_gateway`)."""
    adapter = TelegramAdapter(
        telegram_settings(api), poll_timeout=1, typing_interval=0, preview_interval=preview_interval
    )
    async with telegram_gateway(settings, redis, adapter, **keys) as runner:
        yield runner
