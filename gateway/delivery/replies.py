"""Replies on their way out: each chat's reply stream and the delivery of a reply's final text.

A reply goes through its platform's reply surface, paced by the send budget every process
shares and recorded chunk by chunk in the reply's journal, so a resend after a crash posts
only what the platform had not yet accepted. A reply the platform keeps refusing is given up
after a few tries: one chat whose user blocked the bot must not hold up its inbox.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from gateway.delivery.stream import ReplyStream
from gateway.outage import Health, is_redis_outage
from gateway.platforms.base import IncomingMessage, PlatformAdapter, SendGate
from gateway.store import Lock, SessionStore
from gateway.store.journal import ReplyJournal

log = logging.getLogger(__name__)

#: Attempts at delivering one reply before it is given up (the platform refuses it for good).
SEND_ATTEMPTS = 3
#: Seconds before the second attempt; the wait grows by this much per attempt.
RETRY_DELAY_SECONDS = 1.0


class Replies:
    """Opens reply streams and delivers final texts; remembers each chat's open stream so a failed turn's
    previews can be stopped."""

    def __init__(self, store: SessionStore, adapters: Mapping[str, PlatformAdapter],
                 gates: Callable[[IncomingMessage], SendGate], redis_health: Health) -> None:
        self.store = store
        self.adapters = adapters
        self.gates = gates
        self.redis_health = redis_health
        self._open: dict[str, ReplyStream] = {}

    def stream(self, message: IncomingMessage, lock: Lock, *, previews: bool) -> ReplyStream | None:
        """The reply's stream on its platform's surface; None where the platform sends replies whole."""
        adapter = self.adapters.get(message.platform)
        if adapter is None:
            return None
        journal = ReplyJournal(self.store.channel, self.store.prefix, lock, message.entry_id)
        surface = adapter.reply_surface(message.chat_id, self.gates(message), reply_to=message.update_id,
                                        journal=journal)
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

    async def deliver(self, message: IncomingMessage, text: str, stream: ReplyStream | None = None) -> None:
        """Send a reply (through the stream that previewed it, when there is one), retrying transient
        failures; a reply the platform keeps refusing (the user blocked the bot, the channel is gone)
        is logged and given up so the chat is not blocked."""
        adapter = self.adapters.get(message.platform)
        if adapter is None:
            log.warning("no adapter for platform %s; reply to %s dropped", message.platform, message.chat)
            return
        for attempt in range(1, SEND_ATTEMPTS + 1):
            try:
                if stream is not None:
                    await stream.finish(text)  # picks up where a failed attempt stopped
                else:
                    await adapter.send(message.chat_id, text, reply_to=message.update_id)
                return
            except asyncio.CancelledError:
                raise
            except Exception as error:
                outage = is_redis_outage(error)  # the send budget and the journal live in Redis
                if outage:
                    self.redis_health.failed(error, message.chat)
                if attempt == SEND_ATTEMPTS:
                    log.warning("%s: reply to update %s could not be delivered; giving it up",
                                message.chat, message.update_id, exc_info=not outage)
                    return
                if not outage:
                    log.warning("%s: sending a reply failed (attempt %d); retrying", message.chat, attempt,
                                exc_info=True)
                await asyncio.sleep(RETRY_DELAY_SECONDS * attempt)
