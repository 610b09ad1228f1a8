"""A lock that a Redis outage kept a worker from releasing is released as soon as Redis answers again.

Redis keeps a chat's lock across a restart (the append-only file holds it), so a worker whose release
failed while Redis was away would otherwise leave the chat waiting out the whole lock — 15 s with the
shipped settings — after every outage. The dispatcher gives such locks back on its next pass.
"""

from __future__ import annotations

import asyncio

from tests.fakes.gateway import make_settings, message, running_gateway
from tests.fakes.llm_server import FakeLLMServer, Reply


async def test_a_lock_left_by_an_outage_is_given_back_on_the_next_pass(redis, redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("hello again")) as server:
        settings = make_settings(redis_url, key_prefix, server.openai_base_url, context_length=16_000)
        async with running_gateway(settings, redis) as (runner, adapter, _):
            lock, _ = await runner.store.claim("local:c", settings.gateway.lock_ttl_seconds)
            assert lock is not None
            lock_key = runner.store.keys("local:c").lock
            # As the worker's release that failed while Redis was away leaves it: the lock held, its chat owed.
            runner._owed_releases["local:c"] = (lock, 0.0)
            await runner.intake(message("c", "u1", "are you there?"))
            await asyncio.wait_for(runner.wait_idle(), 10)  # far less than the 15 s the lock would have held
            assert [text for _, text in adapter.sent] == ["hello again"]
            assert runner._owed_releases == {}
            assert await redis.exists(lock_key) == 0
