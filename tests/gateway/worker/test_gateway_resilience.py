"""What a production gateway meets: replies the platform refuses, replicas sharing chats, providers failing
mid-turn, Redis blips while a turn runs — none of them may lose, repeat or block a conversation."""

from __future__ import annotations

import asyncio

import pytest

import gateway.delivery.replies as replies_module
import gateway.worker.runner as runner_module
from agent.retrying import INBOX_ENTRY, REPLY_DELIVERY
from gateway.platforms.recording import RecordingAdapter
from gateway.store import SessionStore
from tests.fakes.gateway import make_settings, message, running_gateway
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply


def echo(request: RecordedRequest) -> Reply:
    return Reply.answer(f"echo: {request.last_user_text}")


class RefusingAdapter(RecordingAdapter):
    """A platform that refuses every reply to one chat (the user blocked the bot)."""

    def __init__(self, refused_chat: str) -> None:
        super().__init__()
        self.refused_chat = refused_chat
        self.refusals = 0

    async def send(self, chat_id: str, text: str, *, reply_to: str | None = None) -> None:
        if chat_id == self.refused_chat:
            self.refusals += 1
            raise PermissionError("Forbidden: bot was blocked by the user")
        await super().send(chat_id, text, reply_to=reply_to)


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch):
    monkeypatch.setattr(runner_module, "RETRY_DELAY_SECONDS", 0.01)
    monkeypatch.setattr(runner_module, "INBOX_ENTRY", INBOX_ENTRY.adjusted(base=0.01))
    monkeypatch.setattr(replies_module, "REPLY_DELIVERY", REPLY_DELIVERY.adjusted(base=0.01))


async def test_a_refused_reply_is_given_up_after_bounded_attempts_and_the_chat_goes_on(redis, redis_url, key_prefix):
    adapter = RefusingAdapter("blocked")
    async with FakeLLMServer(handler=echo) as server:
        settings = make_settings(redis_url, key_prefix, server.openai_base_url, context_length=16_000)
        async with running_gateway(settings, redis, adapter=adapter) as (runner, _adapter, _events):
            await runner.intake(message("blocked", "1", "first"))
            await runner.intake(message("blocked", "2", "/usage"))
            await runner.intake(message("open", "3", "hello"))
            await runner.wait_idle()
            pending = await runner.inbox.pending("local:blocked")
    assert adapter.refusals == 2 * REPLY_DELIVERY.attempts  # each reply tried a bounded number of times
    assert pending == 0  # and the chat did not get stuck behind them
    assert len([r for r in server.requests if "first" in r.last_user_text]) == 1  # the turn ran once
    assert adapter.sent == [("open", "echo: hello")]


async def test_replicas_do_not_starve_each_other_of_chats(redis, redis_url, key_prefix):
    """Each process runs two chats at a time; all four chats' messages come in through the first one. A chat's
    messages that wait behind its turn join the next one (the backlog coalesced, as shipped), so what counts is
    that every chat's last message is answered, none twice, nothing lost, and both processes did the work."""

    async def slow(request: RecordedRequest) -> Reply:
        await asyncio.sleep(0.3)
        return echo(request)

    async with FakeLLMServer(handler=slow) as server:
        settings = make_settings(redis_url, key_prefix, server.openai_base_url, context_length=16_000)
        async with (
            running_gateway(settings, redis, max_concurrent_chats=2) as (first, first_out, _),
            running_gateway(settings, redis, max_concurrent_chats=2) as (second, second_out, _),
        ):
            for turn in range(3):
                for chat in range(4):
                    await first.intake(message(f"c{chat}", f"{chat}-{turn}", f"chat {chat} turn {turn}"))
            await first.wait_idle()
            await second.wait_idle()
            store = SessionStore(redis, key_prefix)
            stored = {}
            for chat in (f"local:c{number}" for number in range(4)):
                active = await store.active(chat, await store.current_session(chat))
                stored[chat] = [m["content"] for m in active if m["role"] == "user"]
    replies = first_out.sent + second_out.sent
    assert all(text.startswith(f"echo: chat {chat[1:]} turn ") for chat, text in replies)
    assert len(replies) == len(set(replies))  # no message answered twice
    assert {chat for chat, text in replies if text.endswith("turn 2")} == {"c0", "c1", "c2", "c3"}
    assert stored == {f"local:c{chat}": [f"chat {chat} turn {turn}" for turn in range(3)] for chat in range(4)}
    assert first_out.sent and second_out.sent  # chats held by one process never hid the others' work


async def test_a_provider_failure_after_tools_ran_keeps_their_results(redis, redis_url, key_prefix):
    calls = iter(range(100))

    def script(request: RecordedRequest) -> Reply:
        step = next(calls)
        if step == 0:
            return Reply.tool_call("session_search", {"query": "deploy"}, call_id="t1")
        return Reply.error(400, "invalid request: upstream refused", kind="invalid_request_error")

    async with FakeLLMServer(handler=script) as server:
        settings = make_settings(redis_url, key_prefix, server.openai_base_url, context_length=16_000)
        async with running_gateway(settings, redis) as (runner, adapter, _events):
            await runner.intake(message("p", "1", "check the deploy"))
            await runner.wait_idle()
            store = SessionStore(redis, key_prefix)
            transcript = await store.active("local:p", await store.current_session("local:p"))
    assert [m["role"] for m in transcript] == ["user", "assistant", "tool"]  # the tool round is kept, pairs whole
    assert transcript[1]["tool_calls"][0]["id"] == transcript[2]["tool_call_id"] == "t1"
    assert adapter.sent[-1][1].startswith("⚠️ The model provider refused the request. Your message is saved")
    assert (
        "upstream" not in adapter.sent[-1][1] and "127.0.0.1" not in adapter.sent[-1][1]
    )  # no provider text or address


