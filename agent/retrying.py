"""Named retry policies, and the one loop that tries something again under one.

Everything foldgate tries again — a request to the model provider, a Bot API call, a post to
Discord, an MCP server opened again, a reply's delivery, a chat waiting out a provider outage, the
dispatcher waiting for Redis — names its :class:`Policy` below, so its numbers (how many tries, the
first wait, the longest, the jitter) are read in one table and changed in one place. A name says
what is retried, not where the code that retries it lives.

A policy is arithmetic: :meth:`Policy.delay` is the wait before retry ``n``, and that is all a
place that keeps its own rhythm (the MCP server's next opening, the chat's next hand-out) needs.
Where a call is tried again in place, the loop is :func:`retried`, and its hooks say what differs
between callers: which failures are worth another try, the wait a server named in its answer (a
``Retry-After``, a 429's ``retry_after``), what to do before each retry (a log line, a reset). The
sleep and the random draw of the jitter are parameters, so a test replaces them and no test reads
a clock. This is a few dozen lines of our own rather than tenacity or stamina: the hooks a 429
needs here (waited out by a shared send budget, costing no attempt; refused at once past a cap)
would be as long to express in a library's terms, and no dependency is added for it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

T = TypeVar("T")

#: Waits a number of seconds (``asyncio.sleep``, or a test's recorder).
Sleep = Callable[[float], Awaitable[None]]
#: Draws a number between two bounds (``random.uniform``, or a test's fixed choice).
Draw = Callable[[float, float], float]
#: Told before each retry: the failure, the retry's number (from 1) and the seconds about to be waited.
BeforeRetry = Callable[[Exception, int, float], Awaitable[None]]

#: The attempts of a policy that is not bounded by a count (a deadline or the caller ends it).
UNLIMITED = sys.maxsize
#: Doublings past this many change nothing (every cap is far below) and would overflow a float.
_MOST_DOUBLINGS = 512


@dataclass(frozen=True)
class Policy:
    """How one kind of thing is tried again.

    The wait before retry ``n`` (from 1) is ``base`` doubled ``n - 1`` times (``growth="doubling"``) or
    ``base * n`` (``"linear"``), never more than ``cap``; then drawn from ``[0, step]`` (``jitter="full"``),
    from ``[step / 2, step]`` (``"half"``), or taken as it is (``"none"``). Jitter keeps many chats that
    failed together from all trying again in the same instant.

    A wait the server named is, with ``server_wait="replaces"``, waited instead of the backoff; with
    ``"at_least"``, the backoff is stretched to it. One longer than ``max_server_wait`` ends the retries
    at once (waiting less would only fail again; waiting that long holds a turn hostage). With
    ``server_waits_free`` such a wait costs no attempt: a platform's 429 is waited out as often as it asks.
    """

    #: What is retried, in words.
    what: str
    #: Tries in all, the first included (:data:`UNLIMITED`: no count ends them).
    attempts: int
    base: float
    cap: float = math.inf
    growth: Literal["doubling", "linear"] = "doubling"
    jitter: Literal["none", "full", "half"] = "none"
    server_wait: Literal["replaces", "at_least"] = "replaces"
    max_server_wait: float = math.inf
    server_waits_free: bool = False

    def delay(self, retry: int, draw: Draw = random.uniform) -> float:
        """Seconds to wait before retry number ``retry`` (from 1) when the server named no wait."""
        growth = retry if self.growth == "linear" else 2.0 ** min(retry - 1, _MOST_DOUBLINGS)
        step = min(self.cap, self.base * growth)
        if self.jitter == "full":
            return draw(0.0, step)
        if self.jitter == "half":
            return draw(step / 2, step)
        return step

    def wait(self, retry: int, server_wait: float | None, draw: Draw = random.uniform) -> float:
        """Seconds to wait before retry ``retry``, given the wait the server named (None, or 0, names none)."""
        if not server_wait:
            return self.delay(retry, draw)
        if self.server_wait == "at_least":
            return max(self.delay(retry, draw), server_wait)
        return server_wait

    def exhausted(self, failures: int) -> bool:
        """Whether ``failures`` failed tries are all this policy allows."""
        return failures >= self.attempts

    def adjusted(self, **changes: Any) -> Policy:
        """This policy with some numbers changed: a configured count of tries, a test's shorter waits."""
        return dataclasses.replace(self, **changes)


# --------------------------------------------------------------------------------------------- the policies

