"""Replies on their way out: each chat's reply stream and the delivery of a reply's final text and files.

A reply goes through its platform's reply surface, paced by the send budget every process
shares and recorded chunk by chunk in the reply's journal, so a resend after a crash posts
only what the platform had not yet accepted. The images and files a turn made for the person
follow the text, read from the chat's media store, each recorded in the same journal once the
platform took it (``item:<n>``), so a resend does not post them twice either. A reply the
platform keeps refusing is given up after a few tries: one chat whose user blocked the bot must
not hold up its inbox.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from agent.retrying import REPLY_DELIVERY, Sleep, retried
from gateway.delivery.stream import ReplyStream
from gateway.outage import Health, is_redis_outage
from gateway.platforms.base import IncomingMessage, OutgoingFile, PlatformAdapter, SendGate
from gateway.store import Lock, SessionStore
from gateway.store.journal import ReplyJournal
from gateway.store.media import MediaStore

log = logging.getLogger(__name__)


class Replies:
    """Opens reply streams and delivers final texts; remembers each chat's open stream so a failed turn's
    previews can be stopped."""

    def __init__(
        self,
        store: SessionStore,
        adapters: Mapping[str, PlatformAdapter],
        gates: Callable[[IncomingMessage], SendGate],
        redis_health: Health,
        media: MediaStore | None = None,
        sleep: Sleep | None = None,
    ) -> None:
        """``sleep`` waits between a reply's attempts (``asyncio.sleep`` when None; a test's recorder)."""
        self.store = store
        self.adapters = adapters
        self.gates = gates
        self.redis_health = redis_health
        #: Where the files a turn made for the person are read from; None: files are not sent.
        self.media = media
        self.sleep = sleep
        self._open: dict[str, ReplyStream] = {}

    def stream(self, message: IncomingMessage, lock: Lock, *, previews: bool) -> ReplyStream | None:
        """The reply's stream on its platform's surface; None where the platform sends replies whole."""
        adapter = self.adapters.get(message.platform)
        if adapter is None:
            return None
        journal = self.journal(message, lock)
        surface = adapter.reply_surface(
            message.chat_id, self.gates(message), reply_to=message.update_id, journal=journal
        )
        if surface is None:
            return None
        stream = ReplyStream(surface, previews=previews)
        self._open[message.chat] = stream
        return stream

    def closed(self, chat: str) -> None:
        """The chat's turn is over: its stream (if any) is the caller's to finish."""
        self._open.pop(chat, None)

    def abandon(self, chat: str) -> None:
        """The chat's turn failed: its previews stop; a retry streams anew."""
        stream = self._open.pop(chat, None)
        if stream is not None:
            stream.abandon()

    def journal(self, message: IncomingMessage, lock: Lock) -> ReplyJournal:
        """The journal of the reply to ``message``."""
        return ReplyJournal(self.store.channel, self.store.prefix, lock, message.entry_id)

    async def deliver(
        self,
        message: IncomingMessage,
        text: str,
        stream: ReplyStream | None = None,
        *,
        items: Sequence[Mapping[str, Any]] = (),
        lock: Lock | None = None,
    ) -> None:
        """Send a reply (through the stream that previewed it, when there is one) and then its ``items``,
        retrying transient failures; a reply the platform keeps refusing (the user blocked the bot, the channel
        is gone) is logged and given up so the chat is not blocked. ``lock`` journals the items (a resend after
        a crash sends only those not yet sent)."""
        adapter = self.adapters.get(message.platform)
        if adapter is None:
            log.warning("no adapter for platform %s; reply to %s dropped", message.platform, message.chat)
            return
        if stream is not None:  # also without text: its previews end (a tool's status line is taken down)
            await self._attempts(message, "a reply", lambda: stream.finish(text))  # picks up where one stopped
        elif text or not items:
            await self._attempts(
                message, "a reply", lambda: adapter.send(message.chat_id, text, reply_to=message.update_id)
            )
        if items:
            await self._files(adapter, message, items, self.journal(message, lock) if lock is not None else None)

    async def _files(
        self,
        adapter: PlatformAdapter,
        message: IncomingMessage,
        items: Sequence[Mapping[str, Any]],
        journal: ReplyJournal | None,
    ) -> None:
        """Each item not yet recorded as sent, tried on its own (one the platform refuses for good does not keep
        the others back): read from the store, paced by the send budget, recorded once sent."""
        done = await journal.load() if journal is not None else {}
        for index, ref in enumerate(items):
            mark = f"item:{index}"
            if mark not in done:
                name = str(ref.get("name") or ref.get("kind") or "file")
                await self._attempts(
                    message,
                    f"the file {name!r}",
                    lambda ref=ref, mark=mark: self._file(adapter, message, ref, journal, mark),
                )

    async def _file(
        self,
        adapter: PlatformAdapter,
        message: IncomingMessage,
        ref: Mapping[str, Any],
        journal: ReplyJournal | None,
        mark: str,
    ) -> None:
        found = await self.media.get(message.chat, str(ref.get("sha") or "")) if self.media is not None else None
        await self.gates(message).await_final()
        name, kind = str(ref.get("name") or ""), ref.get("kind") or "document"
        if found is None:
            log.warning(
                "%s: %s %r made for the reply is no longer stored; its line is sent instead", message.chat, kind, name
            )
            await adapter.send(
                message.chat_id,
                f"[{kind}: {name or kind}, no longer kept; ask again for it]",
                reply_to=message.update_id,
            )
        else:
            data, mime = found
            await adapter.send_file(message.chat_id, OutgoingFile(kind, data, name, mime), reply_to=message.update_id)
        if journal is not None:
            await journal.record({mark: "sent"})

    async def _attempts(self, message: IncomingMessage, what: str, send: Callable[[], Awaitable[None]]) -> bool:
        """``send`` tried under :data:`~agent.retrying.REPLY_DELIVERY`; False when it was given up."""

        async def before_retry(error: Exception, retry: int, wait: float) -> None:
            if self._noted(message, error):
                return  # Redis is away: the health line says so once, not once per retry
            log.warning("%s: sending %s failed (attempt %d); retrying", message.chat, what, retry, exc_info=error)

        try:
            await retried(REPLY_DELIVERY, send, before_retry=before_retry, sleep=self.sleep)
        except Exception as error:
            outage = self._noted(message, error)
            log.warning(
                "%s: %s to update %s could not be delivered; giving it up",
                message.chat,
                what,
                message.update_id,
                exc_info=error if not outage else None,
            )
            return False
        return True

    def _noted(self, message: IncomingMessage, error: Exception) -> bool:
        """Whether ``error`` means Redis is away (the send budget and the journal live there); noted if so."""
        if is_redis_outage(error):
            self.redis_health.failed(error, message.chat)
            return True
        return False
