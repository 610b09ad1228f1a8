"""The Telegram adapter with the real aiogram client against a fake Bot API server on loopback."""

from __future__ import annotations

import asyncio
import io
import logging
import random
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio
from aiogram.exceptions import TelegramServerError

from gateway.config import Settings, TelegramSettings
from gateway.platforms.base import IncomingMessage
from gateway.platforms.telegram import SECRET_HEADER, PollingConflict, TelegramAdapter, TelegramAdapterError
from gateway.run.platforms import enabled_adapters as _adapters
from gateway.store.inbox import Inbox
from tests.fakes.bot_api import TERMINATED, FakeBotAPI, utf16_len
from tests.fakes.telegram import Collected, adapter_for, running, telegram_settings

SECRET = "s3cret_token-for-tests"


class Sleeps:
    """Stands in for asyncio.sleep in the retry paths: records each wait, yields without waiting."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        await asyncio.sleep(0)


async def test_the_configured_api_server_is_where_the_real_client_goes(api: FakeBotAPI) -> None:
    settings = Settings(
        platforms={
            "local": {"enabled": False},
            "telegram": {"enabled": True, "token": api.token, "api_server": api.base_url, "allowed_user_ids": [5]},
        }
    )
    adapter = _adapters(settings, io.StringIO())["tg"]
    assert isinstance(adapter, TelegramAdapter) and adapter.platform == "tg" and adapter.max_message_length == 4096
    assert adapter.allowed_user_ids == {5} and adapter.mode == "polling"
    async with running(adapter, Collected()):
        assert adapter.me is not None and adapter.me.username == "foldgate_bot"
        await api.wait_until(lambda: len(api.get_updates_calls) >= 1)
    assert api.calls[:2] == ["getme", "getupdates"]


# --------------------------------------------------------------------------- polling


async def test_polled_updates_reach_the_intake_in_order_before_their_offset_is_acknowledged(api: FakeBotAPI) -> None:
    intake = Collected()
    updates = [api.private_message(1000 + i % 3, f"message {i}") for i in range(250)]
    api.push(*updates)
    premature: list[int] = []
    api.on_get_updates = lambda offset: premature.extend(
        u["update_id"]
        for u in updates
        if offset is not None and u["update_id"] < offset and u["update_id"] not in intake.ids
    )
    async with running(adapter_for(api), intake):
        await api.wait_until(lambda: len(intake.messages) == 250 and api.pending_updates == 0)
    assert [m.text for m in intake.messages] == [f"message {i}" for i in range(250)]
    assert [m.update_id for m in intake.messages] == [str(u["update_id"]) for u in updates]
    assert {m.chat_id for m in intake.messages} == {"1000", "1001", "1002"} and all(m.respond for m in intake.messages)
    assert premature == [], "an update was acknowledged before the intake stored it"
    offsets = [call.offset for call in api.get_updates_calls if call.offset is not None]
    assert offsets == sorted(offsets) and len(api.get_updates_calls) >= 3  # 100 per request at most


async def test_an_update_the_intake_could_not_store_is_fetched_again_not_skipped(api: FakeBotAPI) -> None:
    intake = Collected()
    first, second, third = (api.private_message(7, text) for text in ("one", "two", "three"))
    intake.failures[str(second["update_id"])] = 2  # Redis is down for two attempts
    api.push(first, second, third)
    premature: list[int] = []
    api.on_get_updates = lambda offset: premature.extend(
        u["update_id"]
        for u in (first, second, third)
        if offset is not None and u["update_id"] < offset and u["update_id"] not in intake.ids
    )
    sleeps = Sleeps()
    async with running(adapter_for(api, retry_sleep=sleeps), intake):
        await api.wait_until(lambda: len(intake.messages) == 3)
    assert [m.text for m in intake.messages] == ["one", "two", "three"]
    assert premature == []  # never acknowledged past the update that was not stored
    offsets = [call.offset for call in api.get_updates_calls]
    assert offsets.count(second["update_id"]) == 2  # asked for again after each of the two failures
    assert len(sleeps.waits) == 2  # and backed off before asking


async def test_a_409_conflict_is_reported_with_its_fix_and_polling_stops(
    api: FakeBotAPI, caplog: pytest.LogCaptureFixture
) -> None:
    api.conflict = TERMINATED
    adapter = adapter_for(api)
    with caplog.at_level(logging.ERROR, logger="gateway.platforms.telegram"):
        async with running(adapter, Collected()):
            failure = await asyncio.wait_for(adapter.failed(), 10)
            assert not adapter.polling
    assert isinstance(failure, PollingConflict) and adapter.failure is failure
    assert "another process is polling this bot token" in str(failure) and "webhook mode" in str(failure)
    assert any("409 Conflict" in record.getMessage() for record in caplog.records if record.levelno == logging.ERROR)
    assert len(api.get_updates_calls) == 1  # stopped instead of fighting


async def test_a_second_poller_on_the_same_token_makes_the_first_one_stop(api: FakeBotAPI) -> None:
    first, second = adapter_for(api, poll_timeout=5), adapter_for(api, poll_timeout=5)
    first_intake, second_intake = Collected(), Collected()
    async with running(first, first_intake):
        await api.wait_until(lambda: len(api.get_updates_calls) == 1)
        async with running(second, second_intake):
            failure = await asyncio.wait_for(first.failed(), 10)
            api.push(api.private_message(5, "who gets this?"))
            await api.wait_until(lambda: len(second_intake.messages) == 1)
            assert second.polling and second.failure is None
    assert isinstance(failure, PollingConflict) and not first_intake.messages


async def test_polling_while_a_webhook_is_set_explains_how_to_fix_it(api: FakeBotAPI) -> None:
    api.webhook = {"url": "https://bot.example.com/telegram/webhook"}
    adapter = adapter_for(api)
    async with running(adapter, Collected()):
        failure = await asyncio.wait_for(adapter.failed(), 10)
    assert "webhook is set" in str(failure) and "deleteWebhook" in str(failure)


async def test_a_rejected_token_fails_start_with_a_clear_error(api: FakeBotAPI) -> None:
    adapter = TelegramAdapter(TelegramSettings(token="999:wrong-token", api_server=api.base_url))
    with pytest.raises(TelegramAdapterError, match="rejected the bot token"):
        await adapter.start(Collected())
    await adapter.stop()


# --------------------------------------------------------------------------- what is recorded


async def test_group_messages_are_answered_only_when_addressed_and_other_chatter_is_recorded(api: FakeBotAPI) -> None:
    intake = Collected()
    room = -100123
    api.push(
        api.group_message(room, 1, "@foldgate_bot what failed last night?", first_name="Ann"),
        api.group_message(room, 2, "the billing job, I think", first_name="Bob"),
        api.group_message(room, 2, "thanks", first_name="Bob", reply_to_bot=True),
        api.group_message(room, 3, "/status", first_name="Cy"),
        api.group_message(room, 3, "/usage@FoldGate_Bot", first_name="Cy"),
        api.group_message(room, 3, "/start@other_bot", first_name="Cy"),
        api.group_message(room, 1, "ask @someone_else about 👍 it", first_name="Ann"),
        api.group_message(room, 1, "yes", first_name="Ann", reply_to_user=2),
        api.group_message(room, 2, "😀 hey @foldgate_bot, status?", first_name="Bob"),
    )
    async with running(adapter_for(api), intake):
        await api.wait_until(lambda: len(intake.messages) == 9)
    got = [(m.text, m.respond) for m in intake.messages]
    assert got == [
        ("Ann: what failed last night?", True),
        ("Bob: the billing job, I think", False),
        ("Bob: thanks", True),
        ("/status", True),
        ("/usage@FoldGate_Bot", True),
        ("Cy: /start@other_bot", False),
        ("Ann: ask @someone_else about 👍 it", False),
        ("Ann: yes", False),
        ("Bob: 😀 hey @foldgate_bot, status?", True),  # a mention after an emoji: UTF-16 offsets
    ]
    assert all(m.chat_id == str(room) and m.platform == "tg" for m in intake.messages)
    assert intake.messages[1].user_id == "2" and intake.messages[1].user_name == "Bob"


async def test_photos_are_recorded_with_or_without_a_caption_and_edits_and_service_messages_are_ignored(
    api: FakeBotAPI,
) -> None:
    intake = Collected()
    api.push(
        api.edited_message(8, "fixed typo"),
        api.photo_message(8, 8),
        api.member_joined(-100, 9),
        api.photo_message(8, 8, caption="the dashboard at 3am"),
        api.private_message(8, "/start"),
    )
    async with running(adapter_for(api), intake):
        await api.wait_until(lambda: api.pending_updates == 0 and len(api.get_updates_calls) >= 2)
    assert [(m.text, m.respond) for m in intake.messages] == [
        ("", True),
        ("the dashboard at 3am", True),
        ("/start", True),
    ]
    assert [[item.kind for item in m.items] for m in intake.messages] == [["image"], ["image"], []]


async def test_allowlists_ignore_everyone_else(api: FakeBotAPI, caplog: pytest.LogCaptureFixture) -> None:
    intake = Collected()
    api.push(
        api.private_message(11, "allowed user"),
        api.private_message(12, "stranger"),
        api.group_message(-200, 11, "allowed user, other room"),
        api.group_message(-100, 11, "allowed user, allowed room"),
        api.group_message(-100, 13, "stranger, allowed room"),
    )
    adapter = adapter_for(api, telegram_settings(api, allowed_user_ids=[11], allowed_chat_ids=[11, -100]))
    with caplog.at_level(logging.INFO, logger="gateway.platforms.telegram"):
        async with running(adapter, intake):
            await api.wait_until(lambda: api.pending_updates == 0 and len(api.get_updates_calls) >= 2)
    assert [m.text for m in intake.messages] == ["allowed user", "Ann: allowed user, allowed room"]
    assert sum("not in the allowlists" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO) == 3


# --------------------------------------------------------------------------- sending


async def test_a_429_with_retry_after_2_is_waited_out_and_the_same_chunk_sent_again(api: FakeBotAPI) -> None:
    sleeps = Sleeps()
    adapter = adapter_for(api, retry_sleep=sleeps)
    api.rate_limit_sends(3, retry_after=2)
    try:
        await adapter.send("42", "the reply must arrive")
    finally:
        await adapter.stop()
    assert sleeps.waits == [2, 2, 2]
    assert [(a.status, a.text) for a in api.send_attempts] == [(429, "the reply must arrive")] * 3 + [
        (200, "the reply must arrive")
    ]
    assert [(m.chat_id, m.text) for m in api.sent] == [("42", "the reply must arrive")]


async def test_a_429_really_delays_the_retry_by_retry_after(api: FakeBotAPI) -> None:
    adapter = adapter_for(api)  # the real asyncio.sleep
    api.rate_limit_sends(1, retry_after=2)
    long_reply = "word " * 2000  # three chunks: the rate-limited one is retried, then the rest follow in order
    try:
        await adapter.send("42", long_reply)
    finally:
        await adapter.stop()
    refused, retried = api.send_attempts[0], api.send_attempts[1]
    assert refused.status == 429 and retried.status == 200 and retried.text == refused.text
    assert retried.at - refused.at >= 2.0
    assert " ".join(m.text for m in api.sent).split() == long_reply.split()


async def test_server_errors_are_retried_with_backoff_then_given_up(api: FakeBotAPI) -> None:
    sleeps = Sleeps()
    adapter = adapter_for(api, retry_sleep=sleeps, network_retries=3)
    try:
        api.fail_sends(2)
        await adapter.send("42", "after two 502s")
        assert [m.text for m in api.sent] == ["after two 502s"] and sleeps.waits == [0.5, 1.0]
        api.fail_sends(4)
        with pytest.raises(TelegramServerError):
            await adapter.send("42", "never accepted")
    finally:
        await adapter.stop()


async def test_a_10000_character_reply_arrives_as_3_messages_in_order_as_plain_text(api: FakeBotAPI) -> None:
    rng = random.Random(4)
    paragraphs = []
    while sum(len(p) + 2 for p in paragraphs) < 10_000:
        paragraphs.append(
            " ".join(
                rng.choice(["deploy", "rollback", "😀", "*bold*", "<b>", "naïve", "日本"])
                for _ in range(rng.randint(20, 60))
            )
        )
    reply = "\n\n".join(paragraphs)[:10_000].rstrip()
    assert len(reply) >= 9_990 and utf16_len(reply) > len(reply)  # emoji cost two units each
    adapter = adapter_for(api)
    try:
        await adapter.send("-100555", reply)
    finally:
        await adapter.stop()
    assert len(api.sent) == 3 and all(m.chat_id == "-100555" for m in api.sent)
    assert all(utf16_len(m.text) <= 4096 and "parse_mode" not in m.params for m in api.sent)
    assert "\n\n".join(m.text for m in api.sent).split() == reply.split()
    assert all(reply.count(m.text) == 1 for m in api.sent)  # each chunk is a verbatim slice


async def test_an_empty_reply_sends_nothing(api: FakeBotAPI) -> None:
    adapter = adapter_for(api)
    try:
        await adapter.send("42", "  \n ")
    finally:
        await adapter.stop()
    assert api.send_attempts == []


def typing_keepers() -> list[asyncio.Task[object]]:
    """The tasks that keep a chat's "typing…" shown (named ``telegram-typing-<chat>``): the only senders of it."""
    return [task for task in asyncio.all_tasks() if task.get_name().startswith("telegram-typing-")]


