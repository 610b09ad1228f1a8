"""One process's bound on the bytes it is taking in at once, over every chat.

Each download is held once (``LimitedBuffer``), but a hundred chats sending 20 MB at the same
moment would still hold a hundred of them: the process's memory would follow its busiest minute.
:class:`BytesInFlight` makes an item reserve its size (the size the platform reported, else the
most an item may be) before it is fetched, and give it back once it is stored and read; an item
that does not fit waits for bytes to be given back — it is never refused for it. Waiters are
served in arrival order, so a large item is not passed over again and again by small ones. An
item larger than the whole bound reserves all of it and so goes alone.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator


class BytesInFlight:
    """At most ``limit`` reserved bytes at once; ``held`` now, ``peak`` the most ever held."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"the bound must be at least one byte, got {limit}")
        self.limit = limit
        self.held = 0
        self.peak = 0
        self._waiting: deque[tuple[int, asyncio.Future[None]]] = deque()

    @property
    def waiting(self) -> int:
        """Reservations waiting for bytes to be given back."""
        return sum(1 for _, future in self._waiting if not future.done())

    @contextlib.asynccontextmanager
    async def hold(self, size: int) -> AsyncIterator[int]:
        """Reserve ``size`` bytes (at least one, at most the bound) for the block; yields what was reserved."""
        size = min(max(size, 1), self.limit)
        await self._reserve(size)
        try:
            yield size
        finally:
            self._give_back(size)

    async def _reserve(self, size: int) -> None:
        if not self._waiting and self.held + size <= self.limit:
            self._take(size)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((size, future))
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():  # granted as the wait was cancelled: give it back
                self._give_back(size)
            else:
                future.cancel()
                self._serve()  # it may have been the head that kept smaller ones behind it waiting
            raise

    def _take(self, size: int) -> None:
        self.held += size
        self.peak = max(self.peak, self.held)

    def _give_back(self, size: int) -> None:
        self.held -= size
        self._serve()

    def _serve(self) -> None:
        """Grant the waiting reservations, oldest first, while the oldest fits."""
        while self._waiting:
            size, future = self._waiting[0]
            if future.done():  # cancelled while it waited
                self._waiting.popleft()
                continue
            if self.held + size > self.limit:
                return
            self._waiting.popleft()
            self._take(size)
            future.set_result(None)
