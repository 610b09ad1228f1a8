"""Telegram updates by long polling (one process per bot token).

``getUpdates`` with an offset. Each update is handed to the gateway's intake — which makes it
durable in Redis — BEFORE the next offset is requested, and the offset is what acknowledges
updates to Telegram, so nothing is acknowledged before it is safe. When the intake fails, the same
offset is asked for again; the intake deduplicates by update id, so what was already stored is not
stored twice. A ``409 Conflict`` means another process polls the same token (or a webhook is set):
the poller reports what that means and how to fix it, and stops rather than fight the other
process for updates.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Optional

from aiogram import Bot
from aiogram.exceptions import TelegramConflictError, TelegramRetryAfter, TelegramUnauthorizedError
from aiogram.types import Update

from gateway.platforms.base import Intake
from gateway.platforms.retry import Sleep
from gateway.platforms.telegram.calls import backoff
from gateway.platforms.telegram.errors import PollingConflict, TelegramAdapterError
from gateway.platforms.telegram.receiving import Reader, take_in
from gateway.platforms.telegram.updates import ALLOWED_UPDATES

log = logging.getLogger("gateway.platforms.telegram")  # the adapter's log: one logger to filter for Telegram

#: Seconds before an update the intake could not store is asked for again.
REFETCH_SECONDS = 1.0


def conflict_explanation(description: str) -> str:
    """What a 409 from getUpdates means for the operator, and what to do about it."""
    if "webhook" in description.lower():
        return (
            f"Telegram refused getUpdates with 409 Conflict ({description}): a webhook is set for this bot "
            "token, and Telegram does not serve getUpdates while one is. Polling stopped — either run in "
            "webhook mode (platforms.telegram.mode: webhook), or remove the webhook (Bot API deleteWebhook) "
            "if this bot should poll."
        )
    return (
        f"Telegram refused getUpdates with 409 Conflict ({description}): another process is polling this "
        "bot token. Only one process may poll a token; polling stopped here instead of fighting it for "
        "updates — stop the other process, or use webhook mode (platforms.telegram.mode: webhook) to "
        "run several replicas."
    )


class Poller:
    """The getUpdates loop: :meth:`run` until cancelled, or until Telegram makes it stop (reported to ``fail``)."""

    def __init__(self, bot: Bot, read: Reader, intake: Intake, *, timeout: int, limit: int, sleep: Sleep,
                 fail: Callable[[TelegramAdapterError], None]) -> None:
        self.bot = bot
        self.read = read
        self.intake = intake
        self.timeout = timeout
        self.limit = limit
        self.sleep = sleep
        self.fail = fail

    async def run(self) -> None:
        offset: Optional[int] = None
        failures = 0
        while True:
            try:
                updates = await self.bot.get_updates(
                    offset=offset, limit=self.limit, timeout=self.timeout,
                    allowed_updates=ALLOWED_UPDATES, request_timeout=self.timeout + 10,
                )
            except TelegramConflictError as error:
                self.fail(PollingConflict(conflict_explanation(error.message), setting="platforms.telegram.mode"))
                return
            except TelegramUnauthorizedError as error:
                self.fail(TelegramAdapterError(
                    f"Telegram rejected the bot token while polling ({error.message}; was it revoked?) — put the "
                    "current token from @BotFather in platforms.telegram.token or TELEGRAM_BOT_TOKEN and restart",
                    setting="platforms.telegram.token"))
                return
            except TelegramRetryAfter as error:
                await self.sleep(error.retry_after)
                continue
            except Exception as error:  # network, 5xx, anything unexpected: back off and ask again
                failures += 1
                delay = backoff(failures)
                log.warning("telegram: getUpdates failed (%s: %s); retrying in %.1f s", type(error).__name__, error, delay)
                await self.sleep(delay)
                continue
            failures = 0
            for update in updates:
                if not await self._deliver(update):
                    break  # not durable: the next getUpdates asks for this update again
                offset = update.update_id + 1

    async def _deliver(self, update: Update) -> bool:
        """Hand one polled update to the intake; False when it could not be made durable (not acknowledged)."""
        handed = await take_in(update, self.read, self.intake, then="it will be fetched again")
        if handed is not None and not handed.acknowledged:
            await self.sleep(REFETCH_SECONDS)
            return False
        return True
