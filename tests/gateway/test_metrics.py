"""The metrics and health endpoints report what the gateway did."""

from __future__ import annotations

import httpx
from aiohttp import web

from gateway.events import CompressEvent, EventBus, TurnEvent
from gateway.metrics import GatewayWatch, add_metrics_routes
from gateway.web.server import start_site
from tests.fakes.gateway import make_settings, running_gateway
from tests.fakes.redis_time import TICK, redis_seconds, seconds_since


async def test_metrics_count_compactions_and_cache_tokens_and_health_checks_redis(redis, redis_url, key_prefix):
    settings = make_settings(redis_url, key_prefix, "http://127.0.0.1:9/v1", context_length=16_000)
    async with running_gateway(settings, redis) as (runner, _adapter, _events):
        bus: EventBus = runner.events
        await bus.emit(
            CompressEvent(
                platform="local",
                chat="local:a",
                session_id="s",
                old_session_id="",
                in_place=True,
                compression_count=1,
                trigger="hygiene",
                tokens_before=9000,
                tokens_after=2000,
                summarizer="deterministic",
            )
        )
        await bus.emit(
            TurnEvent(
                platform="local",
                chat="local:a",
                session_id="s",
                prompt_tokens=1200,
                completion_tokens=30,
                cache_read_tokens=1000,
                cache_write_tokens=150,
                latency_ms=5,
                model="claude-sonnet-4",
                cost_usd=0.0021,
                saved_usd=0.0027,
            )
        )
        app = web.Application()
        add_metrics_routes(app, GatewayWatch(bus, runner))
        site = await start_site(app, "127.0.0.1", 0, setting="gateway.metrics_port")
        port = site.addresses[0][1]
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                scraped = await client.get("/metrics")
                text = scraped.text
                health = await client.get("/healthz")
        finally:
            await site.cleanup()
    assert "foldgate_compactions_hygiene_total 1" in text
    assert "foldgate_tokens_folded_total 7000" in text
    assert "foldgate_cache_read_tokens_total 1000" in text
    assert "foldgate_cache_saved_usd_total 0.0027" in text and "foldgate_cost_usd_total 0.0021" in text
    assert health.status_code == 200 and health.json()["ok"] is True
    assert scraped.headers["content-type"].startswith("text/plain; version=")
    assert "# TYPE foldgate_chats_running gauge" in text and "foldgate_chats_running 0" in text
    assert "process_resident_memory_bytes" in text and "python_gc_collections_total" in text  # the process's own


async def test_the_send_budget_pause_every_process_sees_is_a_figure(redis, redis_url, key_prefix):
    from prometheus_client import generate_latest

    from gateway.delivery.budget import SendBudget
    from gateway.delivery.gate import ChatBuckets
    from gateway.metrics import registry_for
    from gateway.web.pages import ENVIRONMENT

    settings = make_settings(redis_url, key_prefix, "http://127.0.0.1:9/v1", context_length=16_000)
    async with running_gateway(settings, redis) as (runner, _adapter, _events):
        budget = SendBudget(runner.store.channel, key_prefix)
        buckets = ChatBuckets(settings.delivery).bot_wide(["tg", "local", "dc"])
        assert [bucket.key_tag for bucket in buckets] == ["tg:bot", "dc:bot"]
        watch = GatewayWatch(runner.events, runner, budget, buckets)
        paused = await redis_seconds(redis)
        await budget.pause([buckets[0]], 20)  # a 429 from Telegram, seen by another process
        figures = await watch.sample()
        telegram, discord = figures.budgets
        # what is left of the pause, on the clock of the Redis server that holds it
        assert 20 - await seconds_since(redis, paused) - TICK <= telegram.paused_seconds <= 20 + TICK
        assert telegram.tokens == 0
        assert discord.paused_seconds == 0 and discord.tokens == discord.bucket.limit.capacity
        assert figures.redis_used_memory and figures.redis_used_memory > 0
        page = ENVIRONMENT.get_template("operator_gateway_figures.html").render(figures=figures, help={})
        assert "tg:bot bot" in page and " s more" in page
        scraped = generate_latest(registry_for(watch)).decode()
    assert f'foldgate_send_budget_paused_seconds{{bucket="tg:bot:bot"}} {round(telegram.paused_seconds, 3)}' in scraped
    assert 'foldgate_send_budget_paused_seconds{bucket="dc:bot:bot"} 0.0' in scraped
