"""Streamed replies to the browsers of a web chat, whichever gateway process writes them.

A web chat's page is connected to one process, but any process may run that chat's turn (they
share one Redis). So a reply's previews and its final text are published on the chat's Redis
channel (``{prefix}:{web:<id>}:live``) and every process forwards what arrives there to the pages
it holds. One subscription per chat and process, however many tabs show it.

What is published is only ever a view: the reply itself is committed in the session before it
is sent, so a page that missed an event (it was closed, Redis blinked) shows the reply the next
time it loads. Every event names the message it answers, so a repeated event replaces what the
page shows instead of adding to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from agent import json_codec
from gateway.store import ChatKeys
from gateway.store.channel import RedisChannel

log = logging.getLogger(__name__)

#: Events waiting for a slow page; beyond this the oldest are dropped (a later preview or the final supersedes them).
QUEUE_LIMIT = 256
#: Seconds between tries to reach Redis again after the subscription broke.
RECONNECT_SECONDS = 1.0


class LiveHub:
    """Publishes a web chat's reply events and hands them to this process's listeners."""

    def __init__(self, redis: Redis, channel: RedisChannel, prefix: str) -> None:
        self.redis = redis
        self.channel = channel
        self.prefix = prefix
        #: Queues of this process's pages, by the channel they listen to.
        self._listeners: dict[str, set[asyncio.Queue[dict[str, Any]]]] = {}
        self._pubsub: Any = None
        self._reader: asyncio.Task[None] | None = None
        #: One change to the subscription at a time: two pages opening at once must not each connect one.
        self._subscribing = asyncio.Lock()

    def _channel_name(self, chat: str) -> str:
        return ChatKeys(self.prefix, chat).live

    async def publish(self, chat: str, event: dict[str, Any]) -> None:
        """Send ``event`` (a JSON object) to every page showing ``chat``, in any process."""
        await self.channel.call("PUBLISH", self._channel_name(chat), json_codec.dumps_text(event))

    @contextlib.asynccontextmanager
    async def listen(self, chat: str) -> AsyncIterator[asyncio.Queue[dict[str, Any]]]:
        """A queue of ``chat``'s events while the context is open."""
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(QUEUE_LIMIT)
        name = self._channel_name(chat)
        async with self._subscribing:
            listeners = self._listeners.setdefault(name, set())
            if not listeners:
                try:
                    await self._subscribe(name)
                except BaseException:
                    del self._listeners[name]
                    raise
            listeners.add(queue)
        try:
            yield queue
        finally:
            async with self._subscribing:
                listeners.discard(queue)
                if not listeners and self._listeners.get(name) is listeners:
                    del self._listeners[name]
                    with contextlib.suppress(RedisError, OSError):
                        await self._pubsub.unsubscribe(name)

    async def _subscribe(self, name: str) -> None:
        """Subscribe to the channel ``name`` (the caller holds the lock), and make sure someone reads."""
        if self._pubsub is None:
            self._pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        await self._pubsub.subscribe(name)
        if self._reader is None or self._reader.done():
            self._reader = asyncio.create_task(self._read(), name="web-live")

    async def _read(self) -> None:
        """Forward published events to the listeners' queues while anyone listens."""
        while self._listeners:
            try:
                message = await self._pubsub.get_message(timeout=1.0)
            except (RedisError, OSError) as error:  # redis-py subscribes again on its next read
                log.warning("web chat live updates: Redis subscription broke (%s); retrying", error)
                await asyncio.sleep(RECONNECT_SECONDS)
                continue
            if not message or message.get("type") != "message":
                continue
            try:
                event = json_codec.loads(message["data"])
            except ValueError:
                continue
            for queue in self._listeners.get(str(message["channel"]), ()):
                if queue.full():
                    queue.get_nowait()
                queue.put_nowait(event)

    async def aclose(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
        if self._pubsub is not None:
            with contextlib.suppress(RedisError, OSError):
                await self._pubsub.aclose()
