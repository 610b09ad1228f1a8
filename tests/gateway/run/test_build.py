"""The worker is built in one place, from the settings: its parts carry no default of their own, and every
setting it follows reaches the part that follows it."""

from __future__ import annotations

import dataclasses
import inspect

from gateway.agents import AgentBuilder
from gateway.commands import CommandContext
from gateway.config import Settings
from gateway.delivery.budget import SendBudget
from gateway.events import EventBus
from gateway.run.assembly import message_path
from gateway.run.build import build_runner
from gateway.worker.parts import Spending, ToolAccess, TurnOptions, TurnParts
from gateway.worker.runner import GatewayRunner


def test_the_worker_parts_have_no_defaults_of_their_own():
    """Each default is the configuration's: a part with one of its own could drift from it unseen."""
    for part in (TurnParts, TurnOptions, Spending, ToolAccess, CommandContext):
        defaulted = [
            f.name
            for f in dataclasses.fields(part)
            if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        ]
        assert defaulted == [], part.__name__
    parameters = inspect.signature(GatewayRunner.__init__).parameters.values()
    assert [p.name for p in parameters if p.default is not inspect.Parameter.empty] == []


async def test_every_setting_reaches_the_part_that_follows_it(tmp_path, redis, redis_url, key_prefix):
    settings = Settings(
        redis={"url": redis_url, "key_prefix": key_prefix},
        platforms={"local": {"enabled": True}},
        gateway={
            "home": str(tmp_path),
            "lock_ttl_seconds": 9,
            "max_concurrent_chats": 3,
            "coalesce_backlog": False,
            "coalesce_max_messages": 11,
            "coalesce_max_tokens": 700,
            "max_message_tokens": 2_000,
            "outage_retry_seconds": 40,
        },
        delivery={"stream_replies": False},
        media={"max_images_per_request": 2},
        prompt_caching={"cache_ttl": "1h"},
        access={"messages_per_minute": 5},
        compression={"in_place": False},
    )
    store, inbox = message_path(redis, settings)
    agents = AgentBuilder(settings)
    try:
        runner = build_runner(
            settings, store, inbox, agents, {}, events=EventBus(), budget=SendBudget(store.channel, key_prefix)
        )
        parts = runner.parts
        assert (runner.lock_ttl, runner.keeper.ttl, runner.max_chats) == (9, 9, 3)
        assert parts.options == TurnOptions(
            stream_replies=False,
            coalesce_backlog=False,
            coalesce_max_messages=11,
            coalesce_max_tokens=700,
            max_images=2,
        )
        assert parts.spend.cache_ttl == "1h" and parts.spend.budgets is settings.access.budgets
        assert parts.bound.configured == 2_000 and parts.provider.outages.bound == 40
        assert parts.compactions.compression.in_place is False
        assert runner.admission.rate is not None and parts.tools.mcp is None
        assert runner.admission.roles is runner.roles and parts.tools.approvals is runner.admission.approvals
    finally:
        await agents.aclose()
        await store.channel.aclose()