async def test_typing_is_kept_alive_until_the_reply_is_sent(api: FakeBotAPI) -> None:
    adapter = adapter_for(api, typing_interval=0.02)
    try:
        await adapter.typing("42")
        await api.wait_until(lambda: len(api.chat_actions) >= 4)
        (keeper,) = typing_keepers()
        await adapter.send("42", "done")
        # the reply ended the indicator: its keeper is cancelled, so nothing is left to send another one
        await asyncio.wait([keeper], timeout=30)
        assert keeper.cancelled() and typing_keepers() == []
        assert set(api.chat_actions) == {("42", "typing")}
    finally:
        await adapter.stop()


async def test_typing_errors_never_reach_the_turn(api: FakeBotAPI) -> None:
    adapter = adapter_for(api, typing_interval=0)
    await api.stop()
    await adapter.typing("42")  # the server is gone: no exception
    await adapter.stop()


# --------------------------------------------------------------------------- webhook


@pytest_asyncio.fixture
async def webhook(api: FakeBotAPI, redis, key_prefix) -> AsyncIterator[tuple[TelegramAdapter, Inbox, str]]:
    inbox = Inbox(redis, key_prefix)
    telegram = telegram_settings(
        api,
        mode="webhook",
        webhook_url="https://bot.example.com/telegram/webhook",
        webhook_secret=SECRET,
        listen_port=0,
    )
    adapter = adapter_for(api, telegram)
    async with running(adapter, inbox.put):
        yield adapter, inbox, f"http://127.0.0.1:{adapter.webhook_port}/telegram/webhook"


