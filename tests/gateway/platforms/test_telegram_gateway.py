"""Telegram through the whole gateway: the real aiogram client on a fake Bot API, the gateway ``foldgate run``
opens on real Redis (with the shipped settings), and a fake LLM provider that echoes."""

from __future__ import annotations

import httpx

from gateway.platforms.telegram import SECRET_HEADER, TelegramAdapter
from gateway.store import SessionStore
from tests.fakes.bot_api import FakeBotAPI
from tests.fakes.gateway import make_settings
from tests.fakes.llm_server import FakeLLMServer, echo
from tests.fakes.telegram import telegram_gateway, telegram_settings

WINDOW = 200_000
SECRET = "webhook_secret-1"


async def test_a_backlog_of_300_polled_messages_is_answered_in_order(redis, redis_url, key_prefix) -> None:
    """The backlog is polled page by page and coalesced as shipped: the messages that wait behind a turn join the
    next one, so each reply answers the newest message its turn took in, the last reply the last message, and the
    session holds all 300 in the order they were written."""
    last = "echo: overnight message 299"
    async with FakeBotAPI() as api, FakeLLMServer(handler=echo, context_limit=WINDOW) as llm:
        settings = make_settings(redis_url, key_prefix, llm.openai_base_url, context_length=WINDOW)
        updates = [api.private_message(4242, f"overnight message {i}") for i in range(300)]
        api.push(*updates)
        adapter = TelegramAdapter(telegram_settings(api), poll_timeout=1, typing_interval=0)
        async with telegram_gateway(settings, redis, adapter) as runner:
            await api.wait_until(lambda: bool(api.sent) and api.sent[-1].text == last, timeout=240)
            await runner.wait_idle()
            store = SessionStore(redis, key_prefix)
            transcript = await store.active("tg:4242", await store.current_session("tg:4242"))
    replies = [(m.chat_id, m.text) for m in api.sent]
    assert replies == [("4242", f"echo: {request.last_user_text}") for request in llm.requests]  # one per turn
    answered = [int(text.rsplit(" ", 1)[1]) for _, text in replies]
    assert answered == sorted(set(answered)) and answered[-1] == 299  # in order, none twice, the last one answered
    assert all("parse_mode" not in m.params for m in api.sent)
    assert api.pending_updates == 0 and len([c for c in api.get_updates_calls if c.offset]) >= 3
    users = [m["content"] for m in transcript if m["role"] == "user"]
    assert users == [f"overnight message {i}" for i in range(300)]
    assert sum(1 for m in llm.requests[-1].messages if m["role"] == "user") == 300  # the model saw every one
    assert ("4242", "typing") in api.chat_actions


async def test_a_group_answers_when_addressed_and_keeps_the_rest_as_context(redis, redis_url, key_prefix) -> None:
    """Each question is asked once the answer before it is out, so each is a turn of its own (with the backlog
    coalesced as shipped, questions that wait behind a turn would be answered together)."""
    room = -1001234
    async with FakeBotAPI() as api, FakeLLMServer(handler=echo, context_limit=WINDOW) as llm:
        settings = make_settings(redis_url, key_prefix, llm.openai_base_url, context_length=WINDOW)
        adapter = TelegramAdapter(telegram_settings(api), poll_timeout=1, typing_interval=0)
        async with telegram_gateway(settings, redis, adapter) as runner:
            api.push(
                api.group_message(room, 1, "the deploy froze at step 4", first_name="Ann"),
                api.group_message(room, 2, "@foldgate_bot what froze?", first_name="Bob"),
            )
            await api.wait_until(lambda: len(api.sent) == 1)
            api.push(
                api.group_message(room, 1, "lunch anyone?", first_name="Ann"),
                api.group_message(room, 1, "and why?", first_name="Ann", reply_to_bot=True),
            )
            await api.wait_until(lambda: len(api.sent) == 2)
            api.push(api.group_message(room, 2, "/status", first_name="Bob"))
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
    second_question = next(r for r in llm.requests if r.last_user_text == "Ann: and why?")
    assert any(m.get("content") == "Ann: lunch anyone?" for m in second_question.messages)


async def test_a_webhook_update_delivered_twice_is_answered_once(redis, redis_url, key_prefix) -> None:
    async with FakeBotAPI() as api, FakeLLMServer(handler=echo, context_limit=WINDOW) as llm:
        settings = make_settings(redis_url, key_prefix, llm.openai_base_url, context_length=WINDOW)
        telegram = telegram_settings(
            api,
            mode="webhook",
            webhook_secret=SECRET,
            webhook_url="https://bot.example.com/telegram/webhook",
            listen_port=0,
        )
        adapter = TelegramAdapter(telegram, typing_interval=0)
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
