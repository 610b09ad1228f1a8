"""A model that cannot see images: the chat is told once, above the reply to its first image, that its images are
kept but this model cannot see them — not again with the next image, not for a document, once per chat, and never
where the model can see them. The real aiogram client on the fake Bot API, a real GatewayRunner on real Redis."""

from __future__ import annotations

from gateway.config import Settings
from gateway.platforms.telegram import TelegramAdapter
from gateway.store.told import ToldOnce
from gateway.worker.long_messages import NO_VISION, no_vision_notice
from tests.fakes.bot_api import FakeBotAPI
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.media import png
from tests.fakes.telegram import telegram_gateway, telegram_settings

WINDOW = 200_000


def settings_for(redis_url: str, prefix: str, base_url: str, model: str) -> Settings:
    return Settings(
        redis={"url": redis_url, "key_prefix": prefix},
        model={"name": model, "provider": "custom", "base_url": base_url, "context_length": WINDOW},
        platforms={"local": {"enabled": True}},
    )


async def test_a_chat_whose_model_cannot_see_images_is_told_once(redis, redis_url, key_prefix) -> None:
    first, second = 6100, 6200
    async with (
        FakeBotAPI() as api,
        FakeLLMServer(handler=lambda request: Reply.answer("noted"), context_limit=WINDOW) as llm,
    ):
        settings = settings_for(redis_url, key_prefix, llm.openai_base_url, "gpt-3.5-turbo")
        adapter = TelegramAdapter(telegram_settings(api), poll_timeout=1, typing_interval=0)
        async with telegram_gateway(settings, redis, adapter) as runner:
            for number, update in enumerate(
                [
                    api.photo_message(first, 1, "what is on this dashboard?", data=png(320, 200)),
                    api.photo_message(first, 1, "and this one?", data=png(300, 200)),
                    api.document_message(second, 2, b"deploy log\nall green\n", file_name="deploy.log"),
                    api.photo_message(second, 2, data=png(200, 200)),
                ],
                start=1,
            ):
                api.push(update)
                await api.wait_until(lambda count=number: len(api.sent) == count, timeout=60)
            await runner.wait_idle()
    replies = [sent.text for sent in api.sent]
    notice = no_vision_notice("gpt-3.5-turbo")
    assert replies[0] == f"{notice}\n\nnoted"  # above the reply to the chat's first image
    assert replies[1] == "noted"  # not again
    assert replies[2] == "noted"  # a document is not an image
    assert replies[3] == f"{notice}\n\nnoted"  # every chat is told once
    assert "gpt-3.5-turbo" in notice and "/model" in notice
    for request in llm.requests:  # the model was never sent an image it cannot take
        assert all(not isinstance(message.get("content"), list) for message in request.messages)
    fields = await redis.hgetall(f"{key_prefix}:{{tg:{first}}}:told")
    assert set(fields) == {NO_VISION} and int(fields[NO_VISION]) > 0


async def test_a_model_that_sees_images_says_nothing_about_them(redis, redis_url, key_prefix) -> None:
    async with (
        FakeBotAPI() as api,
        FakeLLMServer(handler=lambda request: Reply.answer("I see it"), context_limit=WINDOW) as llm,
    ):
        settings = settings_for(redis_url, key_prefix, llm.openai_base_url, "gpt-4o")
        adapter = TelegramAdapter(telegram_settings(api), poll_timeout=1, typing_interval=0)
        async with telegram_gateway(settings, redis, adapter) as runner:
            api.push(api.photo_message(6300, 3, "look", data=png(320, 200)))
            await api.wait_until(lambda: len(api.sent) == 1, timeout=60)
            await runner.wait_idle()
    assert [sent.text for sent in api.sent] == ["I see it"]
    assert not await redis.exists(f"{key_prefix}:{{tg:6300}}:told")


async def test_told_once_is_once_per_chat_and_notice(redis, key_prefix, channel) -> None:
    told = ToldOnce(channel, key_prefix)
    assert await told.first("tg:1", NO_VISION) is True
    assert await told.first("tg:1", NO_VISION) is False
    assert await told.first("tg:2", NO_VISION) is True
    assert await told.first("tg:1", "another") is True
