"""Outages: a provider that fails or hangs for a while, one that never comes back, and Redis restarting.

A chat is told once per outage that its messages are kept; when the provider returns every one of them
is stored in order and answered — together, in one reply to the newest, as a backlog is (coalescing on,
as shipped) — and never twice; a bound ends the wait with one final notice, and the log says "away" once
and "back" once instead of a traceback per retry.
"""

from __future__ import annotations

import logging
import uuid

from redis.asyncio import Redis

from gateway.server.lifecycle import EmbeddedRedis
from gateway.store import SessionStore
from tests.fakes.gateway import message, running_gateway, settings_for
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.fakes.waiting import wait_for

KEPT = "will be answered as soon as the provider is back"


class Outage:
    """A provider that fails every request (503 unless told otherwise) until the test ends the outage, then
    echoes: the test says when it is back, after what it wanted to happen during the outage has happened."""

    def __init__(self, failure: Reply | None = None) -> None:
        self.failure = failure or Reply.error(503, "upstream overloaded", kind="server_error")
        self.down = True

    def __call__(self, request: RecordedRequest) -> Reply:
        return self.failure if self.down else Reply.answer(f"echo: {request.last_user_text}")

    def end(self) -> None:
        self.down = False


def echoes(adapter, chat_id: str) -> list[str]:
    return [text for chat, text in adapter.sent if chat == chat_id and text.startswith("echo:")]


async def wait_for_replies(adapter, chat_id: str, count: int) -> list[str]:
    """The chat's echoed replies once there are ``count`` of them."""

    def enough() -> list[str]:
        texts = echoes(adapter, chat_id)
        return texts if len(texts) >= count else []

    return await wait_for(enough, what=f"{count} replies in chat {chat_id}")


def logged(caplog, text: str) -> bool:
    """Whether the gateway logged a line holding ``text``."""
    return any(record.name.startswith("gateway") and text in record.getMessage() for record in caplog.records)


def told(adapter, chat_id: str) -> bool:
    """Whether the chat has been told its messages are kept."""
    return any(chat == chat_id and KEPT in text for chat, text in adapter.sent)


def asked_about(server: FakeLLMServer, text: str) -> bool:
    """Whether the provider has been asked (and, down, refused) a turn whose newest message is ``text``."""
    return any(request.last_user_text == text for request in server.requests)


async def test_a_provider_down_for_a_while_costs_one_notice_and_the_kept_messages_are_answered_together(
    redis, redis_url, key_prefix
):
    outage = Outage()
    async with FakeLLMServer(handler=outage) as server:
        settings = settings_for(redis_url, key_prefix, server.openai_base_url, bound=10)
        async with running_gateway(settings, redis) as (runner, adapter, _events):
            await runner.intake(message("a", "1", "question 1"))
            await wait_for(lambda: told(adapter, "a"), what="chat a to be told its message is kept")
            for n in range(2, 5):  # all four in before the provider is back
                await runner.intake(message("a", str(n), f"question {n}"))
            await runner.intake(message("b", "1", "other chat"))  # another chat waits its own way
            await wait_for(lambda: asked_about(server, "other chat"), what="chat b's turn to find the provider down")
            outage.end()
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
    outage = Outage(Reply.hang())  # a hung request is never answered: only the configured timeout ends it
    async with FakeLLMServer(handler=outage) as server:
        settings = settings_for(redis_url, key_prefix, server.openai_base_url, bound=10, timeout=0.3)
        async with running_gateway(settings, redis) as (runner, adapter, _events):
            await runner.intake(message("h", "1", "first"))
            await runner.intake(message("h", "2", "second"))  # waits behind the hung turn, then joins its retry
            await wait_for(lambda: told(adapter, "h"), what="the hung turn to time out and the chat to be told")
            outage.end()
            await wait_for_replies(adapter, "h", 1)
            await runner.intake(message("h", "3", "after recovery"))
            answers = await wait_for_replies(adapter, "h", 2)
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
    # answered by its first request: not stuck behind the hung ones, which the provider still holds open
    assert sum(request.last_user_text == "after recovery" for request in server.requests) == 1


async def test_a_provider_that_never_returns_gets_one_final_notice_and_the_messages_are_kept(
    redis, redis_url, key_prefix
):
    async with FakeLLMServer(handler=Outage()) as server:
        settings = settings_for(redis_url, key_prefix, server.openai_base_url, bound=1.5)
        async with running_gateway(settings, redis) as (runner, adapter, _events):
            await runner.intake(message("n", "1", "are you there?"))
            await runner.intake(message("n", "2", "hello?"))
            await runner.wait_idle()
    texts = [text for _chat, text in adapter.sent]
    assert len(texts) == 2 and KEPT in texts[0]
    # bounded by the configuration: the shipped bound (15 minutes) could not have run out by now
    assert "stopped waiting" in texts[1] and "saved" in texts[1]
    store = SessionStore(redis, key_prefix)
    transcript = await store.active("local:n", await store.current_session("local:n"))
    assert [m["content"] for m in transcript if m["role"] == "user"] == ["are you there?", "hello?"]


async def test_a_huge_message_stored_unanswered_by_an_outage_is_bounded_like_any_turns(redis, redis_url, key_prefix):
    """Messages the final notice stores go through the same size bound: the live transcript keeps an
    excerpt, the original is archived whole."""
    huge = "start of the paste " + "lorem ipsum dolor " * 60_000 + " end of the paste"
    async with FakeLLMServer(handler=Outage()) as server:
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
                await wait_for(lambda: logged(caplog, "Redis is away"), what="the gateway to notice Redis is away")
                assert await server.start() == url

                async def handed_over() -> bool:  # the platform redelivers what it could not hand over meanwhile
                    try:
                        await runner.intake(message("r", "2", "after"))
                    except Exception:
                        return False
                    return True

                await wait_for(handed_over, what="the message to be handed over once Redis is back", interval=0.1)
                await wait_for_replies(adapter, "r", 2)
                await wait_for(lambda: logged(caplog, "Redis is back"), what="the gateway to say Redis is back")
                await runner.wait_idle()
                records = list(caplog.records)
    finally:
        await client.aclose()
        await server.stop()
    gateway_lines = [r for r in records if r.name.startswith("gateway")]
    assert len([r for r in gateway_lines if "Redis is away" in r.getMessage()]) == 1, caplog.text
    assert len([r for r in gateway_lines if "Redis is back" in r.getMessage()]) == 1, caplog.text
    assert not [r for r in records if r.exc_info and r.levelno >= logging.INFO], caplog.text
    assert "Traceback" not in caplog.text
