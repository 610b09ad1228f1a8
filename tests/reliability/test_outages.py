"""Outages: a provider that fails or hangs for a while, one that never comes back, and Redis restarting.

A chat is told once per outage that its messages are kept; when the provider returns every one of them
is stored in order and answered — together, in one reply to the newest, as a backlog is (coalescing on,
as shipped) — and never twice; a bound ends the wait with one final notice, and the log says "away" once
and "back" once instead of a traceback per retry.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

from redis.asyncio import Redis

from gateway.server.lifecycle import EmbeddedRedis
from gateway.store import SessionStore
from tests.fakes.gateway import message, running_gateway, settings_for
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply

KEPT = "will be answered as soon as the provider is back"


def down_for(seconds: float, failure: Reply | None = None):
    """A handler failing every request (503 unless told otherwise) for ``seconds``, then echoing."""
    back_at = time.monotonic() + seconds

    def handle(request: RecordedRequest) -> Reply:
        if time.monotonic() < back_at:
            return failure or Reply.error(503, "upstream overloaded", kind="server_error")
        return Reply.answer(f"echo: {request.last_user_text}")

    return handle


async def wait_for_replies(adapter, chat_id: str, count: int, timeout: float = 20.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        texts = [text for chat, text in adapter.sent if chat == chat_id and text.startswith("echo:")]
        if len(texts) >= count:
            return texts
        await asyncio.sleep(0.02)
    raise AssertionError(f"only {adapter.sent!r} after {timeout}s")


async def test_a_provider_down_for_a_while_costs_one_notice_and_the_kept_messages_are_answered_together(
    redis, redis_url, key_prefix
):
    async with FakeLLMServer(handler=down_for(2.0)) as server:
        settings = settings_for(redis_url, key_prefix, server.openai_base_url, bound=10)
        async with running_gateway(settings, redis) as (runner, adapter, _events):
            for n in range(1, 5):  # all four in before the provider is back
                await runner.intake(message("a", str(n), f"question {n}"))
                await asyncio.sleep(0.3)
            await runner.intake(message("b", "1", "other chat"))  # another chat waits its own way
            await wait_for_replies(adapter, "a", 1)
            await runner.wait_idle()
            store = SessionStore(redis, key_prefix)
            stored = [
                m["content"]
                for m in await store.active("local:a", await store.current_session("local:a"))
                if m["role"] == "user"
            ]
    notices = [text for chat, text in adapter.sent if chat == "a" and not text.startswith("echo:")]
    assert len(notices) == 1 and KEPT in notices[0] and "could not be reached" in notices[0]
    answers = [text for chat, text in adapter.sent if chat == "a" and text.startswith("echo:")]
    assert answers == ["echo: question 4"]  # the retried turn took the other three in: one reply, to the newest
    assert stored == [f"question {n}" for n in range(1, 5)]  # every message kept, once, in order
    assert [text for chat, text in adapter.sent if chat == "b"][-1] == "echo: other chat"
    assert "127.0.0.1" not in notices[0]


async def test_a_hung_provider_times_out_as_configured_and_counts_as_down(redis, redis_url, key_prefix):
    async with FakeLLMServer(handler=down_for(1.5, Reply.hang())) as server:
        settings = settings_for(redis_url, key_prefix, server.openai_base_url, bound=10, timeout=0.3)
        async with running_gateway(settings, redis) as (runner, adapter, _events):
            await runner.intake(message("h", "1", "first"))
            await runner.intake(message("h", "2", "second"))  # waits behind the hung turn, then joins its retry
            await wait_for_replies(adapter, "h", 1)
            sent_at = time.monotonic()
            await runner.intake(message("h", "3", "after recovery"))
            answers = await wait_for_replies(adapter, "h", 2)
            latency = time.monotonic() - sent_at
            await runner.wait_idle()
            store = SessionStore(redis, key_prefix)
            stored = [
                m["content"]
                for m in await store.active("local:h", await store.current_session("local:h"))
                if m["role"] == "user"
            ]
    notices = [text for chat, text in adapter.sent if not text.startswith("echo:")]
    assert len(notices) == 1 and "did not answer in time" in notices[0] and KEPT in notices[0]
    assert answers == ["echo: second", "echo: after recovery"]
    assert stored == ["first", "second", "after recovery"]
    assert latency < 2.0  # not stuck behind a 120 s timeout


async def test_a_provider_that_never_returns_gets_one_final_notice_and_the_messages_are_kept(
    redis, redis_url, key_prefix
):
    async with FakeLLMServer(handler=down_for(3600)) as server:
        settings = settings_for(redis_url, key_prefix, server.openai_base_url, bound=1.5)
        async with running_gateway(settings, redis) as (runner, adapter, _events):
            await runner.intake(message("n", "1", "are you there?"))
            await runner.intake(message("n", "2", "hello?"))
            started = time.monotonic()
            await runner.wait_idle()
            waited = time.monotonic() - started
    texts = [text for _chat, text in adapter.sent]
    assert len(texts) == 2 and KEPT in texts[0]
    assert "stopped waiting" in texts[1] and "saved" in texts[1]
    assert waited < 5  # bounded by the configuration
    store = SessionStore(redis, key_prefix)
    transcript = await store.active("local:n", await store.current_session("local:n"))
    assert [m["content"] for m in transcript if m["role"] == "user"] == ["are you there?", "hello?"]


async def test_a_huge_message_stored_unanswered_by_an_outage_is_bounded_like_any_turns(redis, redis_url, key_prefix):
    """Messages the final notice stores go through the same size bound: the live transcript keeps an
    excerpt, the original is archived whole."""
    huge = "start of the paste " + "lorem ipsum dolor " * 60_000 + " end of the paste"
    async with FakeLLMServer(handler=down_for(3600)) as server:
        settings = settings_for(redis_url, key_prefix, server.openai_base_url, bound=1.5)
        async with running_gateway(settings, redis) as (runner, _adapter, _events):
            await runner.intake(message("h", "1", huge))
            await runner.wait_idle()
    store = SessionStore(redis, key_prefix)
    sid = await store.current_session("local:h")
    (kept,) = [m for m in await store.active("local:h", sid) if m["role"] == "user"]
    assert len(kept["content"]) < len(huge) / 10 and kept.get("_orig_id")
    (original,) = await store.get_messages("local:h", sid, [kept["_orig_id"]])
    assert original["content"] == huge


async def test_a_redis_restart_logs_away_once_and_back_once_without_tracebacks(tmp_path, caplog):
    server = EmbeddedRedis(tmp_path / "home")
    url = await server.start()
    client = Redis.from_url(url, decode_responses=True)
    prefix = f"fgtest-{uuid.uuid4().hex}"
    try:
        async with FakeLLMServer(handler=lambda r: Reply.answer(f"echo: {r.last_user_text}")) as llm:
            settings = settings_for(url, prefix, llm.openai_base_url, bound=10)
            async with running_gateway(settings, client) as (runner, adapter, _events):
                await runner.intake(message("r", "1", "before"))
                await wait_for_replies(adapter, "r", 1)
                caplog.clear()
                caplog.set_level(logging.INFO)
                await server.stop()
                await asyncio.sleep(3.0)
                assert await server.start() == url
                deadline = time.monotonic() + 15
                while True:  # the platform redelivers what it could not hand over meanwhile
                    try:
                        await runner.intake(message("r", "2", "after"))
                        break
                    except Exception:
                        assert time.monotonic() < deadline
                        await asyncio.sleep(0.1)
                await wait_for_replies(adapter, "r", 2)
                await asyncio.sleep(0.5)
                records = list(caplog.records)
    finally:
        await client.aclose()
        await server.stop()
    gateway_lines = [r for r in records if r.name.startswith("gateway")]
    assert len([r for r in gateway_lines if "Redis is away" in r.getMessage()]) == 1, caplog.text
    assert len([r for r in gateway_lines if "Redis is back" in r.getMessage()]) == 1, caplog.text
    assert not [r for r in records if r.exc_info and r.levelno >= logging.INFO], caplog.text
    assert "Traceback" not in caplog.text
