"""A platform answer foldgate cannot read is one line naming the setting and what came back, never a traceback.

Telegram through the real aiogram client on the fake Bot API, scripted to answer as an emulator
might (``FakeBotAPI.answer_as``): ``getMe`` without ``is_bot``, a batch of updates that is not
Telegram's, a method it does not have. Discord through the real discord.py client on the fake REST
API, its login answered with what discord.py cannot read. ``foldgate run`` and ``foldgate doctor``
run as child processes, as in tests/gateway/run/test_startup_failures.py; polling and replies run in-process on
a real runner and real Redis, with a fake provider.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import discord
import pytest
import pytest_asyncio
from aiohttp import web

from gateway.platforms.discord_replies import DiscordMessenger
from gateway.platforms.telegram import TelegramAdapter
from tests.fakes.bot_api import FakeBotAPI
from tests.fakes.cli import DISCORD_AND_TERMINAL, TELEGRAM, TELEGRAM_AND_TERMINAL, foldgate, leftover_servers
from tests.fakes.discord_api import BOT, CHANNEL_ID, FakeDiscordAPI, json_response, open_adapter
from tests.fakes.discord_api import TOKEN as DISCORD_TOKEN
from tests.fakes.gateway import make_settings
from tests.fakes.llm_server import FakeLLMServer, echo, streaming
from tests.fakes.telegram import ANSWER, WINDOW, streaming_gateway, telegram_gateway, telegram_settings


async def run_fails(
    tmp_path: Path, config: str, setting: str, *, env: dict[str, str], discord_base: str | None = None
) -> str:
    """``foldgate run`` that must fail: its one line, after checking that this line, naming ``setting`` and what
    to do, is all the terminal shows, without a traceback, and that the exit status is 1."""
    code, output = await foldgate(tmp_path, config, "run", env=env, discord_base=discord_base, stdin=None, timeout=60)
    lines = [line for line in output.splitlines() if line.strip()]
    assert code == 1 and "Traceback" not in output, output
    assert len(lines) == 1 and lines[0].startswith(f"foldgate: {setting}: ") and " — " in lines[0], output
    return lines[0]


def without_is_bot(api: FakeBotAPI) -> dict[str, Any]:
    """getMe as an emulator answers it: the bot's user without ``is_bot``."""
    user = {key: value for key, value in api.bot_user().items() if key != "is_bot"}
    return {"ok": True, "result": {**user, "can_join_groups": True}}


def telegram_lines(records: list[logging.LogRecord], *words: str) -> list[str]:
    """The Telegram adapter's log lines that hold every one of ``words``."""
    lines = [record.getMessage() for record in records if record.name == "gateway.platforms.telegram"]
    return [line for line in lines if all(word in line for word in words)]


# --------------------------------------------------------------------------- at start


async def test_run_with_a_bot_api_that_leaves_out_is_bot_is_one_line(tmp_path, bot_api):
    bot_api.answer_as("getMe", without_is_bot(bot_api), times=None)
    line = await run_fails(
        tmp_path,
        TELEGRAM_AND_TERMINAL.format(api=bot_api.base_url),
        "platforms.telegram.api_server",
        env={"TELEGRAM_BOT_TOKEN": bot_api.token},
    )
    assert f"the Bot API at {bot_api.base_url} answered getMe with something foldgate cannot read" in line
    assert "result.is_bot: field required" in line and '"username": "foldgate_bot"' in line  # the field, what came
    assert bot_api.token not in line
    assert bot_api.calls == ["getme"]  # not asked again: the same question gets the same answer
    assert not leftover_servers(tmp_path / "home")


async def test_run_with_a_bot_api_that_answers_a_web_page_is_one_line(tmp_path, bot_api):
    bot_api.answer_as("getMe", f"<html><body>Welcome! (bot{bot_api.token})</body></html>", times=None)
    line = await run_fails(
        tmp_path,
        TELEGRAM_AND_TERMINAL.format(api=bot_api.base_url),
        "platforms.telegram.api_server",
        env={"TELEGRAM_BOT_TOKEN": bot_api.token},
    )
    assert "answered getMe with something foldgate cannot read (not JSON; it sent <html><body>Welcome!" in line
    assert bot_api.token not in line and "bot<token>" in line


