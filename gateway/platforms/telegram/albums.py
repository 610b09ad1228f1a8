"""Albums: the parts of one ``media_group_id`` gathered into one message before it is handed over.

Telegram sends an album as one update per photo or file, sharing a ``media_group_id``, with
nothing that says how many parts there are. The parts are gathered per (chat, group) until
:data:`ALBUM_WINDOW` seconds pass without another, or until another message of the same chat
arrives (the parts come one after another, so the album is complete then, and closing it first
keeps the chat's messages in order). The album is then read as one message carrying the FIRST
part's update id and handed to the intake once; its result is every part's result.

Polling gathers albums here (a webhook hands each part over as it comes, and the turn gathers
them: :mod:`.webhook`). Nothing is acknowledged before it is stored: the poller holds its offset
below an album's parts until the album is stored (:mod:`.polling`). A crash in the window
therefore loses nothing: Telegram offers the parts again and they make the same album, which the
intake recognises by its update id. What this module does not know is whether a redelivered part
belongs to an album that was already stored; the poller keeps that straight itself.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from aiogram.types import Update

from gateway.platforms.intake import HandOver
from gateway.platforms.telegram.updates import media_group, update_chat

#: Seconds after an album's latest part before it is taken as complete.
ALBUM_WINDOW = 1.0

#: Hands the parts of one album (oldest first) to the intake; None when they are not recorded.
Settle = Callable[[list[Update]], Awaitable[HandOver | None]]


class Album:
    """The parts of one album gathered so far, and (once :attr:`task` ends) what became of them."""

    def __init__(self, chat_id: int, settle: Settle, window: float, sealed: Callable[[Album], None]) -> None:
        self.chat_id = chat_id
        self.parts: dict[int, Update] = {}
        self._settle = settle
        self._window = window
        self._sealed = sealed
        self._last = 0.0
        self._close = asyncio.Event()
        self.task: asyncio.Task[HandOver | None] = asyncio.create_task(self._run(), name="telegram-album")

    @property
    def update_ids(self) -> list[int]:
        return sorted(self.parts)

    def add(self, update: Update) -> None:
        """Take one more part (a part offered again is taken once)."""
        self.parts[update.update_id] = update
        self._last = asyncio.get_running_loop().time()

    def close(self) -> None:
        """Take the album as complete now, without waiting out the window."""
        self._close.set()

    @property
    def acknowledged(self) -> bool:
        """Whether the album ended stored (or not to be recorded): its parts may be acknowledged."""
        if not self.task.done() or self.task.cancelled() or self.task.exception() is not None:
            return False
        handed = self.task.result()
        return handed is None or handed.acknowledged

    async def _run(self) -> HandOver | None:
        loop = asyncio.get_running_loop()
        while not self._close.is_set():
            remaining = self._last + self._window - loop.time()
            if remaining <= 0:
                break
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._close.wait()
        self._sealed(self)  # a part arriving from now on starts an album of its own
        return await self._settle([self.parts[update_id] for update_id in self.update_ids])


class Albums:
    """The albums being gathered, one per (chat, media_group_id)."""

    def __init__(self, settle: Settle, *, window: float = ALBUM_WINDOW) -> None:
        self._settle = settle
        self._window = window
        self._open: dict[tuple[int, str], Album] = {}
        #: Every album whose task has not ended, open or being handed over.
        self._live: set[Album] = set()

    def take(self, update: Update) -> Album | None:
        """The album ``update`` is a part of, with the part added; None when it is not an album's part."""
        key = media_group(update)
        if key is None:
            return None
        album = self._open.get(key)
        if album is None:
            album = Album(key[0], self._settle, self._window, sealed=lambda done: self._seal(key, done))
            self._open[key] = album
            self._live.add(album)
            album.task.add_done_callback(lambda _task: self._live.discard(album))
        album.add(update)
        return album

    def _seal(self, key: tuple[int, str], album: Album) -> None:
        if self._open.get(key) is album:
            del self._open[key]

    async def before(self, update: Update) -> bool:
        """Close and hand over the albums of ``update``'s chat that it is not a part of, so the chat's
        messages are stored in order; False when one of them could not be stored."""
        chat, key = update_chat(update), media_group(update)
        earlier = [
            album for album in self._live if album.chat_id == chat and (key is None or self._open.get(key) is not album)
        ]
        for album in earlier:
            album.close()
        await asyncio.gather(*(asyncio.shield(album.task) for album in earlier), return_exceptions=True)
        return all(album.acknowledged for album in earlier)

    @property
    def pending(self) -> bool:
        """Whether an album is being gathered or handed over."""
        return bool(self._live)

    async def aclose(self) -> None:
        """Drop every album not yet handed over (its parts were not acknowledged, so they come again)."""
        for album in list(self._live):
            album.task.cancel()
        await asyncio.gather(*(album.task for album in list(self._live)), return_exceptions=True)
        self._open.clear()
