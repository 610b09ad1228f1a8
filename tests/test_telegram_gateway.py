"""Telegram through the whole gateway: the real aiogram client on a fake Bot API, a real GatewayRunner
on real Redis, and a fake LLM provider that echoes."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx

from gateway.agents import AgentBuilder
from gateway.config import Settings
from gateway.delivery.budget import SendBudget
from gateway.delivery.gate import gates
from gateway.platforms.telegram import SECRET_HEADER, TelegramAdapter
from gateway.store import SessionStore
from gateway.store.inbox import Inbox
from gateway.worker.runner import GatewayRunner
from tests.fakes.bot_api import FakeBotAPI
from tests.fakes.gateway import make_settings
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply

WINDOW = 200_000
SECRET = "webhook_secret-1"


def echo(request: RecordedRequest) -> Reply:
    return Reply.answer(f"echo: {request.last_user_text}")


@contextlib.asynccontextmanager
async def telegram_gateway(settings: Settings, redis, adapter: TelegramAdapter, *, send_budget: bool = False,
                           **runner_options) -> AsyncIterator[GatewayRunner]:
    """A started runner whose only platform is ``adapter``, itself started on the runner's intake; with
    ``send_budget`` its sends draw on the shared budget in Redis, as ``foldgate run`` wires it."""
    builder = AgentBuilder(settings)
    store = SessionStore(redis, settings.redis.key_prefix)
    if send_budget:
        runner_options["gates"] = gates(SendBudget(store.channel, settings.redis.key_prefix), settings.delivery)
    runner = GatewayRunner(
        store, Inbox(redis, settings.redis.key_prefix), builder, adapters={"tg": adapter},
        compression=settings.compression, lock_ttl_seconds=30.0, poll_interval=0.01, **runner_options,
    )
    await runner.start()
    await adapter.start(runner.intake)
    try:
        yield runner
    finally:
        await adapter.stop()
        await runner.stop()
        await builder.aclose()
        await store.channel.aclose()


async def test_a_backlog_of_300_polled_messages_is_answered_in_order(redis, redis_url, key_prefix) -> None:
    async with FakeBotAPI() as api, FakeLLMServer(handler=echo, context_limit=WINDOW) as llm:
        settings = make_settings(redis_url, key_prefix, llm.openai_base_url, context_length=WINDOW)
        updates = [api.private_message(4242, f"overnight message {i}") for i in range(300)]
        api.push(*updates)
        adapter = TelegramAdapter(api.token, api_server=api.base_url, poll_timeout=1, typing_interval=0)
        async with telegram_gateway(settings, redis, adapter) as runner:
            await api.wait_until(lambda: len(api.sent) == 300, timeout=240)
            await runner.wait_idle()
            store = SessionStore(redis, key_prefix)
            transcript = await store.active("tg:4242", await store.current_session("tg:4242"))
    assert [(m.chat_id, m.text) for m in api.sent] == [("4242", f"echo: overnight message {i}") for i in range(300)]
    assert all("parse_mode" not in m.params for m in api.sent)
    assert api.pending_updates == 0 and len([c for c in api.get_updates_calls if c.offset]) >= 3
    users = [m["content"] for m in transcript if m["role"] == "user"]
    assert users == [f"overnight message {i}" for i in range(300)]
    assert ("4242", "typing") in api.chat_actions


async def test_a_group_answers_when_addressed_and_keeps_the_rest_as_context(redis, redis_url, key_prefix) -> None:
    room = -1001234
    async with FakeBotAPI() as api, FakeLLMServer(handler=echo, context_limit=WINDOW) as llm:
        settings = make_settings(redis_url, key_prefix, llm.openai_base_url, context_length=WINDOW)
        api.push(
            api.group_message(room, 1, "the deploy froze at step 4", first_name="Ann"),
            api.group_message(room, 2, "@foldgate_bot what froze?", first_name="Bob"),
            api.group_message(room, 1, "lunch anyone?", first_name="Ann"),
            api.group_message(room, 1, "and why?", first_name="Ann", reply_to_bot=True),
            api.group_message(room, 2, "/status", first_name="Bob"),
        )
        adapter = TelegramAdapter(api.token, api_server=api.base_url, poll_timeout=1, typing_interval=0)
        async with telegram_gateway(settings, redis, adapter) as runner:
            await api.wait_until(lambda: len(api.sent) == 3)
            await runner.wait_idle()
            store = SessionStore(redis, key_prefix)
            transcript = await store.active(f"tg:{room}", await store.current_session(f"tg:{room}"))
    replies = [m.text for m in api.sent]
    assert replies[:2] == ["echo: Bob: what froze?", "echo: Ann: and why?"] and replies[2].startswith("Session ")
    said = [m["content"] for m in transcript if m["role"] == "user"]
    assert said == ["Ann: the deploy froze at step 4", "Bob: what froze?", "Ann: lunch anyone?", "Ann: and why?"]
    first_question = next(r for r in llm.requests if r.last_user_text == "Bob: what froze?")
    assert any(m.get("content") == "Ann: the deploy froze at step 4" for m in first_question.messages)


async def test_a_webhook_update_delivered_twice_is_answered_once(redis, redis_url, key_prefix) -> None:
    async with FakeBotAPI() as api, FakeLLMServer(handler=echo, context_limit=WINDOW) as llm:
        settings = make_settings(redis_url, key_prefix, llm.openai_base_url, context_length=WINDOW)
        adapter = TelegramAdapter(api.token, api_server=api.base_url, mode="webhook", webhook_secret=SECRET,
                                  webhook_url="https://bot.example.com/telegram/webhook", listen_port=0,
                                  typing_interval=0)
        async with telegram_gateway(settings, redis, adapter) as runner:
            url = f"http://127.0.0.1:{adapter.webhook_port}/telegram/webhook"
            update = api.private_message(31, "is the webhook exactly-once?")
            async with httpx.AsyncClient() as client:
                for _ in range(3):  # Telegram timed out waiting and redelivered, twice
                    response = await client.post(url, json=update, headers={SECRET_HEADER: SECRET})
                    assert response.status_code == 200
            await api.wait_until(lambda: len(api.sent) >= 1)
            await runner.wait_idle()
    assert [(m.chat_id, m.text) for m in api.sent] == [("31", "echo: is the webhook exactly-once?")]
    assert len([r for r in llm.requests if r.last_user_text == "is the webhook exactly-once?"]) == 1
