"""Ending things while the provider says nothing: ``/stop`` on a turn whose request hangs, and Ctrl-C or
SIGTERM on ``foldgate run`` with such a turn in flight.

A hung provider sends no stream event, so a stop that is only looked at when an event arrives is
never seen; the turn must watch for it on its own. A cancelled turn commits nothing, so its
message is still in the inbox when foldgate starts again.

No test here holds a stopwatch to a stop: a machine busy with other work makes any small bound
fail now and then. A stop is prompt when it ends the turn while what it must not wait for (a
provider that never answers, a tool call that hangs, the SIGTERM grace) still holds; ``PATIENCE``
only ends a test that hangs, and stays under every one of those waits.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.compaction.summary_prompt import SECTION_HEADINGS, SYSTEM_PROMPT
from agent.loop import STOPPED_REPLY, TurnStopped, unless_stopped
from agent.messages import is_summary
from gateway.events import CompressEvent
from gateway.run.signals import TERM_GRACE_SECONDS
from gateway.store import SessionStore
from tests.fakes.gateway import PATIENCE, make_settings, message, running_gateway, wait_for
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.fakes.paths import REPO
from tests.fakes.waiting import wait_for_sync

ROOT = REPO
WINDOW = 32_000
NOTHING_TO_STOP = "Nothing was being written"
NOTES = "\n".join(f"{heading}\n- the night's figures" for heading in SECTION_HEADINGS)
# ------------------------------------------------------------------------------ /stop on a hung provider


@pytest.mark.parametrize("stop_via", ["same process", "another process"])
async def test_stop_ends_a_turn_whose_provider_never_answers_and_the_next_message_is_answered(
    redis, redis_url, key_prefix, stop_via
):
    async with FakeLLMServer(default=Reply.hang()) as llm:
        settings = make_settings(redis_url, key_prefix, llm.openai_base_url, context_length=WINDOW)
        async with running_gateway(settings, redis) as (runner, adapter, _):
            await runner.intake(message("room", "1", "hello"))
            await wait_for(lambda: len(llm.requests) == 1, timeout=PATIENCE)  # the provider took it, says nothing
            if stop_via == "same process":
                await runner.intake(message("room", "2", "/stop"))
            else:  # the stop is a Redis key: a gateway that does not run the turn takes the /stop
                async with running_gateway(settings, redis) as (other, _, _):
                    await other.intake(message("room", "2", "/stop"))
            await wait_for(lambda: len(adapter.sent) >= 1, timeout=PATIENCE)
            asked_while_stopped = len(llm.requests)  # the hung request was neither answered nor timed out and retried
            await wait_for(lambda: len(adapter.sent) >= 2, timeout=PATIENCE)  # the /stop command's own reply
            llm.default = Reply.answer("fresh answer")
            await runner.intake(message("room", "3", "and now?"))
            await wait_for(lambda: len(adapter.sent) >= 3, timeout=PATIENCE)
            await runner.wait_idle()
            store = SessionStore(redis, key_prefix)
            transcript = await store.active("local:room", await store.current_session("local:room"))
    replies = [text for _, text in adapter.sent]
    assert asked_while_stopped == 1
    assert replies[0] == STOPPED_REPLY  # the stop ended it while the provider still held it: nothing was written
    assert replies[1].startswith("⏹ Stopped") and not any(NOTHING_TO_STOP in text for text in replies)
    assert replies[2] == "fresh answer"  # the client's pool survived the cancelled request
    assert len(llm.requests) == 2 and llm.requests[1].last_user_text == "and now?"
    assert [m["content"] for m in transcript if m["role"] == "user"] == ["hello", "and now?"]
    assert [m["content"] for m in transcript if m["role"] == "assistant"] == [STOPPED_REPLY, "fresh answer"]


async def test_stop_while_hygiene_writes_its_summary_ends_the_turn_without_a_request_or_a_compaction(
    redis, redis_url, key_prefix
):
    """The pass before the agent can wait a minute on its summary; a /stop ends that wait too: nothing is
    compacted, no chat request goes out, the message is kept, and the next turn compacts as usual."""
    window = 16_000
    summaries_hang = True

    def model(request: RecordedRequest) -> Reply:
        if SYSTEM_PROMPT[:40] in request.system:
            return Reply.hang() if summaries_hang else Reply.answer(NOTES)
        return Reply.answer(f"echo: {request.last_user_text}")

    async with FakeLLMServer(handler=model) as llm:
        settings = make_settings(redis_url, key_prefix, llm.openai_base_url, context_length=window)
        async with running_gateway(settings, redis) as (runner, adapter, events):
            for index in range(360):  # the night: stored, not answered, past the hygiene threshold
                night = (
                    f"{index}: ledger p99 went from {index * 7 % 900}ms to {index * 13 % 900}ms in eu-west; "
                    f"queue depth {index * 31 % 9000}, restarted {index % 40} pods, canary at {index % 50}% "
                    "and holding"
                )
                await runner.intake(message("ops", f"n-{index}", night, respond=False))
            await runner.wait_idle()
            store = SessionStore(redis, key_prefix)
            sid = await store.current_session("local:ops")
            assert (await store.meta("local:ops", sid)).tokens > 0.85 * window
            await runner.intake(message("ops", "morning", "good morning"))
            await wait_for(lambda: len(llm.requests) == 1, timeout=PATIENCE)  # the hygiene summary, hanging
            await runner.intake(message("ops", "stop", "/stop"))
            await wait_for(lambda: len(adapter.sent) >= 1, timeout=PATIENCE)
            asked_while_stopped = len(llm.requests)  # the summary still hung: no chat request went out
            await wait_for(lambda: len(adapter.sent) >= 2, timeout=PATIENCE)
            stopped = await store.active("local:ops", sid)
            summaries_hang = False
            await runner.intake(message("ops", "again", "and now?"))
            await wait_for(lambda: len(adapter.sent) >= 3, timeout=PATIENCE)
            await runner.wait_idle()
    replies = [text for _, text in adapter.sent]
    assert asked_while_stopped == 1
    assert replies[0] == STOPPED_REPLY and replies[1].startswith("⏹ Stopped")
    assert [r for r in llm.requests if SYSTEM_PROMPT[:40] not in r.system][0].last_user_text == "and now?"
    assert not any(is_summary(m) for m in stopped) and "good morning" in [m["content"] for m in stopped]
    assert replies[2] == "echo: and now?"
    assert [e.trigger for e in events if isinstance(e, CompressEvent)] == ["hygiene"]  # the next turn's


async def test_waiting_for_a_stop_never_outlives_the_work_it_watches():
    async def never_stopped() -> TurnStopped:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def answer() -> str:
        await asyncio.sleep(0)  # not done at once: the watcher is running meanwhile
        return "done"

    assert await unless_stopped(answer(), never_stopped) == "done"
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []

    began = asyncio.Event()

    async def hangs() -> None:
        began.set()
        await asyncio.Event().wait()

    async def stopped_once_the_work_runs() -> TurnStopped:
        await began.wait()
        return TurnStopped("so far")

    with pytest.raises(TurnStopped) as raised:
        await unless_stopped(hangs(), stopped_once_the_work_runs)
    assert raised.value.text == "so far"
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []

    began.clear()
    outer = asyncio.ensure_future(unless_stopped(hangs(), never_stopped))  # the gateway shuts down meanwhile
    await began.wait()
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outer
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []


# ------------------------------------------------------------------------------ quitting foldgate run


class ThreadedLLM:
    """The fake provider on an event loop of its own thread, for a foldgate process driven synchronously."""

    def __init__(self, default: Reply, handler: Callable[[RecordedRequest], Any] | None = None) -> None:
        self.server = FakeLLMServer(default=default, handler=handler)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="fake-llm", daemon=True)

    def __enter__(self) -> ThreadedLLM:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(10)
        return self

    def __exit__(self, *exc_info: object) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    def asked(self, text: str) -> int:
        return sum(1 for request in list(self.server.requests) if request.body and request.last_user_text == text)

    def set_on_its_loop(self, event: asyncio.Event) -> None:
        """Set ``event``, which the server's handlers wait on, from the test's thread."""
        self.loop.call_soon_threadsafe(event.set)


def spawn_chat(tmp_path: Path, llm: ThreadedLLM) -> Any:
    """``foldgate run`` in a pseudo-terminal: the terminal chat, the model on the fake provider."""
    import pexpect

    config = tmp_path / "config.yaml"
    config.write_text(
        "model:\n"
        "  provider: custom\n"
        f"  base_url: {llm.server.openai_base_url}\n"
        "  api_key: test-key\n"
        "  name: test-model\n"
        f"  context_length: {WINDOW}\n"
        "platforms:\n"
        "  local:\n"
        "    enabled: true\n"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith(("FOLDGATE_", "REDIS"))}
    env.update(FOLDGATE_HOME=str(tmp_path / "home"), FOLDGATE_CONFIG=str(config))
    chat = pexpect.spawn(
        sys.executable,
        ["-m", "gateway.cli", "run"],
        cwd=str(tmp_path),
        env=env,
        encoding="utf-8",
        timeout=60,
        dimensions=(40, 200),
    )
    chat.expect_exact("you> ")
    return chat


def wait_asked(llm: ThreadedLLM, text: str, timeout: float = PATIENCE) -> None:
    wait_for_sync(lambda: llm.asked(text), timeout, what=f"the provider to be asked {text!r}")


def ask_a_hung_provider(chat: Any, llm: ThreadedLLM) -> None:
    """Send a question and return once the provider (which holds its answer) has it and the chat shows it works."""
    chat.sendline("what happened overnight?")
    chat.expect_exact("⋯ working")
    wait_asked(llm, "what happened overnight?")


def ended(chat: Any) -> None:
    """Return once the process has exited. Within ``PATIENCE``, so it waited out neither the provider that never
    answers nor the SIGTERM grace."""
    import pexpect

    chat.expect(pexpect.EOF, timeout=PATIENCE)
    chat.wait()


def test_ctrl_c_with_a_turn_in_flight_ends_at_once_and_the_message_is_answered_on_the_next_start(tmp_path):
    with ThreadedLLM(Reply.hang()) as llm:
        chat = spawn_chat(tmp_path, llm)
        try:
            ask_a_hung_provider(chat, llm)
            chat.sendintr()
            ended(chat)  # while the provider still held the request
            said = chat.before
        finally:
            if chat.isalive():
                chat.terminate(force=True)
        assert chat.exitstatus == 0, said
        assert "foldgate: stopped; 1 message being answered will be answered on the next start" in said

        llm.server.default = Reply.answer("the overnight deploy went fine")
        chat = spawn_chat(tmp_path, llm)
        try:
            chat.expect_exact("the overnight deploy went fine", timeout=30)  # answered without being asked again
            chat.expect_exact("you> ")
            chat.sendline("/quit")
            ended(chat)
        finally:
            if chat.isalive():
                chat.terminate(force=True)
        assert chat.exitstatus == 0, chat.before
        assert llm.asked("what happened overnight?") == 2


WAITING = f"foldgate: waiting up to {TERM_GRACE_SECONDS:g} s for 1 reply being written"


def test_sigterm_with_a_turn_in_flight_says_it_waits_and_a_second_signal_ends_at_once(tmp_path):
    with ThreadedLLM(Reply.hang()) as llm:
        chat = spawn_chat(tmp_path, llm)
        try:
            ask_a_hung_provider(chat, llm)
            chat.kill(signal.SIGTERM)
            chat.expect_exact(WAITING, timeout=PATIENCE)
            assert chat.isalive()  # in the grace period (that it lets a reply finish: the test below)
            chat.kill(signal.SIGTERM)
            ended(chat)  # before the grace could run out, the provider still holding the request
            said = chat.before
        finally:
            if chat.isalive():
                chat.terminate(force=True)
    assert chat.exitstatus == 0, said
    assert "1 message being answered will be answered on the next start" in said


def test_sigterm_lets_the_reply_being_written_finish_and_then_ends(tmp_path):
    """The grace period is real: a reply the provider lets go only after the SIGTERM still reaches the chat."""
    released = asyncio.Event()

    async def held_until_released(request: RecordedRequest) -> Reply:
        await released.wait()
        return Reply.answer("the overnight deploy went fine")

    with ThreadedLLM(Reply.hang(), handler=held_until_released) as llm:
        chat = spawn_chat(tmp_path, llm)
        try:
            ask_a_hung_provider(chat, llm)
            chat.kill(signal.SIGTERM)
            chat.expect_exact(WAITING, timeout=PATIENCE)
            llm.set_on_its_loop(released)
            chat.expect_exact("the overnight deploy went fine", timeout=PATIENCE)
            ended(chat)  # the one turn finished: nothing left to wait for
            said = chat.before
        finally:
            if chat.isalive():
                chat.terminate(force=True)
    assert chat.exitstatus == 0, said
    assert "answered on the next start" not in said and llm.asked("what happened overnight?") == 1
