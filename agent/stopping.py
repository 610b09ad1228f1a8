"""How a person stops a turn: the exception that ends it, and a wait that the stop cuts short.

A turn waits on a provider, a tool or a summarizer; a stop must end that wait even when the
thing waited on sends nothing at all (a hung request gives the turn's watcher no event to end it
on). :func:`unless_stopped` races the work against the stop and cancels whichever loses.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from agent.cancelling import cancel_and_wait

log = logging.getLogger(__name__)


class TurnStopped(Exception):
    """Raised by a turn's watcher to end the turn now (the person sent ``/stop``).

    ``text`` is what the person has seen of the reply so far; it becomes the reply.
    """

    def __init__(self, text: str = "") -> None:
        super().__init__("the turn was stopped")
        self.text = text


#: Returns once the person stops the turn, with the :class:`TurnStopped` to end it with (it may wait forever).
StopWaiter = Callable[[], Awaitable[TurnStopped]]
T = TypeVar("T")


async def unless_stopped(work: Awaitable[T], until_stopped: StopWaiter) -> T:
    """``work``'s result, unless the person stops the turn first: then ``work`` is cancelled and the stop raised.

    A provider that accepts a request and sends nothing gives the turn's watcher no event to end
    it on; this ends the wait itself. Cancelling an HTTP request closes its connection, so the
    client's pool stays usable. A stop the watcher already knows wins before ``work`` begins, so a turn
    stopped before its first request sends none.
    """
    watcher = asyncio.ensure_future(until_stopped())
    try:
        await asyncio.sleep(0)
    except BaseException:
        _close(work)
        await cancel_and_wait(watcher)
        raise
    if watcher.done() and not watcher.cancelled() and watcher.exception() is None:
        _close(work)
        raise watcher.result()
    job = asyncio.ensure_future(work)
    try:
        await asyncio.wait((job, watcher), return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # cancelled from outside (the gateway shuts down): take both along
        await cancel_and_wait(job, watcher)
        raise
    if watcher.done() and not watcher.cancelled() and watcher.exception() is None:
        await cancel_and_wait(job)  # the stop won, even over an answer that came at the same moment: it was honoured
        raise watcher.result()
    if watcher.done() and not watcher.cancelled():
        log.warning("watching for a stop failed; the turn goes on without it: %r", watcher.exception())
    await cancel_and_wait(watcher)  # a watcher that lost the request (mid Redis command) is asked again
    return await job


def _close(work: Awaitable[Any]) -> None:
    """Let go of work that never started (a coroutine left unawaited would be reported as a leak)."""
    if asyncio.iscoroutine(work):
        work.close()
