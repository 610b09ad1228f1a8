"""The one retry policy for a final send, on every platform, whether the reply streamed or was sent whole.

The loop is :func:`agent.retrying.retried`; what is particular to a send is its hooks, here.

A final message must arrive, so a send is tried again:

- after a 429 (:class:`~gateway.platforms.base.PlatformRateLimited`), as often as the platform asks,
  once ``pause`` has waited out its ``retry_after`` — a plain sleep for a reply sent whole, the shared
  send budget for a streamed one (so every process holds back);
- after a transient failure (the network, a 5xx), as often and after the waits the platform's named
  policy says (:data:`agent.retrying.BOT_API_CALL`, :data:`agent.retrying.DISCORD_SEND`) — for a reply
  sent whole; a streamed reply's final messages take none here (``retries=0``): the delivery's own
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

from agent.retrying import Policy, Sleep, retried
from gateway.platforms.base import PlatformRateLimited, SendGate

T = TypeVar("T")
#: Waits out a platform's 429 (its ``retry_after`` in seconds) before the same send is tried again.
Pause = Callable[[float], Awaitable[None]]


def _described(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def rate_limit_wait(error: BaseException) -> float | None:
    """The ``server_wait`` hook of a send: the pause a platform's 429 asks for."""
    return error.retry_after if isinstance(error, PlatformRateLimited) else None


@dataclass(frozen=True)
class SendRetry:
    """How one platform's final sends are tried again (see the module docstring).

    ``transient`` says which failures are worth another attempt; ``policy`` (the platform's named policy in
    :mod:`agent.retrying`, whose server waits are free) counts the attempts and spaces them; ``describe``
    words an error for the log line of each retry.
    """

    log: logging.Logger
    transient: Callable[[BaseException], bool]
    policy: Policy
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
        to 42"``). Without ``pause`` a 429 is raised (the platform's client waits those out itself); ``retries``
        overrides the policy's count of retries after a transient failure."""
        policy = self.policy if retries is None else self.policy.adjusted(attempts=retries + 1)

        def retryable(error: BaseException) -> bool:
            if isinstance(error, PlatformRateLimited):
                return pause is not None
            return self.transient(error)

        async def before_retry(error: Exception, retry: int, delay: float) -> None:
            self.log.warning("%s failed (%s); retry %d in %.1f s", what, self.describe(error), retry, delay)

        return await retried(
            policy,
            attempt,
            retryable=retryable,
            server_wait=rate_limit_wait,
            before_retry=before_retry,
            sleep=self.sleep,
            pause=pause,
        )


def budget_pause(gate: SendGate) -> Pause:
    """A streamed reply's pause after a 429: the shared budget holds every process back for ``retry_after``,
    then the final send waits its turn in the budget again."""

    async def pause(retry_after: float) -> None:
        await gate.rate_limited(retry_after)
        await gate.await_final()

    return pause
