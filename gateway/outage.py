"""Outages of the model provider and of Redis: what a chat is told, when it is tried again, what the log says.

A provider that is down (5xx, refused or dropped connections, timeouts, rate limits) is not
the person's fault and usually not for long, so a message that failed that way is not
answered with an error: it stays at the head of its chat's inbox, the chat is handed out
again after a growing wait, and the person is told once per outage that it is kept. The
chat's "down since" record lives in Redis so every process agrees on the one notice and on
when the bound (``gateway.outage_retry_seconds``) runs out; then the waiting messages are
stored and answered with one final notice.

The log gets one line when the provider or Redis goes away and one when it is back (with
how much waited), never a traceback per retry: an outage is expected, a flood of tracebacks
hides the failure that is not.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from agent.llm.errors import (
    ProviderError,
    ProviderTimeout,
    ProviderUnavailable,
    RateLimited,
    RetryWaitTooLong,
    plain_reason,
)
from agent.retrying import CHAT_OUTAGE, REDIS_OUTAGE, Draw, Policy
from gateway.startup_errors import one_line
from gateway.store.channel import RedisChannel
from gateway.store.outages import OutageRecords

log = logging.getLogger(__name__)

#: Failures that mean "the provider is away", not "the request is wrong" (StreamInterrupted is a ProviderUnavailable).
DOWN_KINDS: tuple[type[ProviderError], ...] = (ProviderUnavailable, ProviderTimeout, RateLimited, RetryWaitTooLong)


def counts_as_down(error: BaseException) -> bool:
    """Whether a failed turn means the provider is away (wait for it) rather than that it refused the request."""
    return isinstance(error, DOWN_KINDS)


def is_redis_outage(error: BaseException) -> bool:
    """Whether an error means Redis does not answer (a restart, a dropped connection, a server still
    loading its data after one), not a bug."""
    if isinstance(error, ResponseError):
        return str(error).startswith("LOADING")
    return isinstance(error, (RedisConnectionError, RedisTimeoutError, ConnectionError))


class ProviderDown(Exception):
    """A turn failed because the provider is away; nothing of it was committed, so it can simply be tried again."""

    def __init__(self, cause: ProviderError, started: float) -> None:
        super().__init__(str(cause))
        self.cause = cause
        #: When the failed try began (``time.time()``): a try begun long after the last failure is a new outage.
        self.started = started


class RetryLater(Exception):
    """The chat's head entry waits for the provider: release the chat and hand it out again after ``delay`` seconds."""

    def __init__(self, delay: float) -> None:
        super().__init__(f"retry in {delay:.2f}s")
        self.delay = delay


def waiting_notice(error: ProviderError) -> str:
    """The one message a chat gets per outage: nothing is lost and no action is needed."""
    return (
        f"⚠️ The model provider {plain_reason(error)}. Your message is kept and will be answered "
        "as soon as the provider is back."
    )


def final_notice(error: ProviderError, waited: float) -> str:
    """What a chat is told when the provider stayed away for the whole bound."""
    minutes = max(1, round(waited / 60))
    return (
        f"⚠️ The model provider {plain_reason(error)} for {minutes} min, so I have stopped waiting. "
        "Your messages are saved in our conversation; please send them again later."
    )


@dataclass(frozen=True)
class FailedTry:
    """What one failed try means for its chat."""

    #: The first failure of this outage in the chat: the person is told, once.
    first: bool
    #: The bound has run out: the waiting messages get the final notice.
    expired: bool
    #: Seconds until the next try.
    delay: float
    #: Seconds since the outage began for the chat.
    waited: float