async def test_doctor_with_a_bot_api_that_leaves_out_is_bot_says_so_in_its_row(tmp_path, redis_url, bot_api):
    bot_api.answer_as("getMe", without_is_bot(bot_api), times=None)
    config = f'redis: {{url: "{redis_url}"}}\n' + TELEGRAM.format(api=bot_api.base_url)
    code, output = await foldgate(tmp_path, config, "doctor", env={"TELEGRAM_BOT_TOKEN": bot_api.token})
    assert code == 1 and "Traceback" not in output, output
    (row,) = [line for line in output.splitlines() if line.startswith("telegram")]
    assert row.split()[1] == "FAIL", output
    assert "platforms.telegram.api_server: " in row and "answered getMe with something foldgate cannot read" in row
    assert "result.is_bot: field required" in row and bot_api.token not in output


# --------------------------------------------------------------------------- while polling


async def test_an_unreadable_batch_is_one_line_and_its_updates_are_asked_for_again(
    redis, redis_url, key_prefix, caplog
):
    caplog.set_level(logging.INFO, logger="gateway.platforms.telegram")
    async with FakeBotAPI() as api, FakeLLMServer(handler=echo, context_limit=WINDOW) as llm:
        settings = make_settings(redis_url, key_prefix, llm.openai_base_url, context_length=WINDOW)
        first, second = api.private_message(4242, "first question"), api.private_message(4343, "second question")
        api.push(first, second)
        broken = json.loads(json.dumps(first))
        del broken["message"]["chat"]["type"]  # what an emulator might leave out
        api.answer_as("getUpdates", {"ok": True, "result": [broken, second]})
        adapter = TelegramAdapter(telegram_settings(api), poll_timeout=1, typing_interval=0)
        async with telegram_gateway(settings, redis, adapter) as runner:
            await api.wait_until(lambda: len(api.sent) == 2, timeout=60)
            await runner.wait_idle()
            assert adapter.polling and adapter.failure is None
    assert sorted((m.chat_id, m.text) for m in api.sent) == [
        ("4242", "echo: first question"),
        ("4343", "echo: second question"),
    ]
    assert api.scripted == ["getupdates"] and api.get_updates_calls[0].offset is None  # the same updates, again
    (line,) = telegram_lines(caplog.records, "getUpdates")
    assert line.startswith(
        f"telegram: platforms.telegram.api_server: the Bot API at {api.base_url} answered "
        "getUpdates with something foldgate cannot read (result.0.message.chat.type: field "
        "required; it sent {"
    ), line
    assert "asking for the same updates again in" in line and "\n" not in line and api.token not in line
    assert not any(record.exc_info for record in caplog.records)


# --------------------------------------------------------------------------- replies


