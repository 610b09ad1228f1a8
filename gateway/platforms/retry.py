"""The one retry policy for a final send, on every platform, whether the reply streamed or was sent whole.

A final message must arrive, so a send is tried again:

- after a 429 (:class:`~gateway.platforms.base.PlatformRateLimited`), as often as the platform asks,
  once ``pause`` has waited out its ``retry_after`` — a plain sleep for a reply sent whole, the shared
  send budget for a streamed one (so every process holds back);
- after a transient failure (the network, a 5xx), up to ``retries`` times with a growing backoff — for a
  reply sent whole; a streamed reply's final messages take none here (``retries=0``): the delivery's own
  attempts finish it again from where it stopped, each send drawing from the send budget first;
- anything else is a refusal and raised to the caller at once.

A group upgraded to a supergroup is followed below this policy, by the platform (one call at the
new id, see :mod:`gateway.platforms.telegram.moves`): it is not a failure, so it costs no retry.
Previews never use this policy: a preview that fails is dropped, the next frame carries its text.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from gateway.platforms.base import PlatformRateLimited, SendGate

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]
#: Waits out a platform's 429 (its ``retry_after`` in seconds) before the same send is tried again.
Pause = Callable[[float], Awaitable[None]]


def _described(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


@dataclass(frozen=True)
class SendRetry:
    """How one platform's final sends are tried again (see the module docstring).

    ``transient`` says which failures are worth another attempt; ``backoff(n)`` is the wait before
    retry ``n`` (from 1); ``describe`` words an error for the log line of each retry.
    """

    log: logging.Logger
    transient: Callable[[BaseException], bool]
    retries: int
    backoff: Callable[[int], float]
    sleep: Sleep = asyncio.sleep
    describe: Callable[[BaseException], str] = _described

    async def run(
        self,
        attempt: Callable[[], Awaitable[T]],
        what: str,
        *,
        pause: Pause | None = None,
        retries: int | None = None,
    ) -> T:
        """``attempt()`` until it succeeds or is refused; ``what`` names it in the log (``"telegram: sendMessage
        to 42"``). Without ``pause`` a 429 is raised (the platform's client waits those out itself)."""
        limit = self.retries if retries is None else retries
        failures = 0
        while True:
            try:
                return await attempt()
            except PlatformRateLimited as limited:
                if pause is None:
                    raise
                await pause(limited.retry_after)
            except Exception as error:
                if not self.transient(error):
                    raise
                failures += 1
                if failures > limit:
                    raise
                delay = self.backoff(failures)
                self.log.warning("%s failed (%s); retry %d in %.1f s", what, self.describe(error), failures, delay)
                await self.sleep(delay)


def doubling(first: float, most: float = float("inf")) -> Callable[[int], float]:
    """A backoff that waits ``first`` seconds before the first retry and twice as long before each next one,
    never more than ``most``."""
    return lambda failures: min(most, first * 2 ** (failures - 1))


def budget_pause(gate: SendGate) -> Pause:
    """A streamed reply's pause after a 429: the shared budget holds every process back for ``retry_after``,
    then the final send waits its turn in the budget again."""

    async def pause(retry_after: float) -> None:
        await gate.rate_limited(retry_after)
        await gate.await_final()

    return pause
