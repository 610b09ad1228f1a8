"""The gateway ``foldgate run`` opens, in front of real platform clients (aiogram on the fake Bot API,
discord.py on the fake Discord API) on real Redis.

Like :func:`tests.fakes.gateway.running_gateway` for the local platform, it goes through
:func:`gateway.run.assembly.open_on`, so a Telegram or Discord test runs what users get: the send budget
every process shares, the activity log, the web chat, and every ``gateway`` setting (lock ttl, concurrent
chats, backlog coalescing, …) as the settings carry it — the shipped default unless the test set it.
There are no values of its own here: a test that wants another one names it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

from gateway.config import DeliverySettings, Settings
from gateway.platforms.base import PlatformAdapter
from gateway.run.assembly import RunningGateway, open_on
from tests.fakes.gateway import with_gateway


def with_delivery(settings: Settings, **delivery: Any) -> Settings:
    """``settings`` with the named keys of its ``delivery`` section changed, checked as ``config.yaml``'s are."""
    section = DeliverySettings.model_validate({**dict(settings.delivery), **delivery})
    return settings.model_copy(update={"delivery": section})


@contextlib.asynccontextmanager
async def platform_gateway(
    settings: Settings,
    redis: Any,
    adapters: Mapping[str, PlatformAdapter],
    *,
    stream_replies: bool | None = None,
    **gateway: Any,
) -> AsyncIterator[RunningGateway]:
    """A started gateway on ``redis`` serving ``adapters`` (by short name: ``tg``, ``dc``), opened as
    ``foldgate run`` opens it and closed as it closes it (turns get their grace, then the adapters stop).

    The adapters are not started: the caller hands them the runner's intake as its platform needs
    (a polling or webhook client starts; a Discord client fed payloads directly is bound).
    ``gateway`` names keys of the settings' ``gateway`` section this test runs with instead
    (``coalesce_backlog=False``), ``stream_replies`` the ``delivery`` key of that name; what is not named is
    what the settings say.
    """
    if gateway:
        settings = with_gateway(settings, **gateway)
    if stream_replies is not None:
        settings = with_delivery(settings, stream_replies=stream_replies)
    running = await open_on(redis, settings, dict(adapters))
    try:
        yield running
    finally:
        await running.close()