class ChatOutages:
    """Per chat: since when the provider has been failing it (the record is the store's,
    :class:`gateway.store.outages.OutageRecords`), and what that means for its next try: the wait is
    :data:`agent.retrying.CHAT_OUTAGE`'s, never past the bound."""

    def __init__(
        self,
        channel: RedisChannel,
        prefix: str,
        bound_seconds: float,
        *,
        clock: Callable[[], float] = time.time,
        draw: Draw = random.uniform,
    ) -> None:
        """``clock`` (wall-clock seconds, shared by every process) and ``draw`` (the jitter) are a test's to fix."""
        self.records = OutageRecords(channel, prefix)
        self.bound = bound_seconds
        self.clock = clock
        self.draw = draw

    @property
    def cap(self) -> float:
        """The longest wait between tries: short bounds (tests, impatient deployments) retry more often."""
        return max(CHAT_OUTAGE.base, min(CHAT_OUTAGE.cap, self.bound / 10))

    async def failed(self, chat: str, error: ProviderError, started: float) -> FailedTry:
        """Record a failed try that began at ``started``; a try begun long after the last failure starts a new
        outage."""
        now = self.clock()
        stale_after = 2 * self.cap + 10.0  # a chat waiting for its next try is handed out within about ``cap``
        since, tries = await self.records.failed(
            chat, now=now, started=started, stale_after=stale_after, ttl_seconds=int(self.bound + 600)
        )
        waited = now - since
        remaining = self.bound - waited
        if remaining <= 0:
            return FailedTry(first=tries == 1, expired=True, delay=0.0, waited=waited)
        # Jittered, so chats that failed together are not all tried together; at least what the provider asked.
        delay = CHAT_OUTAGE.adjusted(cap=self.cap).wait(tries, error.retry_after, self.draw)
        return FailedTry(first=tries == 1, expired=False, delay=min(delay, remaining), waited=waited)

    async def ended(self, chat: str) -> None:
        """The chat was answered (or given up): its next failure is a new outage."""
        await self.records.ended(chat)


class Health:
    """Whether a dependency answers, logging only the changes: away once, back once with what waited."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.down_since: float | None = None
        self._waiting: set[str] = set()

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def failed(self, error: BaseException, what: str = "") -> None:
        """Note a failure (``what`` is the entry that waits because of it); logs only the first of an outage."""
        if what:
            self._waiting.add(what)
        if self.down_since is None:
            self.down_since = time.monotonic()
            log.warning(
                "%s is away (%s: %s); waiting for it, retrying quietly",
                self.name,
                type(error).__name__,
                _first_line(error),
            )
        else:
            log.debug("%s still away: %s", self.name, _first_line(error))

    def answered(self, waited: int | None = None) -> None:
        """Note a success; logs the end of an outage with ``waited`` (or the entries noted) as the count."""
        if self.down_since is None:
            return
        seconds = time.monotonic() - self.down_since
        count = len(self._waiting) if waited is None else waited
        self.down_since, self._waiting = None, set()
        log.info(
            "%s is back after %.1fs; %d %s waited",
            self.name,
            seconds,
            count,
            "message(s)" if waited is None else "chat(s)",
        )


class ProviderWatch:
    """The provider as this process sees it: its health for the log, and the chats whose outage record
    is cleared once they are answered."""

    def __init__(self, outages: ChatOutages) -> None:
        self.outages = outages
        self.health = Health("the model provider")
        self._waiting: set[str] = set()

    async def answered(self, chat: str) -> None:
        """A turn of ``chat`` got its answer: an outage this process saw ends, for the log and for the chat."""
        self.health.answered()
        if chat in self._waiting:
            self._waiting.discard(chat)
            with contextlib.suppress(Exception):  # the record expires by itself; a new outage is recognised anyway
                await self.outages.ended(chat)

    async def failed(self, chat: str, entry: str, down: ProviderDown) -> FailedTry:
        """``entry`` of ``chat`` failed because the provider is away: what that means for the chat."""
        self.health.failed(down.cause, f"{chat}|{entry}")
        self._waiting.add(chat)
        return await self.outages.failed(chat, down.cause, down.started)

    async def stopped_waiting(self, chat: str) -> None:
        """The chat's waiting messages were stored unanswered: its next failure is a new outage."""
        self._waiting.discard(chat)
        await self.outages.ended(chat)


class Backoff:
    """The dispatcher's wait while Redis is away (:data:`agent.retrying.REDIS_OUTAGE`: 50 ms doubling to a
    couple of seconds), counted from the first failure in a row and reset when Redis answers."""

    def __init__(self, first: float = REDIS_OUTAGE.base, ceiling: float = REDIS_OUTAGE.cap) -> None:
        self.first, self.ceiling = first, ceiling
        self.policy: Policy = REDIS_OUTAGE.adjusted(base=first, cap=ceiling)
        self.failures = 0
        #: The last wait handed out; 0 while Redis answers.
        self.current = 0.0

    def next(self) -> float:
        """The wait after one more failure in a row."""
        self.failures += 1
        self.current = self.policy.delay(self.failures)
        return self.current

    def reset(self) -> None:
        self.failures, self.current = 0, 0.0


def _first_line(error: BaseException) -> str:
    return one_line(error, 200) or type(error).__name__
