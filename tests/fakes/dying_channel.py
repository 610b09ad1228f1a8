"""A gateway process that dies at a chosen step of a compaction's commit: its channel to Redis counts the commands
it sends from the compaction commit's script on, and before sending the one after the chosen number it dies — a
real SIGKILL in a worker process (:mod:`tests.fakes.worker_process`), so nothing of the process runs after it.
Every Redis script is all or nothing, so the moments between two commands are every moment a kill can leave."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from gateway.store.channel import RedisChannel
from gateway.store.scripts import COMMIT


class DiesAfter:
    """``inner``, until ``steps`` commands of the commit were sent (None: never); then ``die()``. ``counted`` is
    told each count, for a run that only measures how many commands the path sends."""

    def __init__(
        self,
        inner: RedisChannel,
        steps: int | None,
        die: Callable[[], None],
        counted: Callable[[int], Awaitable[None]] | None = None,
    ) -> None:
        self.inner, self.steps, self.die, self.counted = inner, steps, die, counted
        self.sent: int | None = None  # commands since the commit began (None: it has not)

    async def _step(self, command: Sequence[Any]) -> None:
        if self.sent is None and command[0] == "EVALSHA" and command[1] == COMMIT.sha:
            self.sent = 0
        if self.sent is None:
            return
        if self.steps is not None and self.sent >= self.steps:
            self.die()
        self.sent += 1
        if self.counted is not None:
            await self.counted(self.sent)

    async def call(self, *args: Any) -> Any:
        await self._step(args)
        return await self.inner.call(*args)

    async def call_in_order(self, *commands: Any) -> list[Any]:
        results = []
        for command in commands:
            await self._step(command)
            results.append(await self.inner.call(*command))
        return results

    async def aclose(self) -> None:
        await self.inner.aclose()
