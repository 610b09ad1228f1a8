"""A gateway assembled for tests: real Redis, the runner ``foldgate run`` builds, a fake provider on loopback,
a recording platform.

The gateway is opened by :func:`gateway.run.assembly.open_on`, the code every way of running foldgate goes
through, so a test runs the wiring users get: every ``gateway`` setting (lock ttl, concurrent chats,
coalescing of a backlog, …) is the one its :class:`Settings` carries — the shipped default unless the test
set it. The harness has no values of its own: a test that wants another one says so, in its settings or by
naming the key to :func:`running_gateway`.

Beside it, what the gateway tests script around it: the notes the fake provider answers a summary request
with (:data:`NOTES`, :func:`is_summary_request`), an ops chat's chatter, settings for an outage, and a wait
bounded only against a hang.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator
from typing import Any

from agent.compaction.summary_prompt import SECTION_HEADINGS, SYSTEM_PROMPT
from gateway.config import GatewaySettings, Settings
from gateway.events import Event
from gateway.platforms.base import IncomingMessage
from gateway.platforms.recording import RecordingAdapter
from gateway.run.assembly import open_on
from gateway.run.signals import TERM_GRACE_SECONDS
from gateway.worker.runner import GatewayRunner
from tests.fakes import waiting
from tests.fakes.llm_server import RecordedRequest

#: What the fake provider answers a summary request with: every section of the notes, each noted.
NOTES = "\n".join(f"{heading}\n- noted" for heading in SECTION_HEADINGS)
#: The services the chatter of an ops chat is about.
SERVICES = ("billing-api", "auth-gateway", "search-indexer", "notifier", "ledger")


def is_summary_request(request: RecordedRequest) -> bool:
    """Whether ``request`` is the summarizer's (its system prompt is the summary prompt), not a chat turn."""
    return SYSTEM_PROMPT[:40] in request.system


def chatter(rng: random.Random, index: int) -> str:
    """Message ``index`` of an ops chat: figures about one of :data:`SERVICES`, drawn from ``rng``."""
    service = rng.choice(SERVICES)
    return (
        f"{index}: {service} p99 went from {rng.randint(20, 900)}ms to {rng.randint(20, 900)}ms in "
        f"{rng.choice(('eu-west', 'us-east', 'ap-south'))}; queue depth {rng.randint(2, 9000)}, "
        f"restarted {rng.randint(1, 40)} pods, canary at {rng.choice((5, 25, 50))}%"
    )


#: Seconds before a wait for something that should come at once is given up as a hang. Under the SIGTERM
#: grace (60 s) and the provider's read timeout (120 s): what arrives within it did not wait for those.
PATIENCE = TERM_GRACE_SECONDS / 2


#: The wait bounded only against a hang is the one every test uses (kept importable from here).
wait_for = waiting.wait_for


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


def settings_for(redis_url: str, prefix: str, base_url: str, *, bound: float, timeout: float = 5.0) -> Settings:
    """Settings for an outage: the gateway waits up to ``bound`` seconds for the provider to come back, and the
    client neither retries nor waits past ``timeout`` for an answer."""
    settings = make_settings(
        redis_url, prefix, base_url, context_length=16_000, gateway={"outage_retry_seconds": bound}
    )
    settings.model.max_retries = 0  # the gateway's own waiting is under test, not the client's retries
    settings.model.timeout_seconds = timeout
    return settings


def with_gateway(settings: Settings, **gateway: Any) -> Settings:
    """``settings`` with the named keys of its ``gateway`` section changed, checked as ``config.yaml``'s are
    (a lock ttl below one second is refused here as it would be in the file)."""
    section = GatewaySettings.model_validate({**dict(settings.gateway), **gateway})
    return settings.model_copy(update={"gateway": section})


def message(
    chat_id: str, update_id: str, text: str, *, respond: bool = True, ts: float | None = None, **fields: Any
) -> IncomingMessage:
    """A local message; ``fields`` are more of its fields (``client_tools``, ``tool_results``)."""
    extra = {"ts": ts} if ts is not None else {}
    return IncomingMessage(
        platform="local", chat_id=chat_id, update_id=update_id, text=text, respond=respond, **extra, **fields
    )


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
