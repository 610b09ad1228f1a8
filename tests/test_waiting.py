"""The one wait the tests use: it goes on as soon as its condition holds, with the condition's value, and a wait
that gives up says what it was waiting for."""

from __future__ import annotations

import asyncio

import pytest

from tests.fakes.waiting import wait_for, wait_for_sync


async def test_the_wait_returns_the_conditions_first_truthy_value_once_it_holds():
    seen: list[int] = []

    def condition() -> list[int]:
        seen.append(len(seen))
        return seen[3:]

    assert await wait_for(condition, interval=0) == [3]
    assert len(seen) == 4  # checked until it held, not once more


async def test_a_coroutine_condition_is_awaited_and_the_loop_runs_between_checks():
    arrived = asyncio.Event()
    asyncio.get_running_loop().call_soon(arrived.set)

    async def condition() -> bool:
        return arrived.is_set()

    assert await wait_for(condition, what="the event") is True


async def test_a_wait_that_gives_up_says_what_it_waited_for():
    with pytest.raises(TimeoutError, match=r"still waiting for the reply in chat 7 after 0\.05 s"):
        await wait_for(lambda: False, 0.05, what="the reply in chat 7")


async def test_an_unnamed_condition_is_told_by_where_it_was_written():
    with pytest.raises(TimeoutError) as gave_up:
        await wait_for(lambda: [], 0.01)  # nobody answers
    assert "test_waiting.py:" in str(gave_up.value) and "# nobody answers" in str(gave_up.value)


def test_the_wait_without_a_loop_returns_the_value_and_gives_up_the_same_way():
    countdown = iter([0, 0, "up"])
    assert wait_for_sync(lambda: next(countdown), interval=0) == "up"
    with pytest.raises(TimeoutError, match="still waiting for the server to come up after 0.01 s"):
        wait_for_sync(lambda: None, 0.01, what="the server to come up")
