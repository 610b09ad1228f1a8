"""Telegram updates by webhook (any number of replicas behind a load balancer).

An aiohttp server on ``listen_host:listen_port`` serves ``webhook_path``. A delivery without the
right ``X-Telegram-Bot-Api-Secret-Token`` is refused (403). An update is written to the intake
BEFORE the answer: 200 once it is durable (also for a redelivery the intake recognises as a
duplicate), 500 when it could not be stored, so Telegram delivers it again.

An album's parts (:mod:`.albums`) are gathered for a moment; each part's delivery is answered with
the album's outcome once the album was handed over, so no part is acknowledged before it is
stored. Telegram delivers one chat's updates one after another, waiting for each answer, so in
practice a webhook's album arrives as one message per part (each after the album window): slower
than polling's one message, and nothing is lost or doubled. Parts posted to different replicas
are gathered by each apart for the same reason.
"""

from __future__ import annotations

import asyncio
import hmac
import logging

from aiogram import Bot
from aiogram.types import Update
from aiohttp import web

from gateway.platforms.base import Intake
from gateway.platforms.intake import HandOver, Outcome
from gateway.platforms.telegram.albums import ALBUM_WINDOW, Albums
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

    def __init__(self, bot: Bot, read: Reader, intake: Intake, *, path: str, secret: str,
                 album_window: float = ALBUM_WINDOW) -> None:
        self.bot = bot
        self.read = read
        self.intake = intake
        self.path = path
        self.secret = secret
        self._albums = Albums(self._settle, window=album_window)
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
        await self._albums.aclose()
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
        handed = await self._hand_over(update)
        if handed is None:
            return web.Response(text="ignored")
        if not handed.acknowledged:
            return web.Response(status=500, text="not stored")
        return web.Response(text=ANSWERS[handed.outcome])

    async def _hand_over(self, update: Update) -> HandOver | None:
        """Hand ``update`` over after the albums of its chat before it; a part with its album."""
        if not await self._albums.before(update):
            return HandOver(Outcome.NOT_STORED)
        album = self._albums.take(update)
        if album is None:
            return await take_in((update,), self.read, self.intake, then=THEN)
        try:
            return await asyncio.shield(album.task)
        except asyncio.CancelledError:
            if album.task.cancelled():  # the server is closing: the part was not stored
                return HandOver(Outcome.NOT_STORED)
            raise

    async def _settle(self, updates: list[Update]) -> HandOver | None:
        return await take_in(updates, self.read, self.intake, then=THEN)
