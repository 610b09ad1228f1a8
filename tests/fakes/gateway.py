"""A gateway assembled for tests: real Redis, the runner ``foldgate run`` builds, a fake provider on loopback,
a recording platform.

The gateway is opened by :func:`gateway.run.assembly.open_on`, the code every way of running foldgate goes
through, so a test runs the wiring users get: every ``gateway`` setting (lock ttl, concurrent chats,
coalescing of a backlog, …) is the one its :class:`Settings` carries — the shipped default unless the test
set it. The harness has no values of its own: a test that wants another one says so, in its settings or by
naming the key to :func:`running_gateway`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from gateway.config import GatewaySettings, Settings
from gateway.events import Event
from gateway.platforms.base import IncomingMessage
from gateway.platforms.recording import RecordingAdapter
from gateway.run.assembly import open_on
from gateway.worker.runner import GatewayRunner


def make_settings(
    redis_url: str, prefix: str, base_url: str, *, context_length: int, model: str = "test-model", **sections: Any
) -> Settings:
    """Settings for a custom OpenAI-compatible route at ``base_url`` with the given window; any other section
    (``gateway={"coalesce_backlog": False}``, ``access=…``) is passed through as ``config.yaml`` would give it."""
    compression = {"enabled": True, **sections.pop("compression", {})}
    return Settings(
        redis={"url": redis_url, "key_prefix": prefix},
        model={"name": model, "provider": "custom", "base_url": base_url, "context_length": context_length},
        platforms={"local": {"enabled": True}},
        compression=compression,
        **sections,
    )


def with_gateway(settings: Settings, **gateway: Any) -> Settings:
    """``settings`` with the named keys of its ``gateway`` section changed, checked as ``config.yaml``'s are
    (a lock ttl below one second is refused here as it would be in the file)."""
    section = GatewaySettings.model_validate({**dict(settings.gateway), **gateway})
    return settings.model_copy(update={"gateway": section})


def message(
    chat_id: str, update_id: str, text: str, *, respond: bool = True, ts: float | None = None
) -> IncomingMessage:
    extra = {"ts": ts} if ts is not None else {}
    return IncomingMessage(platform="local", chat_id=chat_id, update_id=update_id, text=text, respond=respond, **extra)


@contextlib.asynccontextmanager
async def running_gateway(
    settings: Settings,
    redis: Any,
    *,
    summarizer: Any = "configured",
    adapter: RecordingAdapter | None = None,
    **gateway: Any,
) -> AsyncIterator[tuple[GatewayRunner, RecordingAdapter, list[Event]]]:
    """A started gateway on ``redis`` as ``foldgate run`` assembles it, with a recording local platform;
    yields (runner, adapter, events).

    ``gateway`` names keys of the settings' ``gateway`` section this test runs with instead
    (``coalesce_backlog=False``): there is no default here, so what is not named is what the settings say.
    ``summarizer`` replaces the configured one (a fake, or None for none).
    """
    if gateway:
        settings = with_gateway(settings, **gateway)
    adapter = adapter or RecordingAdapter()
    running = await open_on(redis, settings, {"local": adapter})
    # Nothing has run yet: open_on returns without yielding to the loop once the dispatcher is created,
    # so the summarizer is replaced and the events seen before any turn takes them.
    if summarizer != "configured":
        running.agents.summarizer = summarizer
    seen: list[Event] = []
    running.events.subscribe(seen.append)
    try:
        yield running.runner, adapter, seen
    finally:
        await running.close()
