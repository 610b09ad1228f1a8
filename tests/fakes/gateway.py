"""A gateway assembled for tests: real Redis, a real runner, a fake provider on loopback, a recording platform."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from gateway.agents import AgentBuilder
from gateway.config import Settings
from gateway.events import Event, EventBus
from gateway.platforms.base import IncomingMessage
from gateway.platforms.recording import RecordingAdapter
from gateway.run.assembly import message_path
from gateway.worker.runner import GatewayRunner


def make_settings(redis_url: str, prefix: str, base_url: str, *, context_length: int, model: str = "test-model",
                  **sections: Any) -> Settings:
    """Settings for a custom OpenAI-compatible route at ``base_url`` with the given window."""
    compression = {"enabled": True, **sections.pop("compression", {})}
    return Settings(
        redis={"url": redis_url, "key_prefix": prefix},
        model={"name": model, "provider": "custom", "base_url": base_url, "context_length": context_length},
        platforms={"local": {"enabled": True}},
        compression=compression,
        **sections,
    )


def message(chat_id: str, update_id: str, text: str, *, respond: bool = True, ts: float | None = None) -> IncomingMessage:
    extra = {"ts": ts} if ts is not None else {}
    return IncomingMessage(platform="local", chat_id=chat_id, update_id=update_id, text=text, respond=respond, **extra)


@contextlib.asynccontextmanager
async def running_gateway(settings: Settings, redis: Any, *, lock_ttl_seconds: float = 30.0,
                          summarizer: Any = "configured", max_concurrent_chats: int = 64,
                          adapter: RecordingAdapter | None = None, coalesce_backlog: bool = False,
                          ) -> AsyncIterator[tuple[GatewayRunner, RecordingAdapter, list[Event]]]:
    """A started runner on ``redis`` with a recording local platform; yields (runner, adapter, events)."""
    adapter = adapter or RecordingAdapter()
    builder = AgentBuilder(settings)
    if summarizer != "configured":
        builder.summarizer = summarizer
    events = EventBus()
    seen: list[Event] = []
    events.subscribe(seen.append)
    store, inbox = message_path(redis, settings)  # as `foldgate run` builds them
    runner = GatewayRunner(
        store, inbox, builder,
        adapters={"local": adapter}, compression=settings.compression, events=events,
        lock_ttl_seconds=lock_ttl_seconds, poll_interval=0.01, max_concurrent_chats=max_concurrent_chats,
        coalesce_backlog=coalesce_backlog, coalesce_max_messages=settings.gateway.coalesce_max_messages,
        coalesce_max_tokens=settings.gateway.coalesce_max_tokens,
        max_message_tokens=settings.gateway.max_message_tokens,
        outage_retry_seconds=settings.gateway.outage_retry_seconds, tools=settings.tools, access=settings.access,
    )
    await runner.start()
    try:
        yield runner, adapter, seen
    finally:
        await runner.stop()
        await builder.aclose()
        await store.channel.aclose()
