"""Telegram updates by webhook (any number of replicas behind a load balancer).

An aiohttp server on ``listen_host:listen_port`` serves ``webhook_path``. A delivery without the
right ``X-Telegram-Bot-Api-Secret-Token`` is refused (403). An update is written to the intake
BEFORE the answer: 200 once it is durable (also for a redelivery the intake recognises as a
duplicate), 500 when it could not be stored, so Telegram delivers it again.

An album's parts are each handed over at once, as messages that name their album
(``IncomingMessage.album``): Telegram delivers one chat's updates one after another, waiting for
each answer, so a part held back for the next would only be answered late. The turn that takes
the first part waits for the rest and answers the album once (:func:`gateway.worker.backlog.take_album`),
whichever replica stored each part.
"""

from __future__ import annotations

import hmac
import logging

from aiogram import Bot
from aiogram.types import Update
from aiohttp import web

from gateway.platforms.base import Intake
from gateway.platforms.intake import Outcome
from gateway.platforms.telegram.receiving import Reader, take_in

log = logging.getLogger("gateway.platforms.telegram")  # the adapter's log: one logger to filter for Telegram

#: Header in which Telegram sends back the secret given to ``setWebhook``.
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
#: What happens to an update the intake could not store.
THEN = "answering 500 so Telegram delivers it again"
#: What the webhook answers (with 200) for each outcome of the hand-over; not stored is a 500.
ANSWERS = {Outcome.STORED: "stored", Outcome.DUPLICATE: "duplicate", Outcome.SKIPPED: "skipped"}


class WebhookServer:
    """The webhook's HTTP server: :meth:`open` it, and :meth:`close` it when the adapter stops."""

    def __init__(self, bot: Bot, read: Reader, intake: Intake, *, path: str, secret: str) -> None:
        self.bot = bot
        self.read = read
        self.intake = intake
        self.path = path
        self.secret = secret
        self._runner: web.AppRunner | None = None

    async def open(self, host: str, port: int) -> None:
        """Listen on ``host:port``; an ``OSError`` says the address cannot be had."""
        app = web.Application()
        app.router.add_post(self.path, self._on_update)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=5.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port).start()

    def port(self) -> int | None:
        """The port it listens on (useful with port 0); None before it listens."""
        if self._runner is None or not self._runner.addresses:
            return None
        return int(self._runner.addresses[0][1])

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _on_update(self, request: web.Request) -> web.Response:
        given = request.headers.get(SECRET_HEADER, "").encode()
        if not hmac.compare_digest(given, self.secret.encode()):
            log.warning("telegram: webhook delivery from %s refused: wrong or missing secret", request.remote)
            return web.Response(status=403, text="forbidden")
        try:
            update = Update.model_validate(await request.json(), context={"bot": self.bot})
        except ValueError:
            log.warning("telegram: webhook body from %s is not a Telegram update", request.remote)
            return web.Response(status=400, text="not a Telegram update")
        handed = await take_in((update,), self.read, self.intake, then=THEN)
        if handed is None:
            return web.Response(text="ignored")
        if not handed.acknowledged:
            return web.Response(status=500, text="not stored")
        return web.Response(text=ANSWERS[handed.outcome])