#: A request to the model provider, as the official SDKs retry it (``model.max_retries`` sets the count).
PROVIDER_REQUEST = Policy(
    "a request to the model provider", attempts=3, base=0.5, cap=8.0, jitter="full", max_server_wait=60.0
)
#: A Telegram Bot API call: final sends take 5 retries on network and 5xx errors (``network_retries``),
#: the poller and the start-up check wait the same backoff; a 429 is waited out however often it comes.
BOT_API_CALL = Policy("a Telegram Bot API call", attempts=6, base=0.5, cap=30.0, server_waits_free=True)
#: A post or an edit in Discord that discord.py's own retries gave up on; a 429 is waited out.
DISCORD_SEND = Policy("a post or an edit in Discord", attempts=4, base=1.0, server_waits_free=True)
#: A Discord message handed to the intake: Discord does not send an event twice, so it is tried here.
DISCORD_HAND_OVER = Policy("a received Discord message handed to the intake", attempts=4, base=1.0)
#: The login to Discord at start while its API cannot be reached (within the login's own deadline).
DISCORD_LOGIN = Policy("the login to Discord's API", attempts=3, base=0.5)
#: An MCP server that exited or cannot be reached, opened again at a later use after this wait.
MCP_CONNECT = Policy("an MCP server's session", attempts=UNLIMITED, base=1.0, cap=60.0)
#: A reply's text, or one of its files, delivered to the platform before it is given up.
REPLY_DELIVERY = Policy("a reply's text or file sent to its platform", attempts=3, base=1.0, growth="linear")
#: A chat's head entry while the provider is away: handed out again after this wait, until the outage
#: bound (``gateway.outage_retry_seconds``) runs out; a shorter bound lowers the cap. The provider's own
#: ``Retry-After`` stretches the wait.
CHAT_OUTAGE = Policy(
    "a chat's message while the provider is away",
    attempts=UNLIMITED,
    base=0.5,
    cap=30.0,
    jitter="half",
    server_wait="at_least",
)
#: The dispatcher's next pass while Redis does not answer.
REDIS_OUTAGE = Policy("the dispatcher's pass while Redis is away", attempts=UNLIMITED, base=0.05, cap=2.0)
#: An inbox entry whose turn failed for a reason of its own, before it is answered with an error.
INBOX_ENTRY = Policy("an inbox entry whose turn failed", attempts=3, base=1.0)


# --------------------------------------------------------------------------------------------- the loop


def every_error(error: BaseException) -> bool:
    """The ``retryable`` hook of a call where any failure may pass (a network, a store, a platform)."""
    return True


def no_server_wait(error: BaseException) -> float | None:
    """The ``server_wait`` hook of a call whose failures never name a wait."""
    return None


async def retried(
    policy: Policy,
    call: Callable[[], Awaitable[T]],
    *,
    retryable: Callable[[BaseException], bool] = every_error,
    server_wait: Callable[[BaseException], float | None] = no_server_wait,
    too_long: Callable[[Exception, float], BaseException] | None = None,
    before_retry: BeforeRetry | None = None,
    sleep: Sleep | None = None,
    pause: Sleep | None = None,
    draw: Draw = random.uniform,
) -> T:
    """``call()`` until it succeeds, under ``policy``; the last failure is raised when the tries run out.

    A failure ``retryable`` refuses is raised at once. ``server_wait`` reads the wait the server named
    in a failure (None: it named none); past the policy's ``max_server_wait`` the retries end at once
    with ``too_long(error, seconds)`` (the failure itself when None). ``before_retry`` runs before each
    counted retry's wait. Backoffs are waited with ``sleep`` (``asyncio.sleep`` when None), a server's free
    waits with ``pause`` (``sleep`` when None; a streamed reply's goes through the shared send budget).
    """
    backoff = asyncio.sleep if sleep is None else sleep  # looked up now: a test that replaces it is heard
    server_pause = backoff if pause is None else pause
    failures = 0
    while True:
        try:
            return await call()
        except Exception as error:
            if not retryable(error):
                raise
            asked = server_wait(error)
            if asked is not None and asked > policy.max_server_wait:
                if too_long is None:
                    raise
                raise too_long(error, asked) from error
            if asked is not None and policy.server_waits_free:
                await server_pause(asked)
                continue
            failures += 1
            if policy.exhausted(failures):
                raise
            wait = policy.wait(failures, asked, draw)
            if before_retry is not None:
                await before_retry(error, failures, wait)
            await backoff(wait)
