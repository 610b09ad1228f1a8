"""Each configuration key this round added, set in Settings, changes what foldgate does."""

from __future__ import annotations

import asyncio

import pytest

from agent.llm.errors import ProviderError, ProviderTimeout
from gateway.agents import AgentBuilder
from gateway.config import DeliverySettings, Settings
from gateway.delivery.gate import ChatBuckets
from gateway.platforms.base import IncomingMessage
from gateway.run.assembly import message_path
from tests.fakes.connect_proxy import ConnectProxy
from tests.fakes.gateway import make_settings, message, running_gateway
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.network import BlackHole

HI = [{"role": "user", "content": "hi"}]


def settings_for(tmp_path, base_url: str, **model) -> Settings:
    return Settings(
        model={"provider": "custom", "name": "gpt-4o", "base_url": base_url, **model}, gateway={"home": str(tmp_path)}
    )


async def answer(settings: Settings):
    builder = AgentBuilder(settings)
    try:
        return await builder.chat_model.complete(HI, model=settings.model.name, max_tokens=5)
    finally:
        await builder.aclose()


@pytest.mark.parametrize("stream", [True, False])
async def test_model_stream(tmp_path, stream):
    async with FakeLLMServer() as server:
        await answer(settings_for(tmp_path, server.openai_base_url, stream=stream))
    assert server.requests[0].body.get("stream", False) is stream


@pytest.mark.parametrize(("retries", "succeeds"), [(0, False), (1, True)])
async def test_model_max_retries(tmp_path, retries, succeeds):
    async with FakeLLMServer() as server:
        server.enqueue(Reply.server_error(503))
        settings = settings_for(tmp_path, server.openai_base_url, max_retries=retries)
        if succeeds:
            assert (await answer(settings)).text == "ok"
        else:
            with pytest.raises(ProviderError):
                await answer(settings)
    assert len(server.requests) == retries + 1


async def ends_by_the_key(configured: Settings, shipped_seconds: float) -> None:
    """A call to a peer that never answers ends in :class:`ProviderTimeout`, and by the key under test: before
    half the shipped timeout of that kind could have ended it. A timeout's effect is time, so a clock is the check
    here, but its one bound is the shipped value (tens of times the configured one), not a guess at how fast the
    machine is."""
    async with asyncio.timeout(shipped_seconds / 2):
        with pytest.raises(ProviderTimeout):
            await answer(configured)


async def test_model_timeout_seconds(tmp_path):
    async with FakeLLMServer(default=Reply.hang()) as server:
        shipped = settings_for(tmp_path, server.openai_base_url).model.timeout_seconds
        await ends_by_the_key(
            settings_for(tmp_path, server.openai_base_url, timeout_seconds=0.3, max_retries=0), shipped
        )


async def test_model_connect_timeout_seconds(tmp_path):
    with BlackHole("127.0.0.2") as hole:
        shipped = settings_for(tmp_path, hole.url + "/v1").model.connect_timeout_seconds
        await ends_by_the_key(
            settings_for(tmp_path, hole.url + "/v1", connect_timeout_seconds=0.3, max_retries=0), shipped
        )


async def test_model_and_summarizer_proxy(tmp_path):
    async with FakeLLMServer() as server, ConnectProxy() as proxy:
        settings = Settings(
            model={"provider": "custom", "name": "gpt-4o", "base_url": server.openai_base_url, "proxy": proxy.url},
            auxiliary={"compression": {"proxy": proxy.url, "connect_timeout_seconds": 3}},
            gateway={"home": str(tmp_path)},
        )
        builder = AgentBuilder(settings)
        try:
            await builder.chat_model.complete(HI, model="gpt-4o", max_tokens=5)
            assert builder.summarizer is not None
            assert builder.summarizer.client.options.connect_timeout_seconds == 3
            assert await builder.summarizer.call_llm(messages=list(HI), max_tokens=5) == "ok"
        finally:
            await builder.aclose()
    assert len(proxy.targets) == 2 and all(str(server.port) in target for target in proxy.targets)


