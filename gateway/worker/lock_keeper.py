"""LockKeeper: one task keeps every chat lock this process holds alive, with the chats' leases.

A lock expires ``ttl`` after it was last set, so a turn that runs longer than that would lose
its chat. The keeper extends each held lock every ``ttl / 3`` (and pushes the chat's lease in
the ready set just as far), all of them in one pass: on the pipelined channel the extensions
of one pass leave in one write, and holding a chat costs no task or timer of its own.

A failed extension is retried on the next pass. The turn that holds a lock is cancelled only
when the lock is known lost, or when no extension has succeeded for a whole ``ttl`` (it could
have expired, and a worker elsewhere may already have taken the chat).

A lease is only ever pushed on, never created (``Inbox.extend_lease``): an extension still on
its way never marks again a chat its worker has unmarked to release it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from agent.cancelling import cancel_and_wait
from gateway.outage import Health, is_redis_outage
from gateway.store import Lock, SessionStore, StaleLock
from gateway.store.inbox import Inbox

log = logging.getLogger(__name__)


@dataclass
class _Hold:
    owner: asyncio.Task[None]
    extended: float  # the keeper's clock at the acquisition or at the last extension that succeeded


class LockKeeper:
    """Extends the chat locks held in this process until they are let go."""

    def __init__(
        self,
        store: SessionStore,
        inbox: Inbox,
        ttl_seconds: float,
        redis_health: Health | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """``clock`` and ``sleep`` pace the passes and judge how long extensions have failed: a test that holds
        them decides when a pass runs and how much time it saw pass."""
        self.store = store
        self.inbox = inbox
        self.ttl = ttl_seconds
        #: Where a Redis outage is reported (once for all of it); without one each failure is logged.
        self.redis_health = redis_health
        self.clock = clock
        self.sleep = sleep
        self._held: dict[Lock, _Hold] = {}
        self._task: asyncio.Task[None] | None = None

    def hold(self, lock: Lock, owner: asyncio.Task[None]) -> None:
        """Keep ``lock`` (just acquired) alive; ``owner`` is cancelled if it is lost."""
        self._held[lock] = _Hold(owner, self.clock())
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="lock-keeper")

    def let_go(self, lock: Lock) -> None:
        """Stop extending ``lock`` (released, or given up)."""
        self._held.pop(lock, None)

    @property
    def held(self) -> int:
        return len(self._held)

    async def close(self) -> None:
        """Stop keeping what is held now (a lock held after this starts the keeper again)."""
        task, self._task = self._task, None
        self._held.clear()
        if task is not None:
            await cancel_and_wait(task)

    async def _run(self) -> None:
        while self._held:
            await self.sleep(self.ttl / 3)
            await asyncio.gather(*(self._extend(lock, hold) for lock, hold in list(self._held.items())))

    async def _extend(self, lock: Lock, hold: _Hold) -> None:
        try:
            await self.store.extend_lock(lock, self.ttl)
            hold.extended = self.clock()  # the lock is safe for a ttl, whatever the lease does
            if lock not in self._held:
                return  # let go meanwhile: nothing to lease
            await self.inbox.extend_lease(lock.chat, self.ttl)
            return
        except StaleLock:
            if lock in self._held:
                log.warning("%s: lock lost mid-turn; abandoning the turn", lock.chat)
                self._abandon(lock, hold)
        except Exception as error:
            if lock not in self._held:
                return  # let go while the extension was on its way: nothing to keep
            health = self.redis_health if is_redis_outage(error) else None
            outage = health is not None
            if health is not None:
                health.failed(error, lock.chat)
            if self.clock() - hold.extended >= self.ttl:
                log.warning(
                    "%s: could not extend the lock for a whole ttl; abandoning the turn", lock.chat, exc_info=not outage
                )
                self._abandon(lock, hold)
            elif not outage:
                log.warning("%s: extending the lock failed; retrying", lock.chat, exc_info=True)

    def _abandon(self, lock: Lock, hold: _Hold) -> None:
        self._held.pop(lock, None)
        hold.owner.cancel()
