"""An overnight backlog never carries a request past the model's window (SPEC S2.1, B12).

Three chats wait when the gateway starts — 50, 400 and 2,000 messages, every one addressed to the
bot, the last a morning question about something decided early in the night — against a provider
whose window is 8K, 16K, 32K or 128K tokens. The provider either refuses a prompt over its window
(as OpenAI and Anthropic do) or silently drops the prompt's start (as many OpenAI-compatible local
servers do). Either way: no request over the window ever reaches it, every message is stored once,
each chat gets one reply, and that reply answers the morning question from the night.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from agent.messages import is_summary
from evals.bench_backlog import model, night
from gateway.run.assembly import message_path
from gateway.worker.backlog import verbatim_limit, verbatim_start
from tests.fakes.gateway import make_settings, message, running_gateway
from tests.fakes.llm_server import FakeLLMServer, prompt_tokens

BACKLOGS = {"quiet": 50, "busy": 400, "flood": 2_000}


async def overnight(redis, redis_url: str, key_prefix: str, window: int, overflow: str) -> None:
    backlogs = {chat: night(count, seed=window + count) for chat, count in BACKLOGS.items()}
    async with FakeLLMServer(handler=model, context_limit=window, overflow=overflow) as server:  # type: ignore[arg-type]
        settings = make_settings(redis_url, key_prefix, server.openai_base_url, context_length=window)
        store, inbox = message_path(redis, settings)
        for chat, texts in backlogs.items():
            for index, text in enumerate(texts):
                await inbox.put(message(chat, f"{chat}-{index}", text))
        async with running_gateway(settings, redis) as (runner, adapter, _):
            await asyncio.wait_for(runner.wait_idle(), 240)
        stored: dict[str, list[str]] = {}
        for chat in backlogs:
            sid = await store.current_session(f"local:{chat}")
            kept = await store.active(f"local:{chat}", sid) + await store.archive(f"local:{chat}", sid)
            stored[chat] = [str(m["content"]) for m in kept if m.get("role") == "user" and not is_summary(m)]
    over = [(tokens, request.path) for request, tokens in server.overflowed]
    assert over == [], f"{len(over)} requests over the {window:,}-token window reached the provider"
    replies = Counter(chat for chat, _ in adapter.sent)
    assert replies == {chat: 1 for chat in backlogs}
    for chat, text in adapter.sent:
        assert "PR #4821" in text, (chat, text)
    for chat, texts in backlogs.items():
        assert sorted(stored[chat]) == sorted(texts), f"{chat}: a message lost or stored twice"
    largest = max(prompt_tokens(request) for request in server.requests)
    assert largest <= window


@pytest.mark.parametrize("window", [8_000, 16_000, 32_000, 128_000])
async def test_backlogs_never_reach_a_refusing_provider_over_its_window(redis, redis_url, key_prefix, window):
    await overnight(redis, redis_url, key_prefix, window, "refuse")


@pytest.mark.parametrize("window", [8_000, 16_000, 32_000, 128_000])
async def test_backlogs_never_reach_a_truncating_provider_over_its_window(redis, redis_url, key_prefix, window):
    await overnight(redis, redis_url, key_prefix, window, "truncate")


def test_the_verbatim_part_is_clamped_to_a_quarter_of_the_window_and_always_holds_the_newest_message():
    assert verbatim_limit(20_000, 16_000) == 4_000  # gateway.coalesce_max_tokens above the window's share
    assert verbatim_limit(20_000, 1_000_000) == 20_000
    assert verbatim_start([10, 10, 10, 10], 25) == 2  # the newest two fit
    assert verbatim_start([10, 10, 10, 10], 100) == 0  # all of it
    assert verbatim_start([10, 10, 10, 500], 25) == 3  # the newest alone, however long (it is bounded on its own)
