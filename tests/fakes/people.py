"""People writing to running gateways on one Redis: a Telegram message from someone in their private chat or in
a group, and a gateway process whose replies are recorded (what the memory tests drive)."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator
from typing import Any

from gateway.config import Settings
from gateway.platforms.base import IncomingMessage
from gateway.platforms.recording import RecordingAdapter
from gateway.run.assembly import open_on
from gateway.store.activity import ActivityLog
from gateway.worker.runner import GatewayRunner
from tests.fakes.gateway import make_settings
from tests.fakes.llm_server import FakeLLMServer
from tests.fakes.waiting import wait_for

_updates = itertools.count(1)


def said(user: str, text: str, chat: str | None = None, *, name: str = "", ts: float | None = None) -> IncomingMessage:
    """A Telegram message from ``user``: in their private chat (its id is theirs) unless ``chat`` names a group."""
    extra: dict[str, Any] = {} if ts is None else {"ts": ts}
    return IncomingMessage(
        platform="tg",
        chat_id=chat or user,
        user_id=user,
        user_name=name or f"user{user}",
        update_id=str(next(_updates)),
        text=text,
        **extra,
    )


class Bot:
    """One running gateway process, with its Telegram replies recorded."""

    def __init__(self, runner: GatewayRunner, adapter: RecordingAdapter, activity: ActivityLog) -> None:
        self.runner, self.adapter, self.activity = runner, adapter, activity

    async def ask(self, message: IncomingMessage) -> str:
        """The reply to ``message``, once it is sent."""
        before = len(self.adapter.sent)
        await self.runner.intake(message)
        await wait_for(lambda: len(self.adapter.sent) > before, what=f"the reply to {message.text!r}")
        await self.runner.wait_idle()
        return self.adapter.sent[before][1]


def people_settings(redis_url: str, prefix: str, llm: FakeLLMServer, **overrides: Any) -> Settings:
    """A gateway's settings as shipped, on the fake provider, with ``tg:900`` an admin."""
    settings: dict[str, Any] = {"context_length": 64_000, "gateway": {"coalesce_backlog": False}}
    settings["access"] = {"admins": ["tg:900"]}
    settings.update(overrides)
    return make_settings(redis_url, prefix, llm.openai_base_url, **settings)


@contextlib.asynccontextmanager
async def process(settings: Settings, redis: Any) -> AsyncIterator[Bot]:
    """A gateway process on ``redis``, running until the block ends."""
    adapter = RecordingAdapter("tg")
    running = await open_on(redis, settings, {"tg": adapter})
    try:
        yield Bot(running.runner, adapter, running.activity)
    finally:
        await running.close()