async def test_gateway_coalesce_max_messages_bounds_what_one_turn_takes_in(redis, redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("noted")) as server:
        settings = make_settings(
            redis_url, key_prefix, server.openai_base_url, context_length=64_000, gateway={"coalesce_max_messages": 5}
        )
        _, inbox = message_path(redis, settings)
        for number in range(12):
            await inbox.put(message("c1", str(number), f"{number}: note"))
        async with running_gateway(settings, redis) as (runner, adapter, _):
            await runner.wait_idle()
    assert [text for _, text in adapter.sent] == ["noted"] * 3  # 5 + 5 + 2
    assert len(server.requests) == 3


async def test_gateway_coalesce_max_tokens_bounds_what_the_request_carries_verbatim(redis, redis_url, key_prefix):
    """Past the bound the older messages are stored ahead of the turn: still one turn, one reply, all in order."""
    async with FakeLLMServer(default=Reply.answer("noted")) as server:
        settings = make_settings(
            redis_url, key_prefix, server.openai_base_url, context_length=64_000, gateway={"coalesce_max_tokens": 100}
        )
        store, inbox = message_path(redis, settings)
        words = " ".join(f"word{k}" for k in range(8))
        texts = [f"{number}: {words}" for number in range(12)]
        for number, text in enumerate(texts):
            await inbox.put(message("c1", str(number), text))
        async with running_gateway(settings, redis) as (runner, adapter, _):
            await runner.wait_idle()
        sid = await store.current_session("local:c1")
        stored = [m["content"] for m in await store.active("local:c1", sid) if m["role"] == "user"]
    assert [text for _, text in adapter.sent] == ["noted"]
    assert stored == texts
    assert [m["content"] for m in server.requests[0].messages if m["role"] == "user"] == texts


@pytest.mark.parametrize("coalesce", [True, False])
async def test_gateway_coalesce_backlog_reaches_the_runner(tmp_path, redis_url, key_prefix, coalesce):
    from gateway.run.assembly import open_gateway

    settings = Settings(
        redis={"url": redis_url, "key_prefix": key_prefix},
        platforms={"local": {"enabled": True}},
        gateway={"home": str(tmp_path), "coalesce_backlog": coalesce, "coalesce_max_messages": 7},
    )
    gateway = await open_gateway(settings, {})
    try:
        assert gateway.runner.coalesce_backlog is coalesce and gateway.runner.coalesce_max_messages == 7
    finally:
        await gateway.close()


async def test_gateway_lock_ttl_seconds_is_the_ttl_chats_are_claimed_and_renewed_with(
    tmp_path, redis, redis_url, key_prefix
):
    from gateway.run.assembly import open_gateway

    settings = Settings(
        redis={"url": redis_url, "key_prefix": key_prefix},
        platforms={"local": {"enabled": True}},
        gateway={"home": str(tmp_path), "lock_ttl_seconds": 7},
    )
    gateway = await open_gateway(settings, {})
    try:
        assert gateway.runner.lock_ttl == 7 and gateway.runner.keeper.ttl == 7
        lock, _head = await gateway.store.claim("local:ttl", gateway.runner.lock_ttl)
        assert lock is not None and 6_000 < await redis.pttl(gateway.store.keys("local:ttl").lock) <= 7_000
        await gateway.store.release_lock(lock)
    finally:
        await gateway.close()


def test_delivery_limits_shape_the_buckets():
    buckets = ChatBuckets(
        DeliverySettings(
            telegram={"per_chat_per_second": 2, "per_group_per_minute": 40, "per_bot_per_second": 60},
            discord={"per_channel_per_5_seconds": 10, "per_bot_per_second": 100},
        )
    )
    group = buckets.for_message(IncomingMessage(platform="tg", chat_id="-100", update_id="1", text="x"))
    assert [(b.name, b.limit.capacity + b.limit.per_second * window) for b, window in zip(group, (1, 60, 1))] == [
        ("chat", 2 + 1.6),
        ("group", 40),
        ("bot", 60),
    ]
    channel = buckets.for_message(IncomingMessage(platform="dc", chat_id="7", update_id="1", text="x"))
    assert [(b.name, round(b.limit.capacity + b.limit.per_second * w, 6)) for b, w in zip(channel, (5, 1))] == [
        ("channel", 10),
        ("bot", 100),
    ]
    assert buckets.for_message(IncomingMessage(platform="local", chat_id="t", update_id="1", text="x")) == []
