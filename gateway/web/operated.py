"""The running bots as the operator view reads them, and what every operator page shares: the bot a page
shows, links to a chat, and the page itself with its navigation."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote

from aiohttp import web

from gateway.config.access import BudgetSettings
from gateway.events import EventBus
from gateway.metrics import GatewayWatch
from gateway.store import SessionStore
from gateway.store.activity import ActivityLog
from gateway.store.media import MediaStore
from gateway.store.memory import MemoryStore
from gateway.store.spend import SpendStore
from gateway.web.pages import render

#: The cookie that remembers which bot the operator looks at.
BOT_COOKIE = "fg_bot"


def chat_link(chat: str) -> str:
    return "/admin/chats/" + quote(chat, safe="")


@dataclass(frozen=True)
class OperatedBot:
    """One running bot as the operator view reads it: its chats, activity, figures, media and spend."""

    name: str
    store: SessionStore
    activity: ActivityLog
    watch: GatewayWatch
    #: The context window of a chat's model (None: the default model).
    window_of: Callable[[str | None], int]
    #: Every chat's photos, documents and voice.
    media: MediaStore
    #: What each person and chat spent, and the budgets it counts against.
    spending: SpendStore | None = None
    budgets: BudgetSettings = field(default_factory=BudgetSettings)
    #: What the bot keeps about people (None: nothing to show).
    memory: MemoryStore | None = None
    #: Where an operator's removal of memory entries is told (the chat's activity, the metrics).
    events: EventBus | None = None


class BotState(Protocol):
    """A configured bot as the bots page lists it, running or not (``gateway.bots.BotStatus``)."""

    @property
    def name(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def detail(self) -> str: ...
    @property
    def since(self) -> float: ...


@dataclass(frozen=True)
class OperatedBots:
    """The process's bots as they are now (a reload adds, replaces and removes them)."""

    #: The running bots by name, in the configuration's order.
    running: dict[str, OperatedBot]
    #: Every configured bot's state, failed ones with what to fix.
    states: Sequence[BotState] = ()
    #: Whether the deployment configures ``bots:``: its pages then say which bot they show.
    several: bool = False

    def chosen(self, request: web.Request) -> OperatedBot | None:
        """``?bot=``, else the cookie's bot, else the first running one: a name that does not run now is passed over."""
        for name in (request.query.get("bot"), request.cookies.get(BOT_COOKIE)):
            if name in self.running:
                return self.running[name]
        return next(iter(self.running.values()), None)


#: An operator page of one bot.
BotPage = Callable[[web.Request, OperatedBots, OperatedBot], Awaitable[web.StreamResponse]]


def render_page(name: str, bots: OperatedBots, bot: OperatedBot | None, **context: Any) -> web.Response:
    """An operator page; the navigation names the bot it shows when the deployment configures several."""
    bot_q = f"bot={quote(bot.name, safe='')}" if bots.several and bot else ""  # links keep the bot a page shows
    return render(name, shown_bot=bot.name if bot else "", several=bots.several, bot_q=bot_q, **context)
