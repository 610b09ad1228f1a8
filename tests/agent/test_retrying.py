"""The named retry policies and the one retry loop (agent/retrying.py), with no clock and no real sleep.

Every wait is read off a recording sleep and every jitter off a fixed draw: the policies' numbers are
the ones foldgate has always used, the server's wait is honoured (and refused past a cap), the last
failure is what the caller gets once the tries run out, and a refusal is raised at once.
"""

from __future__ import annotations

import asyncio
import math

import pytest

from agent.retrying import (
    BOT_API_CALL,
    CHAT_OUTAGE,
    DISCORD_HAND_OVER,
    DISCORD_LOGIN,
    DISCORD_SEND,
    INBOX_ENTRY,
    MCP_CONNECT,
    PROVIDER_REQUEST,
    REDIS_OUTAGE,
    REPLY_DELIVERY,
    UNLIMITED,
    Policy,
    retried,
)


def highest(low: float, high: float) -> float:
    """A jitter draw that always takes the top of its range."""
    return high


def lowest(low: float, high: float) -> float:
    """A jitter draw that always takes the bottom of its range."""
    return low


class Sleeps(list[float]):
    """The waits the loop asked for, recorded and not slept."""

    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


class Flaky:
    """A call that fails with each of ``failures`` in turn, then answers ``"done"``."""

    def __init__(self, *failures: Exception) -> None:
        self.failures = list(failures)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "done"


class Asked(Exception):
    """A failure whose server named a wait (a 429's ``retry_after``, a ``Retry-After``)."""

    def __init__(self, seconds: float | None) -> None:
        super().__init__(f"wait {seconds}")
        self.seconds = seconds


def asked(error: BaseException) -> float | None:
    return error.seconds if isinstance(error, Asked) else None


# --------------------------------------------------------------------------------------------- the numbers

DELAYS = [
    (PROVIDER_REQUEST, highest, [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]),
    (PROVIDER_REQUEST, lowest, [0.0] * 6),
    (BOT_API_CALL, highest, [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]),
    (DISCORD_SEND, highest, [1.0, 2.0, 4.0, 8.0]),
    (DISCORD_HAND_OVER, highest, [1.0, 2.0, 4.0]),
    (DISCORD_LOGIN, highest, [0.5, 1.0]),
    (MCP_CONNECT, highest, [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]),
    (REPLY_DELIVERY, highest, [1.0, 2.0]),
    (CHAT_OUTAGE, highest, [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0]),
    (CHAT_OUTAGE, lowest, [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0]),
    (REDIS_OUTAGE, highest, [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]),
    (INBOX_ENTRY, highest, [1.0, 2.0]),
]


@pytest.mark.parametrize(("policy", "draw", "delays"), DELAYS, ids=[f"{p.what} ({d.__name__})" for p, d, _ in DELAYS])
def test_each_policy_waits_what_it_always_has(policy: Policy, draw, delays: list[float]) -> None:
    assert [policy.delay(retry, draw) for retry in range(1, len(delays) + 1)] == pytest.approx(delays)


def test_the_policies_count_their_tries_as_before() -> None:
    counts = {
        policy.what: policy.attempts
        for policy in (
            PROVIDER_REQUEST,
            BOT_API_CALL,
            DISCORD_SEND,
            DISCORD_HAND_OVER,
            DISCORD_LOGIN,
            REPLY_DELIVERY,
            INBOX_ENTRY,
        )
    }
    assert list(counts.values()) == [3, 6, 4, 4, 3, 3, 3]
    assert MCP_CONNECT.attempts == CHAT_OUTAGE.attempts == REDIS_OUTAGE.attempts == UNLIMITED
    assert PROVIDER_REQUEST.max_server_wait == 60.0


def test_full_jitter_spreads_over_the_whole_step_and_half_jitter_over_its_upper_half() -> None:
    draws: list[tuple[float, float]] = []

    def recording(low: float, high: float) -> float:
        draws.append((low, high))
        return high

    PROVIDER_REQUEST.delay(3, recording)
    CHAT_OUTAGE.delay(3, recording)
    assert draws == [(0.0, 2.0), (1.0, 2.0)]


def test_a_long_outage_does_not_overflow_the_doubling() -> None:
    assert MCP_CONNECT.delay(5_000) == 60.0
    assert Policy("uncapped", attempts=UNLIMITED, base=1.0).delay(5_000) < math.inf


def test_a_server_wait_replaces_or_stretches_the_backoff() -> None:
    assert PROVIDER_REQUEST.wait(1, 3.0, highest) == 3.0  # honoured exactly, even past the backoff's 0.5
    assert PROVIDER_REQUEST.wait(3, 0.1, highest) == 0.1  # and when shorter than it
    assert PROVIDER_REQUEST.wait(1, 0.0, highest) == 0.5  # Retry-After: 0 names no wait
    assert CHAT_OUTAGE.wait(3, 0.1, highest) == 2.0  # the outage's backoff is a floor ...
    assert CHAT_OUTAGE.wait(3, 9.0, highest) == 9.0  # ... that the provider's wait stretches