async def test_a_send_whose_answer_cannot_be_read_is_not_sent_again(redis, redis_url, key_prefix, caplog):
    """The answer said ok: the message went out. Sending it again would show it twice."""
    caplog.set_level(logging.INFO, logger="gateway.platforms.telegram")
    async with FakeBotAPI() as api, FakeLLMServer(handler=echo, context_limit=WINDOW) as llm:
        settings = make_settings(redis_url, key_prefix, llm.openai_base_url, context_length=WINDOW)
        api.answer_as("sendMessage", {"ok": True, "result": {"message_id": 7, "chat": {"id": 4242}}})
        api.push(api.private_message(4242, "one"))
        adapter = TelegramAdapter(telegram_settings(api), poll_timeout=1, typing_interval=0)
        async with telegram_gateway(settings, redis, adapter, stream_replies=False) as runner:
            await api.wait_until(lambda: api.scripted == ["sendmessage"], timeout=60)
            await runner.wait_idle()
            api.push(api.private_message(4242, "two"))
            await api.wait_until(lambda: len(api.sent) == 1, timeout=60)
            await runner.wait_idle()
    assert api.calls.count("sendmessage") == 2  # one each, none repeated
    assert [m.text for m in api.sent] == ["echo: two"]
    (line,) = telegram_lines(caplog.records, "sendMessage")
    assert "platforms.telegram.api_server: " in line and "result.date: field required" in line
    assert "went through all the same, so it is not made again" in line


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (404, {"ok": False, "error_code": 404, "description": "Not Found: method not found"}),
        (400, {"ok": False, "error_code": 400, "description": "Bad Request: method not found"}),
        (404, "404: Not Found"),
    ],
    ids=["404", "400", "404-plain-text"],
)
async def test_an_emulator_without_typing_or_drafts_still_answers_everyone(
    redis, redis_url, key_prefix, status, body, caplog
):
    caplog.set_level(logging.INFO)
    async with FakeBotAPI() as api, FakeLLMServer(default=streaming(ANSWER), context_limit=WINDOW) as llm:
        settings = make_settings(redis_url, key_prefix, llm.openai_base_url, context_length=WINDOW)
        for method in ("sendChatAction", "sendMessageDraft"):
            api.answer_as(method, body, status=status, times=None)
        api.push(api.private_message(4242, "how did the night go?"), api.private_message(4343, "and the backups?"))
        async with streaming_gateway(settings, redis, api) as runner:
            await api.wait_until(lambda: len(api.sent) == 2, timeout=60)
            await runner.wait_idle()
    assert sorted((m.chat_id, m.text) for m in api.sent) == [("4242", ANSWER), ("4343", ANSWER)]
    assert {"sendchataction", "sendmessagedraft"} <= set(api.scripted) and api.drafts == []
    assert api.scripted.count("sendmessagedraft") <= 2  # once at most for each reply, not for each frame
    (line,) = telegram_lines(caplog.records, "sendMessageDraft")
    assert line.startswith(
        f"telegram: platforms.telegram.api_server: the Bot API at {api.base_url} has no sendMessageDraft ("
    ), line
    assert not [record for record in caplog.records if "preview could not be shown" in record.getMessage()]


# --------------------------------------------------------------------------- Discord


class OddDiscordAPI(FakeDiscordAPI):
    """The fake Discord API, its ``GET /users/@me`` answered with ``me`` when given, and each message it posts
    answered as ``posted`` makes it over when given (the message is created all the same)."""

    def __init__(
        self, me: web.Response | None = None, posted: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    ) -> None:
        super().__init__()
        self.me = me
        self.posted = posted

    async def _me(self, request: web.Request) -> web.Response:
        if self.me is None:
            return await super()._me(request)
        self._authorized(request)
        return self.me

    async def _post_message(self, request: web.Request) -> web.Response:
        answer = await super()._post_message(request)
        if self.posted is None or answer.status != 200:
            return answer
        assert isinstance(answer.body, bytes)
        return json_response(self.posted(json.loads(answer.body)))


@pytest_asyncio.fixture
async def odd_discord(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[OddDiscordAPI]:
    """discord.py in this process pointed at an :class:`OddDiscordAPI` (scripted by the test)."""
    api = OddDiscordAPI()
    async with api:
        monkeypatch.setattr(discord.http.Route, "BASE", api.base)
        yield api


def discord_lines(records: list[logging.LogRecord], *words: str) -> list[str]:
    lines = [record.getMessage() for record in records if record.name.startswith("gateway.platforms.discord")]
    return [line for line in lines if all(word in line for word in words)]


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (lambda: json_response({key: value for key, value in BOT.items() if key != "id"}), "no 'id' in it"),
        (lambda: web.Response(body=b"{not json", headers={"Content-Type": "application/json"}), "not JSON"),
        (lambda: web.Response(text="<html>Welcome!</html>", content_type="text/html"), "not JSON"),
    ],
    ids=["no-id", "broken-json", "web-page"],
)
async def test_run_with_a_discord_login_answer_it_cannot_read_is_one_line(tmp_path, answer, said):
    async with OddDiscordAPI(answer()) as api:
        line = await run_fails(
            tmp_path,
            DISCORD_AND_TERMINAL,
            "platforms.discord",
            env={"DISCORD_BOT_TOKEN": DISCORD_TOKEN},
            discord_base=api.base,
        )
    assert (
        f"the Discord API at {api.base} answered GET /users/@me (HTTP 200) with something foldgate cannot read"
    ) in line
    assert said in line and DISCORD_TOKEN not in line


