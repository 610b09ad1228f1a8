"""The operator view (``/admin`` on the metrics port, ``gateway.admin_token`` required): every chat, one
chat over time, and the whole gateway.

- ``/admin`` — every chat with its context against the window, messages live and archived,
  compactions, tokens, dollars spent and saved by caching, last activity; sortable, paged.
- ``/admin/chats/<chat>`` — the chat's context size over time with each compaction marked by
  kind, each compaction's summary as the model saw it and what it archived (each message by id),
  prompt-cache reads and writes per turn, the turn log with its errors, and its latest messages
  with their photos (``/admin/chats/<chat>/media/<sha>``, that chat's images only), documents and voice.
- ``/admin/gateway`` — turns per second, turns in flight, the send budget, provider errors and
  Redis memory: one sample of the figures ``/metrics`` shows.
- ``/admin/bots`` — every configured bot: running, or failed with the line that says what to fix.
- ``/admin/people/<person>`` — what the bot keeps about a person, and buttons to remove it
  (:mod:`gateway.web.operator_people`); a chat's page links to the people who wrote there.

Each page shows one bot's data (a process may serve several, each with its own keys): the one named by
``?bot=`` (remembered in a cookie), else the cookie's, else the first running bot.

Without the token (as ``Authorization: Bearer`` or the login form's cookie) every page is
refused; with no token configured the view is off. Pages holding live figures refresh their
figures every few seconds with a little JavaScript; without it, a reload shows the same.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from agent.messages import text_of
from gateway.config.access import BudgetLimit, period_bounds
from gateway.events import CompressEvent, Event, TurnEvent
from gateway.metrics import COUNTER_HELP
from gateway.session_source import conversation_messages
from gateway.store import SessionStore, UnknownSession
from gateway.store.spend import Spend
from gateway.web import transcript
from gateway.web.charts import CacheTurn, CompactionMark, ContextSample, cache_chart, context_chart
from gateway.web.chat_table import PER_PAGE, at_least_recorded, chat_page
from gateway.web.media_files import image_response
from gateway.web.operated import BOT_COOKIE, BotPage, OperatedBot, OperatedBots, chat_link, render_page
from gateway.web.operator_people import add_people_routes, chat_people, person_link
from gateway.web.pages import render
from gateway.web.security import ADMIN_COOKIE, AdminToken, Handler
from gateway.worker.hygiene import estimate_session_tokens

#: Turns, compactions and errors listed on a chat's page, newest first.
LOG_ROWS = 200
#: Messages shown on each side of an archived message.
CONTEXT_RADIUS = 6
#: The chat's newest live messages its page shows.
LATEST_MESSAGES = 20


def media_link(chat: str) -> str:
    """Where the chat's images are served; the image's sha follows."""
    return chat_link(chat) + "/media/"


@dataclass(frozen=True)
class Compaction:
    """A compaction as the chat page lists it: the event, its summary as stored, what it archived."""

    event: CompressEvent
    summary: str


#: Rows of each spend table.
SPEND_SHOWN = 100


@dataclass(frozen=True)
class SpendRow:
    """One person's or chat's spend this period, and its share of the budget (None: no budget)."""

    name: str
    spent: Spend
    share: float | None
    chat: str = ""


@dataclass(frozen=True)
class SpendTable:
    title: str
    who: str
    key: str
    limit: BudgetLimit | None
    period: str
    rows: list[SpendRow]


def _share(limit: BudgetLimit | None, spent: Spend) -> float | None:
    if limit is None:
        return None
    return max(spent.usd / limit.usd if limit.usd else 0.0, spent.tokens / limit.tokens if limit.tokens else 0.0)


@dataclass(frozen=True)
class OperatorView:
    token: AdminToken
    #: The bots now, asked for on every request.
    bots: Callable[[], OperatedBots]

    def add_routes(self, app: web.Application) -> None:
        app.middlewares.append(self.gate)
        app.router.add_get("/admin/login", self.login_form)
        app.router.add_post("/admin/login", self.login)
        app.router.add_post("/admin/logout", self.logout)
        app.router.add_get("/admin/bots", self.bots_page)
        for path, page in (
            ("/admin", self.chats),
            ("/admin/gateway", self.gateway),
            ("/admin/gateway/figures", self.gateway_figures),
            ("/admin/spend", self.spend),
            ("/admin/chats/{chat}", self.chat),
            ("/admin/chats/{chat}/charts", self.chat_charts),
            ("/admin/chats/{chat}/m/{session}/{message}", self.message),
            ("/admin/chats/{chat}/media/{sha}", self.image),
        ):
            app.router.add_get(path, self._of_one_bot(page))

        add_people_routes(app, self._of_one_bot)

    def _of_one_bot(self, page: BotPage) -> Handler:
        """``page`` with the bot the request chose; a ``?bot=`` that names a running bot is remembered."""

        async def handler(request: web.Request) -> web.StreamResponse:
            bots = self.bots()
            bot = bots.chosen(request)
            if bot is None:
                return render("refused.html", status=503, reason="No bot runs here now: /admin/bots says why.")
            response = await page(request, bots, bot)
            if request.query.get("bot") == bot.name:
                response.set_cookie(
                    BOT_COOKIE, bot.name, httponly=True, samesite="Strict", path="/admin", secure=request.secure
                )
            return response

        return handler

    @web.middleware
    async def gate(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Every operator page needs the token; the login form is the one way in."""
        if not request.path.startswith("/admin") or request.path == "/admin/login":
            return await handler(request)
        if not self.token.configured:
            return render(
                "refused.html",
                status=403,
                reason="The operator view is off: set gateway.admin_token (and gateway.metrics_port) to turn it on.",
            )
        if not self.token.admits(request):
            return render("login.html", status=401, next=request.path_qs, problem="")
        return await handler(request)

    async def login_form(self, request: web.Request) -> web.Response:
        return render("login.html", next=_local_next(request.query.get("next", "")), problem="")

    async def login(self, request: web.Request) -> web.Response:
        form = await request.post()
        target = _local_next(str(form.get("next") or ""))
        if not self.token.matches(str(form.get("token") or "")):
            return render("login.html", status=401, next=target, problem="That is not the operator token.")
        response = web.HTTPSeeOther(target)
        self.token.set_cookie(response, request)
        raise response

    async def logout(self, request: web.Request) -> web.Response:
        response = web.HTTPSeeOther("/admin/login")
        response.del_cookie(ADMIN_COOKIE, path="/admin")
        raise response

    async def bots_page(self, request: web.Request) -> web.Response:
        """Every configured bot: running (a link shows its pages), or failed and what to fix, since when."""
        bots = self.bots()
        return render_page("operator_bots.html", bots, bots.chosen(request), states=bots.states)

    async def chats(self, request: web.Request, bots: OperatedBots, bot: OperatedBot) -> web.Response:
        sort = request.query.get("sort", "activity")
        descending = request.query.get("order", "desc") != "asc"
        try:
            page_number = int(request.query.get("page", "1"))
        except ValueError:
            page_number = 1
        page = await chat_page(
            bot.activity,
            bot.store,
            bot.window_of,
            sort=sort,
            descending=descending,
            page=page_number,
            per_page=PER_PAGE,
        )
        return render_page("operator_chats.html", bots, bot, page=page, chat_link=chat_link)

    async def spend(self, request: web.Request, bots: OperatedBots, bot: OperatedBot) -> web.Response:
        """Who spent most this period, people and chats, against their budgets; by dollars or by tokens."""
        by = "tokens" if request.query.get("by") == "tokens" else "usd"
        now, budgets = datetime.now(UTC), bot.budgets
        tables = []
        for kind, title, who, limit, key in (
            ("user", "People", "person", budgets.per_user, "access.budgets.per_user"),
            ("chat", "Chats", "chat", budgets.per_chat, "access.budgets.per_chat"),
        ):
            period = period_bounds(now, limit.period if limit else "day", budgets.timezone)[0]
            ranked = await bot.spending.ranking(kind, period, by=by, limit=SPEND_SHOWN) if bot.spending else []
            rows = [
                SpendRow(
                    subject.partition(":")[2],
                    spent,
                    _share(limit, spent),
                    subject.partition(":")[2] if kind == "chat" else "",
                )
                for subject, spent in ranked
            ]
            tables.append(SpendTable(title, who, key, limit, period, rows))
        return render_page(
            "operator_spend.html",
            bots,
            bot,
            tables=tables,
            by=by,
            timezone=budgets.timezone,
            shown=SPEND_SHOWN,
            chat_link=chat_link,
        )

    async def gateway(self, request: web.Request, bots: OperatedBots, bot: OperatedBot) -> web.Response:
        return render_page(
            "operator_gateway.html", bots, bot, figures=await bot.watch.sample(), help=COUNTER_HELP, states=bots.states
        )

    async def gateway_figures(self, request: web.Request, bots: OperatedBots, bot: OperatedBot) -> web.Response:
        return render("operator_gateway_figures.html", figures=await bot.watch.sample(), help=COUNTER_HELP)

    async def chat(self, request: web.Request, bots: OperatedBots, bot: OperatedBot) -> web.Response:

        chat = request.match_info["chat"]
        sid = await bot.store.stored_session(chat)
        if sid is None:
            return render("not_found.html", status=404, what=f"chat {chat}", back="/admin")
        events = await bot.activity.history(chat)
        meta = await bot.store.meta(chat, sid)
        totals = (await bot.activity.totals([chat]))[0]
        window = bot.window_of(meta.model)
        active = await bot.store.active(chat, sid)
        return render_page(
            "operator_chat.html",
            bots,
            bot,
            chat=chat,
            session_id=sid,
            meta=meta,
            totals=totals,
            window=window,
            context=estimate_session_tokens(meta)[0],
            compaction_count=at_least_recorded(totals.compactions, meta.compaction_count),
            compactions=await _compactions(bot.store, chat, events),
            log=list(reversed(events))[:LOG_ROWS],
            charts=_charts(events, window),
            chat_link=chat_link,
            latest=transcript.bubbles(active)[-LATEST_MESSAGES:],
            media=media_link(chat),
            people=await chat_people(bot, chat, active, events),
            person_link=person_link,
        )

    async def chat_charts(self, request: web.Request, bots: OperatedBots, bot: OperatedBot) -> web.Response:
        chat = request.match_info["chat"]
        sid = await bot.store.stored_session(chat)
        if sid is None:
            return render("not_found.html", status=404, what=f"chat {chat}", back="/admin")
        meta = await bot.store.meta(chat, sid)
        events = await bot.activity.history(chat)
        return render("operator_charts.html", charts=_charts(events, bot.window_of(meta.model)))

    async def message(self, request: web.Request, bots: OperatedBots, bot: OperatedBot) -> web.Response:
        chat, session_id = request.match_info["chat"], request.match_info["session"]
        message_id = request.match_info["message"]
        found = transcript.around(await conversation_messages(bot.store, chat, session_id), message_id, CONTEXT_RADIUS)
        if found is None:
            return render("not_found.html", status=404, what=f"message {message_id}", back=chat_link(chat))
        shown, position = found
        return render(
            "message.html",
            bubbles=shown,
            position=position,
            session_id=session_id,
            message_id=message_id,
            back=chat_link(chat),
            title=f"{chat} — message {message_id}",
            media=media_link(chat),
        )

    async def image(self, request: web.Request, bots: OperatedBots, bot: OperatedBot) -> web.Response:
        """An image of the chat in the path (the token admits the operator to every chat, each from its own path)."""
        return await image_response(bot.media, request.match_info["chat"], request.match_info["sha"])


