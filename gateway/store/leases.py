"""Leases: one process of the cluster at a time does what only one may (poll a Telegram bot token).

A lease is one key holding its holder's id with an expiry::

    {prefix}:lease:<what>    string  holder id, PX = the lease's span

:class:`Lease` takes it with ``SET NX PX``, renews it every :attr:`~Lease.renew_every` seconds
(:data:`~gateway.store.scripts.LEASE_RENEW`, only while it still holds it) and gives it up on close
(:data:`~gateway.store.scripts.LEASE_RELEASE`). Timing: the holder counts itself the holder only until
``span - margin`` seconds after the last renewal it *sent* was granted, so it has stopped before Redis lets the
key expire and another process can take it; a holder that dies without giving it up is replaced within
``span`` plus one try of the others (``renew_every``) — about six seconds with the defaults. A Redis that
does not answer ends the holding at the same local deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid

from redis.exceptions import RedisError

from gateway.store import scripts
from gateway.store.channel import RedisChannel
from gateway.store.keys import check_key_part

log = logging.getLogger(__name__)

#: Seconds a lease lasts without renewal.
LEASE_SECONDS = 5.0
#: Seconds between two renewals (or, without the lease, two tries to take it).
RENEW_SECONDS = 1.0
#: Seconds before the lease's expiry at which its holder stops counting on it.
MARGIN_SECONDS = 1.5


def lease_key(prefix: str, what: str) -> str:
    return f"{check_key_part('prefix', prefix)}:lease:{check_key_part('what', what)}"


class Lease:
    """One lease kept by a background task: :attr:`held` is set while this process holds it, :attr:`free`
    while it does not; exactly one of the two is set at any time."""

    def __init__(
        self,
        channel: RedisChannel,
        prefix: str,
        what: str,
        *,
        span: float = LEASE_SECONDS,
        renew_every: float = RENEW_SECONDS,
        margin: float = MARGIN_SECONDS,
    ) -> None:
        self.channel = channel
        self.key = lease_key(prefix, what)
        self.what = what
        #: Who holds it, as the key shows it: this machine, this process, and which of its leases.
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.span = span
        self.renew_every = renew_every
        self.margin = min(margin, span / 2)
        self.held = asyncio.Event()
        self.free = asyncio.Event()
        self.free.set()
        self._valid_until = 0.0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._keep(), name=f"lease-{self.what}")

    async def close(self) -> None:
        """Stop keeping the lease and give it up, so another process takes it over at once."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._lose()
        # even when this process stopped counting on it, the key may still be its own: give it up (the script
        # checks the holder), without waiting on a Redis that does not answer
        with contextlib.suppress(RedisError, OSError, TimeoutError):
            async with asyncio.timeout(self.renew_every):
                await scripts.LEASE_RELEASE.run(self.channel, [self.key], [self.holder])

    async def wait_held(self) -> None:
        await self.held.wait()

    async def wait_lost(self) -> None:
        await self.free.wait()

    async def _keep(self) -> None:
        while True:
            sent = time.monotonic()
            wait = (
                self.renew_every
                if not self.held.is_set()
                else min(self.renew_every, max(0.01, self._valid_until - sent))
            )
            try:  # a Redis that hangs must not keep this process counting on a lease past its deadline
                async with asyncio.timeout(wait):
                    granted = await self._ask()
            except (RedisError, OSError, TimeoutError) as error:
                log.warning("lease %s: Redis did not answer (%s)", self.what, error or "timed out")
                granted = None
            if granted:
                self._valid_until = sent + self.span - self.margin
                if not self.held.is_set():
                    log.info("lease %s: taken", self.what)
                    self.free.clear()
                    self.held.set()
            elif granted is not None and self.held.is_set():
                log.warning("lease %s: lost to another process", self.what)
                self._lose()
            if self.held.is_set() and time.monotonic() >= self._valid_until:
                log.warning("lease %s: not renewed in time; stopping", self.what)
                self._lose()
            await self._sleep_within_deadline()

    async def _ask(self) -> object:
        """Renew the lease, or take it when free: truthy when this process holds it now. A key that is still
        this process's (its holding ended at the local deadline, or a take's reply was lost) is renewed."""
        if await scripts.LEASE_RENEW.run(self.channel, [self.key], [self.holder, self._millis]):
            return True
        return await self.channel.call("SET", self.key, self.holder, "NX", "PX", self._millis)

    async def _sleep_within_deadline(self) -> None:
        """Sleep until the next renewal, waking at the local deadline to stop counting on a lease not renewed."""
        if not self.held.is_set():
            await asyncio.sleep(self.renew_every)
            return
        until_deadline = self._valid_until - time.monotonic()
        if until_deadline <= self.renew_every:
            await asyncio.sleep(max(0.0, until_deadline))
            if time.monotonic() >= self._valid_until and self.held.is_set():
                log.warning("lease %s: not renewed in time; stopping", self.what)
                self._lose()
            return
        await asyncio.sleep(self.renew_every)

    def _lose(self) -> None:
        self.held.clear()
        self.free.set()

    @property
    def _millis(self) -> int:
        return int(self.span * 1000)