async def test_doctor_with_a_discord_login_answer_it_cannot_read_says_so_in_its_row(tmp_path, redis_url):
    async with OddDiscordAPI(json_response({"username": "foldbot"})) as api:
        config = f'redis: {{url: "{redis_url}"}}\n' + DISCORD_AND_TERMINAL
        code, output = await foldgate(
            tmp_path, config, "doctor", env={"DISCORD_BOT_TOKEN": DISCORD_TOKEN}, discord_base=api.base
        )
    assert code == 1 and "Traceback" not in output, output
    (row,) = [line for line in output.splitlines() if line.startswith("discord")]
    assert row.split()[1] == "FAIL" and "platforms.discord: " in row and "GET /users/@me" in row, output


async def test_a_discord_post_whose_answer_cannot_be_read_is_not_posted_again(odd_discord, caplog):
    caplog.set_level(logging.INFO)
    odd_discord.posted = lambda message: {key: value for key, value in message.items() if key != "type"}
    adapter = await open_adapter(odd_discord)
    try:
        await adapter.send(str(CHANNEL_ID), "deploy finished")
    finally:
        await adapter.stop()
    assert odd_discord.contents(CHANNEL_ID) == ["deploy finished"] and len(odd_discord.attempts) == 1
    (line,) = discord_lines(caplog.records, "cannot read")
    assert line.startswith(
        f"discord: platforms.discord: the Discord API at {odd_discord.base} answered POST "
        f"/channels/{CHANNEL_ID}/messages (HTTP 200) with something foldgate cannot read (no "
        "'type' in it; it sent {"
    ), line
    assert "went through all the same, so it is not made again" in line and DISCORD_TOKEN not in line


async def test_a_streamed_discord_message_whose_id_cannot_be_read_goes_on_in_a_new_one(odd_discord):
    """Nothing to edit: the next text is posted, once, and edits go to that message from then on."""
    odd_discord.posted = lambda message: {"content": message["content"]}
    adapter = await open_adapter(odd_discord)
    try:
        messenger = DiscordMessenger(adapter._channel(str(CHANNEL_ID)), "anchor", None, reader=adapter.reader)
        first = await messenger.post("The deploy", index=0)
        odd_discord.posted = None
        await messenger.edit(first, "The deploy went out")
        await messenger.edit(first, "The deploy went out and the canary held.")
    finally:
        await adapter.stop()
    assert first == ""
    assert odd_discord.contents(CHANNEL_ID) == ["The deploy", "The deploy went out and the canary held."]
    assert len(odd_discord.edits) == 1


async def test_a_bot_api_error_page_is_the_error_its_status_means(bot_api):
    """A proxy's 502 page is a 5xx like any other: retried, and the reply arrives once."""
    bot_api.answer_as("sendMessage", "<html><h1>502 Bad Gateway</h1></html>", status=502)
    waits: list[float] = []

    async def no_wait(seconds: float) -> None:
        waits.append(seconds)

    adapter = TelegramAdapter(telegram_settings(bot_api), retry_sleep=no_wait, typing_interval=0)
    try:
        await adapter.send("4242", "deploy finished")
    finally:
        await adapter.stop()
    assert [m.text for m in bot_api.sent] == ["deploy finished"] and bot_api.scripted == ["sendmessage"]
    assert len(waits) == 1
