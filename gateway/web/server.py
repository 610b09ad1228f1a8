"""The gateway's HTTP servers for people and probes, started by ``foldgate run``.

- the operator's server at ``gateway.metrics_host:metrics_port``: ``/metrics``, ``/healthz`` and the
  operator view under ``/admin`` (refused without ``gateway.admin_token``), for every bot of the process;
- the web chat at ``platforms.local.host:port`` when ``platforms.local.web`` is true.

Both bind 127.0.0.1 unless configured otherwise, and every response goes through
:func:`gateway.web.security.guard`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from aiohttp import web
from redis.exceptions import RedisError

from agent.cancelling import cancel_and_wait
from gateway.metrics import BotWatches, GatewayWatch, add_metrics_routes
from gateway.startup_errors import StartupError
from gateway.web.chat_pages import MAX_TEXT_BYTES, WebChat
from gateway.web.operated import OperatedBot, OperatedBots
from gateway.web.operator_pages import OperatorView
from gateway.web.pages import add_static
from gateway.web.security import AdminToken, guard

log = logging.getLogger(__name__)


async def start_site(app: web.Application, host: str, port: int, *, setting: str) -> web.AppRunner:
    """Serve ``app`` on ``host:port``; a port that cannot be bound stops the start in one line naming ``setting``."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as error:
        await runner.cleanup()
        raise StartupError(
            f"cannot serve on {host}:{port} ({error.strerror or error}) — pick a free port, or 0 for none",
            setting=setting,
        ) from error
    return runner


def operator_app(
    watches: GatewayWatch | BotWatches, view: OperatorView, allowed_hosts: Sequence[str] = ()
) -> web.Application:
    app = web.Application(middlewares=[guard(allowed_hosts)])
    add_metrics_routes(app, watches)
    view.add_routes(app)
    add_static(app)
    return app


def chat_app(chat: WebChat, allowed_hosts: Sequence[str] = ()) -> web.Application:
    # A plain form's text fits this; a form with files is read as a stream, each file with its own limit.
    app = web.Application(middlewares=[guard(allowed_hosts)], client_max_size=MAX_TEXT_BYTES + 65_536)
    chat.add_routes(app)
    add_static(app)
    return app


@dataclass
class WebServers:
    """The servers a running gateway holds, closed together."""

    #: Host names the pages answer to besides IP addresses and localhost (``gateway.allowed_hosts``).
    allowed_hosts: Sequence[str] = ()
    runners: list[web.AppRunner] = field(default_factory=list)
    #: Where each server listens, as a person would open it ("web chat", "operator view").
    addresses: dict[str, str] = field(default_factory=dict)
    #: Chats stored before the index of chats existed are added to it once per bot, in the background.
    indexing: asyncio.Task[None] | None = None

    async def serve_operator(
        self, bots: Callable[[], OperatedBots], watches: BotWatches, token: str | None, host: str, port: int
    ) -> None:
        """``/metrics`` of every running bot and the operator view, each page of the bot a request chose."""
        view = OperatorView(AdminToken(token), bots)
        runner = await start_site(
            operator_app(watches, view, self.allowed_hosts), host, port, setting="gateway.metrics_port"
        )
        self.runners.append(runner)
        self.addresses["operator view"] = _url(runner, "/admin")
        self.indexing = asyncio.create_task(
            _index_stored_chats(list(bots().running.values())), name="index-stored-chats"
        )

    async def serve_chat(self, chat: WebChat, host: str, port: int) -> None:
        runner = await start_site(chat_app(chat, self.allowed_hosts), host, port, setting="platforms.local.port")
        self.runners.append(runner)
        self.addresses["web chat"] = _url(runner, "/")

    async def close(self) -> None:
        if self.indexing is not None:
            await cancel_and_wait(self.indexing)
        for runner in self.runners:
            with contextlib.suppress(Exception):
                await runner.cleanup()


async def _index_stored_chats(bots: Iterable[OperatedBot]) -> None:
    """Add the chats a foldgate without the index of chats stored (a SCAN of each bot's keys, once per Redis)."""
    for bot in bots:
        try:
            added = await bot.activity.index_stored_chats(bot.store)
        except (RedisError, OSError) as error:  # the list shows the chats that wrote since; the next start tries again
            log.warning("the operator view could not index bot %s's chats stored earlier: %s", bot.name, error)
            continue
        if added:
            log.info("the operator view indexed %d chats of bot %s stored before its index existed", added, bot.name)


def _url(runner: web.AppRunner, path: str) -> str:
    host, port = runner.addresses[0][:2]
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{port}{path}"
