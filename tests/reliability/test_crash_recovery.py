"""A chat whose worker process died mid-turn is taken over by another process within the lock's ttl
(the configured default), not minutes later, and its message is answered once."""

from __future__ import annotations

import asyncio
import time

from gateway.config import GatewaySettings
from gateway.store.inbox import Inbox
from tests.fakes.gateway import message
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.fakes.workers import _count, sent, start_worker, stop, wait_for

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
            await wait_for(lambda: _count(redis, f"{key_prefix}:workers", 1), timeout=60)
            await Inbox(redis, key_prefix).put(message("crash", "c-1", "slow question"))
            await asyncio.wait_for(slow_seen.wait(), timeout=60)  # the doomed worker holds the chat mid-turn
            survivor = start_worker(redis_url, key_prefix, server.openai_base_url)
            await wait_for(lambda: _count(redis, f"{key_prefix}:workers", 2), timeout=60)
            stalled["on"] = False
            doomed.kill()  # SIGKILL: no release, no goodbye; only the lock's ttl says it is gone
            killed = time.monotonic()
            await wait_for(lambda: _count(redis, f"{key_prefix}:sent", 1), timeout=DEFAULT_TTL * 4)
            took = time.monotonic() - killed
            await asyncio.sleep(0.5)
            replies = await sent(redis, key_prefix)
        finally:
            stop(doomed)
            if survivor:
                stop(survivor)
    print(f"taken over {took:.1f}s after the kill (lock ttl {DEFAULT_TTL:g}s)")
    assert [r["text"] for r in replies] == ["echo: slow question"]  # answered once
    assert took < DEFAULT_TTL + 5, f"the chat waited {took:.1f}s after its worker died (lock ttl {DEFAULT_TTL:g}s)"
