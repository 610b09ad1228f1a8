"""A chat whose worker process died mid-turn is taken over by another process within the lock's ttl
(the configured default), not minutes later, and its message is answered once."""

from __future__ import annotations

import asyncio

from gateway.config import GatewaySettings
from gateway.store import SessionStore
from gateway.store.inbox import Inbox
from tests.fakes.gateway import message
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.fakes.waiting import wait_for
from tests.fakes.workers import _count, sent, start_worker, stop

DEFAULT_TTL = float(GatewaySettings.model_fields["lock_ttl_seconds"].default)


async def test_a_crashed_workers_chat_is_answered_by_another_within_the_default_lock_ttl(redis, redis_url, key_prefix):
    slow_seen = asyncio.Event()
    stalled = {"on": True}

    def script(request: RecordedRequest) -> Reply:
        if "slow" in request.last_user_text and stalled["on"]:
            slow_seen.set()
            return Reply.slow(120, Reply.answer(f"echo: {request.last_user_text}"))
        return Reply.answer(f"echo: {request.last_user_text}")

    async with FakeLLMServer(handler=script) as server:
        doomed = start_worker(redis_url, key_prefix, server.openai_base_url)  # the shipped settings, lock ttl too
        survivor = None
        try:
            await wait_for(lambda: _count(redis, f"{key_prefix}:workers", 1), timeout=60, what="the first worker")
            await Inbox(redis, key_prefix).put(message("crash", "c-1", "slow question"))
            await asyncio.wait_for(slow_seen.wait(), timeout=60)  # the doomed worker holds the chat mid-turn
            survivor = start_worker(redis_url, key_prefix, server.openai_base_url)
            await wait_for(lambda: _count(redis, f"{key_prefix}:workers", 2), timeout=60, what="the second worker")
            stalled["on"] = False
            doomed.kill()  # SIGKILL: no release, no goodbye; only the lock's ttl says it is gone
            # What holds the chat now is the lock alone, and Redis says how long it has left: the shipped ttl at most.
            held_for_ms = await redis.pttl(SessionStore(redis, key_prefix).keys("local:crash").lock)
            await wait_for(
                lambda: _count(redis, f"{key_prefix}:sent", 1),
                timeout=DEFAULT_TTL * 4,
                what="the reply after the takeover",
            )
        finally:
            stop(doomed)
            if survivor:
                stop(survivor)  # a graceful stop: any turn still running ends first, so a second reply would show
        replies = await sent(redis, key_prefix)
    assert [r["text"] for r in replies] == ["echo: slow question"]  # answered once
    assert 0 < held_for_ms <= DEFAULT_TTL * 1000, f"the chat was held {held_for_ms} ms more (lock ttl {DEFAULT_TTL:g}s)"