async def test_a_redis_blip_while_extending_the_lock_does_not_redo_the_turn(redis, redis_url, key_prefix, monkeypatch):
    async def slow(request: RecordedRequest) -> Reply:
        await asyncio.sleep(1.0)
        return echo(request)

    failures = {"left": 1}
    original = SessionStore.extend_lock

    async def flaky_extend(self, lock, ttl_seconds):
        if failures["left"]:
            failures["left"] -= 1
            raise ConnectionError("connection reset by peer")
        return await original(self, lock, ttl_seconds)

    monkeypatch.setattr(SessionStore, "extend_lock", flaky_extend)
    async with FakeLLMServer(handler=slow) as server:
        settings = make_settings(redis_url, key_prefix, server.openai_base_url, context_length=16_000)
        async with running_gateway(settings, redis, lock_ttl_seconds=1) as (runner, adapter, _events):
            await runner.intake(message("b", "1", "long question"))
            await runner.wait_idle()
    assert failures["left"] == 0  # the blip happened mid-turn
    assert len(server.requests) == 1 and adapter.sent == [("b", "echo: long question")]


async def test_a_command_retried_after_a_crash_is_not_run_again(redis, redis_url, key_prefix):
    """The command ran and its reply was recorded, then the process died before the entry left the inbox."""
    async with FakeLLMServer(handler=echo) as server:
        settings = make_settings(redis_url, key_prefix, server.openai_base_url, context_length=16_000)
        store = SessionStore(redis, key_prefix)
        async with running_gateway(settings, redis) as (runner, adapter, _events):
            await runner.intake(message("n", "1", "hello"))
            await runner.wait_idle()
            first = await store.current_session("local:n")
            original_finish = store.finish_entry.__func__  # type: ignore[attr-defined]
            crashed = {"done": False}

            async def crash_once(self, lock, sid, entry, **meta):
                if not crashed["done"] and "/new" in entry:
                    crashed["done"] = True
                    raise ConnectionError("process died before the entry was removed")
                return await original_finish(self, lock, sid, entry, **meta)

            SessionStore.finish_entry = crash_once  # type: ignore[method-assign]
            try:
                await runner.intake(message("n", "2", "/new"))
                await runner.wait_idle()
            finally:
                SessionStore.finish_entry = original_finish  # type: ignore[method-assign]
            second = await store.current_session("local:n")
            sessions = [key async for key in redis.scan_iter(match=f"{key_prefix}:{{local:n}}:s:*:meta")]
    assert second != first and len(sessions) == 2  # exactly one new session: the retry did not run /new again
    replies = [text for chat, text in adapter.sent if chat == "n"]
    assert replies[0] == "echo: hello" and replies[1].startswith("Started a new conversation")


async def test_a_provider_failure_after_an_in_loop_compaction_keeps_the_compaction_and_the_tools(
    redis, redis_url, key_prefix
):
    import random as _random

    from gateway.events import CompressEvent
    from tests.fakes.gateway import NOTES, chatter, is_summary_request

    window = 20_000
    steps = iter(range(100))

    def script(request: RecordedRequest) -> Reply:
        if is_summary_request(request):
            return Reply.answer(NOTES)
        if request.last_user_text != "dig in":
            return Reply.answer("ok")
        step = next(steps)
        if step == 0:  # a tool round, reported at 60%: the compressor runs before the next request
            reply = Reply.tool_call("session_search", {"query": "billing"}, call_id="d0")
            reply.usage = {
                "prompt_tokens": int(window * 0.6),
                "completion_tokens": 10,
                "total_tokens": int(window * 0.6) + 10,
            }
            return reply
        return Reply.error(400, "invalid request: upstream refused", kind="invalid_request_error")

    rng = _random.Random(31)
    async with FakeLLMServer(handler=script, context_limit=window) as server:
        settings = make_settings(redis_url, key_prefix, server.openai_base_url, context_length=window)
        async with running_gateway(settings, redis) as (runner, adapter, events):
            store = SessionStore(redis, key_prefix)
            await runner.intake(message("d", "0", "hello"))
            await runner.wait_idle()
            for index in range(120):
                await runner.intake(message("d", f"n{index}", chatter(rng, index), respond=False))
            await runner.intake(message("d", "1", "dig in"))
            await runner.wait_idle()
            sid = await store.current_session("local:d")
            active = await store.active("local:d", sid)
            meta = await store.meta("local:d", sid)
    assert [e.trigger for e in events if isinstance(e, CompressEvent)] == ["in_loop"]
    assert meta.compaction_count == 1  # the compaction the turn made is committed, with its engine state
    assert [m["role"] for m in active[-3:]] == ["user", "assistant", "tool"] and active[-1]["tool_call_id"] == "d0"
    assert adapter.sent[-1][1].startswith("⚠️ The model provider")