async def test_webhook_registers_itself_with_its_secret(api: FakeBotAPI, webhook) -> None:
    assert api.webhook is not None
    assert api.webhook["url"] == "https://bot.example.com/telegram/webhook"
    assert api.webhook["secret_token"] == SECRET and "message" in api.webhook["allowed_updates"]


async def test_webhook_stores_the_update_before_answering_200_and_refuses_a_wrong_secret(
    api: FakeBotAPI, webhook
) -> None:
    adapter, inbox, url = webhook
    update = api.private_message(77, "hello over the webhook")
    async with httpx.AsyncClient() as client:
        wrong = await client.post(url, json=update, headers={SECRET_HEADER: "not-the-secret"})
        missing = await client.post(url, json=update)
        assert (wrong.status_code, missing.status_code) == (403, 403)
        assert await inbox.pending("tg:77") == 0  # nothing queued for a refused delivery
        accepted = await client.post(url, json=update, headers={SECRET_HEADER: SECRET})
        assert accepted.status_code == 200
        assert await inbox.pending("tg:77") == 1  # durable by the time Telegram got its 200
        message = IncomingMessage.model_validate_json(await inbox.head("tg:77") or "")
        assert message.text == "hello over the webhook" and message.update_id == str(update["update_id"])
        redelivered = await client.post(url, json=update, headers={SECRET_HEADER: SECRET})
        assert redelivered.status_code == 200 and await inbox.pending("tg:77") == 1
        garbage = await client.post(url, content=b"not json", headers={SECRET_HEADER: SECRET})
        assert garbage.status_code == 400


async def test_webhook_answers_500_when_the_update_cannot_be_stored(api: FakeBotAPI) -> None:
    intake = Collected()
    update = api.private_message(78, "redis is down")
    intake.failures[str(update["update_id"])] = 1
    adapter = adapter_for(
        api, telegram_settings(api, mode="webhook", webhook_secret=SECRET, listen_port=0), set_webhook=False
    )
    async with running(adapter, intake):
        url = f"http://127.0.0.1:{adapter.webhook_port}/telegram/webhook"
        async with httpx.AsyncClient() as client:
            first = await client.post(url, json=update, headers={SECRET_HEADER: SECRET})
            again = await client.post(url, json=update, headers={SECRET_HEADER: SECRET})  # Telegram redelivers
    assert (first.status_code, again.status_code) == (500, 200)
    assert [m.text for m in intake.messages] == ["redis is down"]
    assert api.webhook is None  # set_webhook=False leaves registration to the operator


def test_webhook_mode_refuses_to_run_without_a_secret() -> None:
    with pytest.raises(TelegramAdapterError, match="webhook_secret"):
        TelegramAdapter(TelegramSettings(token="1:x", mode="webhook", webhook_url="https://bot.example.com/hook"))
