"""The gateway end to end on real Redis with a fake provider on loopback: hygiene, in-loop compaction,
in-place archive and rotation, recovery from the archive."""

from __future__ import annotations

import json
import random
import time

import pytest

import gateway.worker.compactions
from agent.tokens import count_messages
from gateway.events import CompressEvent
from gateway.store import SessionStore
from tests.fakes.gateway import NOTES, SERVICES, chatter, is_summary_request, make_settings, message, running_gateway
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply


def answer(request: RecordedRequest) -> Reply:
    """Notes for summary requests, an echo of the newest user message for chat requests."""
    if is_summary_request(request):
        return Reply.answer(NOTES)
    return Reply.answer(f"echo: {request.last_user_text}")


class ClockAhead:
    """Stands in for the ``time`` module where the gateway measures how long a chat was silent: real time, moved
    on by ``ahead`` seconds. A test then makes "an hour later" happen at once, and a slow machine can never make a
    gap look long enough by accident."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def time(self) -> float:
        return time.time() + self.ahead


async def test_overnight_backlog_triggers_hygiene_and_no_prompt_exceeds_the_window(redis, redis_url, key_prefix):
    window = 16_000
    rng = random.Random(3)
    async with FakeLLMServer(handler=answer, context_limit=window) as server:
        settings = make_settings(redis_url, key_prefix, server.openai_base_url, context_length=window)
        async with running_gateway(settings, redis) as (runner, adapter, events):
            await runner.intake(
                message("ops", "u-0", "we are chasing the login timeout tonight, fix is commit 9f3c2ab71d")
            )
            await runner.wait_idle()
            night_texts = [chatter(rng, index) for index in range(340)]
            for index, text in enumerate(night_texts):
                await runner.intake(message("ops", f"night-{index}", text, respond=False))
            await runner.wait_idle()
            store = SessionStore(redis, key_prefix)
            sid = await store.current_session("local:ops")
            night = await store.meta("local:ops", sid)
            assert night.count >= 340 and night.tokens >= 0.85 * window  # the backlog alone fills the window

            await runner.intake(message("ops", "morning", "good morning, anything on fire?"))
            await runner.wait_idle()

            morning = await store.meta("local:ops", await store.current_session("local:ops"))
            active = await store.active("local:ops", sid)
    hygiene_runs = [e for e in events if isinstance(e, CompressEvent) and e.trigger == "hygiene"]
    assert len(hygiene_runs) == 1
    assert hygiene_runs[0].tokens_after < hygiene_runs[0].tokens_before / 2
    assert morning.tokens < 0.5 * window and morning.session_id == sid  # shrunk, in place
    assert adapter.sent[-1] == ("ops", "echo: good morning, anything on fire?")
    chat_requests = [r for r in server.requests if not is_summary_request(r)]
    assert chat_requests and max(count_messages(r.messages) for r in server.requests) < window
    archived = await store.archive("local:ops", sid)
    assert len(archived) >= 300  # nothing lost: every night message is archived or still live
    stored = {m.get("content") for m in archived + active}
    assert all(text in stored for text in night_texts)


async def test_in_loop_compaction_fires_mid_tool_loop_and_the_turn_completes(redis, redis_url, key_prefix):
    window = 20_000
    rng = random.Random(5)
    async with FakeLLMServer(context_limit=window) as server:
        settings = make_settings(redis_url, key_prefix, server.openai_base_url, context_length=window)
        calls = iter(range(1000))

        def script(request: RecordedRequest) -> Reply:
            if is_summary_request(request):
                return Reply.answer(NOTES)
            step = next(calls)
            if step == 0:
                return Reply.answer("ok")
            if step < 3:  # two tool rounds, the provider reporting 60% of the window
                reply = Reply.tool_call("session_search", {"query": "p99 billing-api"}, call_id=f"call_{step}")
                reply.usage = {
                    "prompt_tokens": int(window * 0.6),
                    "completion_tokens": 20,
                    "total_tokens": int(window * 0.6) + 20,
                }
                return reply
            return Reply.answer("the billing-api p99 is back to normal")

        server.handler = script
        async with running_gateway(settings, redis) as (runner, adapter, events):
            await runner.intake(message("dev", "u-0", "hello"))
            await runner.wait_idle()
            for index in range(60):
                await runner.intake(message("dev", f"log-{index}", chatter(rng, index), respond=False))
            await runner.wait_idle()
            await runner.intake(message("dev", "ask", "how is billing-api doing?"))
            await runner.wait_idle()
    in_loop = [e for e in events if isinstance(e, CompressEvent) and e.trigger == "in_loop"]
    assert len(in_loop) == 1 and in_loop[0].in_place
    assert adapter.sent[-1] == ("dev", "the billing-api p99 is back to normal")


async def test_in_place_keeps_one_session_id_and_search_finds_what_only_the_archive_holds(redis, redis_url, key_prefix):
    window = 16_000
    rng = random.Random(9)
    async with FakeLLMServer(context_limit=window) as server:
        settings = make_settings(redis_url, key_prefix, server.openai_base_url, context_length=window)
        turn = iter(range(1000))

        def script(request: RecordedRequest) -> Reply:
            if is_summary_request(request):
                return Reply.answer(NOTES)
            if request.messages[-1].get("role") == "tool":
                return Reply.answer("from the archive: " + request.messages[-1]["content"])
            if "which port" in request.last_user_text:
                return Reply.tool_call("session_search", {"query": "staging port"}, call_id=f"s{next(turn)}")
            return Reply.answer("ok")

        server.handler = script
        async with running_gateway(settings, redis) as (runner, adapter, events):
            store = SessionStore(redis, key_prefix)
            await runner.intake(message("a", "0", "hello"))
            await runner.wait_idle()
            first_sid = await store.current_session("local:a")
            for index in range(400):
                text = "note: the staging port is 8443 and the prod port is 443" if index == 30 else chatter(rng, index)
                await runner.intake(message("a", f"n{index}", text, respond=False))
            await runner.wait_idle()
            await runner.intake(message("a", "q", "which port does staging use?"))
            await runner.wait_idle()
            sid = await store.current_session("local:a")
            active = await store.active("local:a", sid)
            archived = await store.archive("local:a", sid)
    assert sid == first_sid  # one session id from start to end
    original = [m for m in archived if m.get("content") == "note: the staging port is 8443 and the prod port is 443"]
    assert len(original) == 1 and original[0]["_id"] not in {m["_id"] for m in active}
    hits = json.loads(adapter.sent[-1][1].removeprefix("from the archive: "))["hits"]
    assert hits[0]["message_id"] == original[0]["_id"] and "8443" in hits[0]["snippet"]
    assert len({m["_id"] for m in archived} | {m["_id"] for m in active}) == len(archived) + len(active)


async def test_rotation_links_parent_sessions_and_the_chat_follows_the_newest(redis, redis_url, key_prefix):
    window = 16_000
    rng = random.Random(13)
    async with FakeLLMServer(context_limit=window, handler=answer) as server:
        settings = make_settings(
            redis_url, key_prefix, server.openai_base_url, context_length=window, compression={"in_place": False}
        )
        async with running_gateway(settings, redis) as (runner, adapter, events):
            store = SessionStore(redis, key_prefix)
            await runner.intake(message("r", "0", "start"))
            await runner.wait_idle()
            first = await store.current_session("local:r")
            for round_ in range(2):
                for index in range(380):
                    await runner.intake(message("r", f"{round_}-{index}", chatter(rng, index), respond=False))
                await runner.wait_idle()
                await runner.intake(message("r", f"q{round_}", f"question {round_}"))
                await runner.wait_idle()
            newest = await store.current_session("local:r")
            chain = []
            sid: str | None = newest
            while sid:
                chain.append(sid)
                sid = (await store.meta("local:r", sid)).parent_session_id
    compactions = [e for e in events if isinstance(e, CompressEvent)]
    assert len(compactions) == 2 and all(not e.in_place and e.old_session_id for e in compactions)
    assert chain[-1] == first and len(chain) == 3 and chain[0] == newest
    assert adapter.sent[-1] == ("r", "echo: question 1")


async def test_a_chat_resuming_after_the_idle_gap_is_compacted_before_the_turn(
    redis, redis_url, key_prefix, monkeypatch: pytest.MonkeyPatch
):
    window = 40_000
    gap = 3600  # an hour of silence: far beyond any pause a loaded machine puts between two turns
    clock = ClockAhead()
    monkeypatch.setattr(gateway.worker.compactions, "time", clock)
    rng = random.Random(17)
    async with FakeLLMServer(context_limit=window, handler=answer) as server:
        settings = make_settings(
            redis_url,
            key_prefix,
            server.openai_base_url,
            context_length=window,
            compression={"idle_compact_after_seconds": gap},
        )
        async with running_gateway(settings, redis) as (runner, adapter, events):
            await runner.intake(message("idle", "0", "start"))
            await runner.wait_idle()
            for index in range(200):  # ~9K tokens: above threshold × target_ratio (4K), below 50%
                await runner.intake(message("idle", f"n{index}", chatter(rng, index), respond=False))
            await runner.intake(message("idle", "1", "still there?"))
            await runner.wait_idle()
            assert not [e for e in events if isinstance(e, CompressEvent)]  # no gap yet: nothing compacted
            clock.ahead = gap + 1  # the chat has been silent for longer than the idle gap
            await runner.intake(message("idle", "2", "back after a break"))
            await runner.wait_idle()
    idle = [e for e in events if isinstance(e, CompressEvent) and e.trigger == "idle"]
    assert len(idle) == 1 and idle[0].tokens_after < idle[0].tokens_before
    assert adapter.sent[-1] == ("idle", "echo: back after a break")


async def test_messages_created_and_stubbed_within_one_turn_are_archived(redis, redis_url, key_prefix):
    """The lean tail stubs old tool results even of the running turn; their originals were never stored."""
    window = 20_000
    rng = random.Random(23)
    async with FakeLLMServer(context_limit=window) as server:
        settings = make_settings(redis_url, key_prefix, server.openai_base_url, context_length=window)
        rounds = iter(range(1000))

        def script(request: RecordedRequest) -> Reply:
            if is_summary_request(request):
                return Reply.answer(NOTES)
            if request.last_user_text != "investigate":
                return Reply.answer("ok")
            step = next(rounds)
            if step < 10:  # ten rounds of searching the history, each result a kilobyte or more
                reply = Reply.tool_call("session_search", {"query": SERVICES[step % len(SERVICES)]}, call_id=f"r{step}")
                if step == 8:  # the provider reports 60% of the window: the compressor runs in the loop
                    reply.usage = {
                        "prompt_tokens": int(window * 0.6),
                        "completion_tokens": 20,
                        "total_tokens": int(window * 0.6) + 20,
                    }
                return reply
            return Reply.answer("done investigating")

        server.handler = script
        async with running_gateway(settings, redis) as (runner, adapter, events):
            store = SessionStore(redis, key_prefix)
            await runner.intake(message("f", "0", "hello"))
            await runner.wait_idle()
            for index in range(150):
                await runner.intake(message("f", f"n{index}", chatter(rng, index), respond=False))
            await runner.intake(message("f", "1", "investigate"))
            await runner.wait_idle()
            sid = await store.current_session("local:f")
            active = await store.active("local:f", sid)
            archived = await store.archive("local:f", sid)
    assert [e.trigger for e in events if isinstance(e, CompressEvent)] == ["in_loop"]
    assert adapter.sent[-1] == ("f", "done investigating")
    live = {m.get("tool_call_id"): m for m in active if m.get("role") == "tool"}
    stubbed = [call_id for call_id, m in live.items() if '"hits"' not in str(m.get("content"))]
    assert stubbed  # some of this turn's results were replaced by stubs in the live context …
    originals = {m.get("tool_call_id"): m for m in archived if m.get("role") == "tool"}
    for call_id in stubbed:  # … and every original is in the archive, whole
        assert '"hits"' in originals[call_id]["content"]
