"""Telegram updates by long polling (one process per bot token).

``getUpdates`` with an offset. Each update is handed to the gateway's intake — which makes it
durable in Redis — BEFORE the next offset is requested, and the offset is what acknowledges
updates to Telegram, so nothing is acknowledged before it is safe. When the intake fails, the same
offset is asked for again; the intake deduplicates by update id, so what was already stored is not
stored twice. A batch foldgate cannot read (:mod:`.answers`) is one log line naming the setting, and
the same offset is asked for again after a backoff, so its updates are neither lost nor acknowledged
unread. A ``409 Conflict`` means another process polls the same token (or a webhook is set):
the poller reports what that means and how to fix it, and stops rather than fight the other
process for updates.

An album's parts (:mod:`.albums`) are gathered for a moment before they are handed over as one
message. Until it is stored, the offset stays at its first part: later updates are handed over
meanwhile (and not again when the held offset brings them back), but a crash before the album is
stored has Telegram offer every part again. While an album is gathered, getUpdates waits at most
a second, so the album is not held up by a long poll.

With a :class:`~gateway.platforms.base.ReceivingTurn` (several processes serving one token), the poller
asks for updates only while its process holds the turn: a request still waiting when the turn is lost is
cancelled (its updates, unacknowledged, go to the next holder). The holder stops before its lease can pass
to another process, so a 409 still means a poller outside the cluster, and stops polling as above.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiogram import Bot
from aiogram.exceptions import TelegramConflictError, TelegramRetryAfter, TelegramUnauthorizedError
from aiogram.types import Update

from gateway.platforms.base import Intake, ReceivingTurn
from gateway.platforms.intake import HandOver
from gateway.platforms.retry import Sleep
from gateway.platforms.telegram.albums import ALBUM_WINDOW, Album, Albums
from gateway.platforms.telegram.answers import UnreadableAnswer
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

    def __init__(
        self,
        bot: Bot,
        read: Reader,
        intake: Intake,
        *,
        timeout: int,
        limit: int,
        sleep: Sleep,
        fail: Callable[[TelegramAdapterError], None],
        album_window: float = ALBUM_WINDOW,
        turn: ReceivingTurn | None = None,
    ) -> None:
        self.bot = bot
        self.read = read
        self.intake = intake
        self.timeout = timeout
        self.limit = limit
        self.sleep = sleep
        self.fail = fail
        self.album_window = album_window
        self.turn = turn

    async def run(self) -> None:
        albums = Albums(self._settle, window=self.album_window)
        try:
            await self._poll(albums)
        finally:
            await albums.aclose()

    async def _poll(self, albums: Albums) -> None:
        offset: int | None = None
        failures = 0
        ledger = Acknowledgements()
        while True:
            try:
                updates = await self._fetch(offset, min(self.timeout, 1) if ledger.gathering else self.timeout)
            except TelegramConflictError as error:
                self.fail(PollingConflict(conflict_explanation(error.message), setting="platforms.telegram.mode"))
                return
            except TelegramUnauthorizedError as error:
                self.fail(
                    TelegramAdapterError(
                        f"Telegram rejected the bot token while polling ({error.message}; was it revoked?) — put the "
                        "current token from @BotFather in platforms.telegram.token or TELEGRAM_BOT_TOKEN and restart",
                        setting="platforms.telegram.token",
                    )
                )
                return
            except TelegramRetryAfter as error:
                await self.sleep(error.retry_after)
                continue
            except Exception as error:  # network, 5xx, an unreadable batch, anything unexpected: back off, ask again
                failures += 1
                delay = backoff(failures)
                if isinstance(error, UnreadableAnswer):  # nothing was acknowledged: the same updates come again
                    log.warning("telegram: %s; asking for the same updates again in %.1f s", error, delay)
                else:
                    log.warning(
                        "telegram: getUpdates failed (%s: %s); retrying in %.1f s", type(error).__name__, error, delay
                    )
                await self.sleep(delay)
                continue
            failures = 0
            if updates is None:
                continue  # another process polls now; the offset stays, and the updates wait for it
            for update in updates:
                if ledger.taken(update.update_id):
                    continue  # handed over, or gathered into an album, before the held offset brought it back
                if not await self._deliver(update, albums, ledger):
                    break  # not durable: the next getUpdates asks for this update again
            if not ledger.settle():
                await self.sleep(REFETCH_SECONDS)  # an album was not stored: its parts are asked for again
            offset = ledger.offset(offset)

    async def _fetch(self, offset: int | None, timeout: int) -> list[Update] | None:
        """One getUpdates; with a turn, once it is held, and None when the turn is lost while it waits."""

        def request() -> Awaitable[list[Update]]:
            return self.bot.get_updates(
                offset=offset,
                limit=self.limit,
                timeout=timeout,
                allowed_updates=ALLOWED_UPDATES,
                request_timeout=self.timeout + 10,
            )

        if self.turn is None:
            return await request()
        await self.turn.wait_held()
        asking = asyncio.ensure_future(request())
        lost = asyncio.ensure_future(self.turn.wait_lost())
        try:
            await asyncio.wait((asking, lost), return_when=asyncio.FIRST_COMPLETED)
        finally:
            lost.cancel()
            if not asking.done():
                asking.cancel()
                try:
                    await asking
                except asyncio.CancelledError:
                    current = asyncio.current_task()
                    if current is not None and current.cancelling():
                        raise  # the poller itself is being stopped, not just its request
                except Exception:  # what the cancelled request ended with does not matter now
                    pass
        if lost.done() and not lost.cancelled() or asking.cancelled():
            log.info("telegram: another process polls this token now")
            return None  # a 409 from the moment of the handover is the other poller's doing, not an outsider's
        return asking.result()

    async def _deliver(self, update: Update, albums: Albums, ledger: Acknowledgements) -> bool:
        """Hand one polled update to the intake, or gather it into its album; False when it (or an album
        of its chat before it) could not be made durable (not acknowledged)."""
        if not await albums.before(update):
            return False
        album = albums.take(update)
        if album is not None:
            ledger.gather(update.update_id, album)
            return True
        handed = await take_in((update,), self.read, self.intake, then="it will be fetched again")
        if handed is not None and not handed.acknowledged:
            await self.sleep(REFETCH_SECONDS)
            return False
        ledger.acknowledge(update.update_id)
        return True

    async def _settle(self, updates: list[Update]) -> HandOver | None:
        return await take_in(updates, self.read, self.intake, then="it will be fetched again")


class Acknowledgements:
    """Which polled updates are acknowledged, and so the offset to ask for next.

    An update is acknowledged once handed over (stored, a duplicate, skipped, or not recorded), an
    album's parts once the album is. The offset stays at the lowest part of an album not yet stored.
    """

    def __init__(self) -> None:
        self._acknowledged: set[int] = set()
        #: Albums gathering or being handed over, by the update ids of their parts.
        self._albums: dict[int, Album] = {}
        #: Parts of albums that were not stored: asked for again, gathered again.
        self._again: set[int] = set()

    @property
    def gathering(self) -> bool:
        return bool(self._albums)

    def taken(self, update_id: int) -> bool:
        """Whether ``update_id`` is acknowledged or gathered already (an update the held offset brought back)."""
        return update_id in self._acknowledged or update_id in self._albums

    def acknowledge(self, update_id: int) -> None:
        self._acknowledged.add(update_id)

    def gather(self, update_id: int, album: Album) -> None:
        self._albums[update_id] = album
        self._again.discard(update_id)

    def settle(self) -> bool:
        """Take in the outcome of every album handed over; False when one of them was not stored."""
        stored = True
        for update_id, album in list(self._albums.items()):
            if not album.task.done():
                continue
            del self._albums[update_id]
            if album.acknowledged:
                self._acknowledged.add(update_id)
            else:
                self._again.add(update_id)
                stored = False
        return stored

    def offset(self, current: int | None) -> int | None:
        """The offset for the next getUpdates: past every acknowledged update, never past one that is not."""
        held = self._again | set(self._albums)
        if held:
            offset = min(held)
        elif self._acknowledged:
            offset = max(self._acknowledged) + 1
        else:
            return current
        self._acknowledged = {update_id for update_id in self._acknowledged if update_id >= offset}
        return offset
