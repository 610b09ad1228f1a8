"""A cancellation a library swallows never strands a chat.

On Python 3.11 ``asyncio.wait_for`` drops a cancellation that arrives as the operation it guards
completes, and redis-py (5 s ``socket_timeout`` by default since 8.0) writes every command through
it. A turn's ``/stop`` watcher cancelled during its Redis read then carried on polling, the turn
waited for it forever, and the lock keeper kept the chat's lock alive: the chat answered nothing
more, on any worker. Seen under load in the two-process test (14 chats of 100) and in the soak.
The fakes here swallow the first cancellation the way ``wait_for`` does, deterministically.
"""

from __future__ import annotations

import asyncio

import pytest

from agent.cancelling import cancel_and_wait
from agent.loop import TurnStopped, unless_stopped
from gateway.store.inbox import Inbox
from tests.fakes.gateway import make_settings, message, running_gateway
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.fakes.waiting import PATIENCE


def swallowing_first_cancellation():
    """An operation whose first call waits until cancelled and then returns as if it had completed
    (``asyncio.wait_for`` on 3.11: the result won over the cancellation); later calls return at once.
    ``entered`` is set once the first call waits: from then on a cancellation lands inside it."""
    swallowed: list[bool] = []
    calls: list[int] = []
    entered = asyncio.Event()

    async def operation() -> None:
        calls.append(1)
        if len(calls) > 1:
            return
        entered.set()
        try:
            await asyncio.Event().wait()  # until cancelled
        except asyncio.CancelledError:
            swallowed.append(True)

    return operation, swallowed, entered


async def test_a_task_that_swallowed_its_cancellation_is_asked_again_until_it_ends():
    operation, swallowed, entered = swallowing_first_cancellation()

    async def poller() -> None:
        while True:
            await operation()
            await asyncio.sleep(0.01)

    task = asyncio.ensure_future(poller())
    await asyncio.wait_for(entered.wait(), PATIENCE)  # the poller is inside the call that swallows
    await asyncio.wait_for(cancel_and_wait(task, ask_again=0.05), timeout=PATIENCE)
    assert swallowed == [True] and task.cancelled()


async def test_an_answer_is_returned_though_the_stop_watcher_swallowed_its_cancellation():
    operation, swallowed, entered = swallowing_first_cancellation()

    async def watcher() -> TurnStopped:
        while True:  # like TurnWatch.until_stopped: ask, and ask again
            await operation()
            await asyncio.sleep(0.01)

    async def answer() -> str:
        await entered.wait()  # the answer comes while the watcher is inside the call that swallows
        return "the answer"

    assert await asyncio.wait_for(unless_stopped(answer(), watcher), timeout=PATIENCE) == "the answer"
    assert swallowed == [True]
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []


async def test_a_chat_whose_stop_check_swallowed_a_cancellation_answers_this_message_and_the_next(
    redis, redis_url, key_prefix, monkeypatch: pytest.MonkeyPatch
):
    operation, swallowed, entered = swallowing_first_cancellation()

    async def stop_requested_at(self: Inbox, chat: str) -> float | None:
        await operation()
        return None

    monkeypatch.setattr(Inbox, "stop_requested_at", stop_requested_at)
    asked = asyncio.Event()

    async def answer_once_the_watcher_reads(request: RecordedRequest) -> Reply:
        asked.set()
        await entered.wait()  # the answer comes while the stop watcher is mid-read
        return Reply.answer(f"answer to {request.last_user_text}")

    async with FakeLLMServer(handler=answer_once_the_watcher_reads) as llm:
        settings = make_settings(redis_url, key_prefix, llm.openai_base_url, context_length=32_000)
        async with running_gateway(settings, redis) as (runner, adapter, _):
            await runner.intake(message("room", "1", "hello"))
            await asyncio.wait_for(asked.wait(), timeout=PATIENCE)
            # In while the first turn waits for its answer: too late to join it, so it is the chat's next turn.
            await runner.intake(message("room", "2", "and again"))
            await runner.wait_idle()
    assert swallowed == [True]
    assert [text for _, text in adapter.sent] == ["answer to hello", "answer to and again"]
