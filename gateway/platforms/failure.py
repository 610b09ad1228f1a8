"""Why an adapter stopped receiving on its own (a second poller, a revoked token, a refused connection).

The adapter records the failure once, with one error line; the app waits for it
(:meth:`gateway.platforms.base.PlatformAdapter.failed`) to report it and exit.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Generic, TypeVar

E = TypeVar("E", bound=Exception)


class Failure(Generic[E]):
    """One adapter's failure: None while it is healthy, set once when it stops on its own."""

    def __init__(self, log: logging.Logger, name: str) -> None:
        self.log = log
        self.name = name
        self.error: E | None = None
        self._happened = asyncio.Event()

    def clear(self) -> None:
        """A new start: healthy again."""
        self.error = None
        self._happened.clear()

    def record(self, error: E) -> None:
        """The adapter stopped receiving because of ``error``: logged, and whoever waits learns it."""
        self.log.error("%s: %s", self.name, error)
        self.error = error
        self._happened.set()

    async def wait(self) -> E:
        """Wait until the adapter fails, and return why."""
        await self._happened.wait()
        assert self.error is not None
        return self.error