async def _compactions(store: SessionStore, chat: str, events: list[Event]) -> list[Compaction]:
    """The chat's compactions, newest first, each with its summary as the store kept it."""
    found = [e for e in reversed(events) if isinstance(e, CompressEvent)]
    wanted: dict[str, list[str]] = {}
    for event in found:
        if event.summary_id:
            wanted.setdefault(event.session_id, []).append(event.summary_id)
    bodies: dict[tuple[str, str], str] = {}
    for sid, ids in wanted.items():
        try:
            for message in await store.get_messages(chat, sid, ids):
                bodies[(sid, str(message.get("_id")))] = text_of(message)
        except UnknownSession:
            continue
    return [Compaction(e, bodies.get((e.session_id, e.summary_id), "")) for e in found]


def _charts(events: list[Event], window: int) -> dict[str, Any]:
    """The chat's context over time with its compactions, and its prompt cache per turn."""
    turns = [e for e in events if isinstance(e, TurnEvent)]
    samples = [ContextSample(e.ts, e.context_tokens) for e in turns if e.context_tokens]
    marks = [
        CompactionMark(e.ts, e.tokens_before, e.tokens_after, e.trigger) for e in events if isinstance(e, CompressEvent)
    ]
    cache = [
        CacheTurn(
            e.ts,
            e.cache_read_tokens,
            e.cache_write_tokens,
            max(0, e.prompt_tokens - e.cache_read_tokens - e.cache_write_tokens),
        )
        for e in turns
    ]
    return {"context": context_chart(samples, marks, window=window), "cache": cache_chart(cache)}


def _local_next(target: str) -> str:
    """Where to go after logging in: an operator page of this server, never another site."""
    return target if target.startswith("/admin") and not target.startswith("//") else "/admin"