def test_a_policy_adjusted_keeps_the_rest() -> None:
    quick = REPLY_DELIVERY.adjusted(base=0.01)
    assert (quick.attempts, quick.growth, quick.delay(2)) == (3, "linear", 0.02)
    assert REPLY_DELIVERY.base == 1.0


# --------------------------------------------------------------------------------------------- the loop


async def test_the_loop_sleeps_the_policys_waits_through_the_injected_sleep() -> None:
    sleeps = Sleeps()
    call = Flaky(ConnectionError("a"), ConnectionError("b"))
    told: list[tuple[str, int, float]] = []

    async def before_retry(error: Exception, retry: int, wait: float) -> None:
        told.append((str(error), retry, wait))

    answer = await retried(PROVIDER_REQUEST, call, before_retry=before_retry, sleep=sleeps, draw=highest)
    assert answer == "done" and call.calls == 3
    assert sleeps == [0.5, 1.0]
    assert told == [("a", 1, 0.5), ("b", 2, 1.0)]  # told before each wait, with the wait


async def test_when_the_tries_run_out_the_last_failure_is_raised() -> None:
    sleeps = Sleeps()
    last = ConnectionError("third")
    call = Flaky(ConnectionError("first"), ConnectionError("second"), last, ConnectionError("never reached"))
    with pytest.raises(ConnectionError) as caught:
        await retried(REPLY_DELIVERY, call, sleep=sleeps)
    assert caught.value is last and call.calls == 3
    assert sleeps == [1.0, 2.0]  # no wait after the last try


async def test_a_failure_that_is_not_retryable_passes_through_at_once() -> None:
    sleeps = Sleeps()
    refusal = PermissionError("blocked")
    call = Flaky(refusal)
    with pytest.raises(PermissionError) as caught:
        await retried(DISCORD_SEND, call, retryable=lambda error: error is not refusal, sleep=sleeps)
    assert caught.value is refusal and call.calls == 1 and sleeps == []


async def test_the_servers_wait_is_honoured_instead_of_the_backoff() -> None:
    sleeps = Sleeps()
    call = Flaky(Asked(7.5), Asked(None))
    assert await retried(PROVIDER_REQUEST, call, server_wait=asked, sleep=sleeps, draw=highest) == "done"
    assert sleeps == [7.5, 1.0]  # the server's wait, then (none named) the second retry's backoff


async def test_a_server_wait_past_the_cap_fails_at_once_with_the_hooks_error() -> None:
    sleeps = Sleeps()
    call = Flaky(Asked(90.0))

    def too_long(error: Exception, seconds: float) -> BaseException:
        return TimeoutError(f"asked for {seconds:g} s")

    with pytest.raises(TimeoutError, match="asked for 90 s") as caught:
        await retried(PROVIDER_REQUEST, call, server_wait=asked, too_long=too_long, sleep=sleeps)
    assert isinstance(caught.value.__cause__, Asked) and call.calls == 1 and sleeps == []


async def test_without_a_hook_a_server_wait_past_the_cap_raises_the_failure_itself() -> None:
    call = Flaky(Asked(61.0))
    with pytest.raises(Asked):
        await retried(PROVIDER_REQUEST, call, server_wait=asked, sleep=Sleeps())


async def test_the_cap_is_checked_before_the_count_so_a_last_try_still_says_it_was_asked_to_wait_long() -> None:
    call = Flaky(Asked(90.0))
    with pytest.raises(TimeoutError):
        await retried(
            PROVIDER_REQUEST.adjusted(attempts=1),
            call,
            server_wait=asked,
            too_long=lambda error, seconds: TimeoutError(),
            sleep=Sleeps(),
        )


async def test_free_server_waits_cost_no_attempt_and_go_through_the_pause() -> None:
    sleeps, paused = Sleeps(), Sleeps()
    call = Flaky(Asked(3.0), Asked(3.0), Asked(3.0), Asked(3.0), Asked(3.0), ConnectionError("net"))
    one_retry = DISCORD_SEND.adjusted(attempts=2)
    assert await retried(one_retry, call, server_wait=asked, sleep=sleeps, pause=paused) == "done"
    assert paused == [3.0] * 5  # as often as the server asks, however many tries the policy allows
    assert sleeps == [1.0]  # the network failure took the one counted retry


async def test_free_server_waits_fall_back_to_the_sleep_without_a_pause() -> None:
    sleeps = Sleeps()
    assert await retried(BOT_API_CALL, Flaky(Asked(2.0)), server_wait=asked, sleep=sleeps) == "done"
    assert sleeps == [2.0]


async def test_a_cancellation_is_never_retried() -> None:
    sleeps = Sleeps()

    async def cancelled() -> None:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await retried(REPLY_DELIVERY, cancelled, sleep=sleeps)
    assert sleeps == []
