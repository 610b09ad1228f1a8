"""``foldgate run`` that cannot start says so in one line: the setting, what happened, what to do.

Each test runs the real command line in a child process, against real servers on loopback — the
fake Bot API, the fake Discord REST API, the fake model provider — or against an address where
nothing listens, a name under ``.invalid`` (RFC 6761: it never resolves, no network needed), or a
malformed token. It checks the exit status, that no traceback reaches the terminal, and that the
line names the setting to change. The fakes run on this test's event loop, so the child is awaited
with asyncio rather than blocking it.

No test times the child: on a machine busy with other work a start takes what it takes. That a
silent platform costs its own deadline, all of it and no more, is checked in-process below, on the
deadline handed to the request and the attempts made; the child only has to end before
``PATIENCE``, which a hang would not.
"""

from __future__ import annotations

import asyncio
import math
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, cast

import pytest

from gateway.startup_errors import explain, setting_label
from tests.fakes.cli import (
    DISCORD_AND_TERMINAL,
    PATIENCE,
    TELEGRAM,
    TELEGRAM_AND_TERMINAL,
    closed_port,
    foldgate,
    leftover_servers,
)
from tests.fakes.discord_api import TOKEN as DISCORD_TOKEN
from tests.fakes.llm_server import FakeLLMServer
from tests.fakes.network import BlackHole
from tests.fakes.paths import RECORDED

if TYPE_CHECKING:
    from aiogram import Bot
    from aiogram.types import User


def failure_line(code: int, output: str, *names: str) -> str:
    """The one ``foldgate: <setting>: ...`` line of a failed start, after checking the rest of the contract."""
    assert code != 0, output
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if line.startswith(f"foldgate: {names[0]}")]
    assert len(lines) == 1, output
    for name in names:
        assert name in lines[0], output
    assert " — " in lines[0], output  # and what to do about it
    return lines[0]


async def only_line(
    tmp_path: Path,
    config: str,
    setting: str,
    *,
    env: Mapping[str, str],
    discord_base: str | None = None,
    stdin: str | None = None,
) -> str:
    """Run ``foldgate run`` that must fail: its one line, after checking that this line, naming ``setting``, is
    all the terminal shows and that the exit status is 1."""
    code, output = await foldgate(
        tmp_path, config, "run", env=env, discord_base=discord_base, stdin=stdin, timeout=PATIENCE
    )
    lines = [line for line in output.splitlines() if line.strip()]
    assert code == 1, output
    assert len(lines) == 1, output
    assert lines[0].startswith(f"foldgate: {setting}: "), output
    assert " — " in lines[0], output  # and what to do about it
    return lines[0]


# --------------------------------------------------------------------------- Redis


async def test_redis_on_a_closed_port(tmp_path):
    port = closed_port()
    code, output = await foldgate(tmp_path, f"redis: {{url: 'redis://127.0.0.1:{port}/0'}}\n", "run")
    line = failure_line(code, output, "redis.url", f"127.0.0.1:{port}")
    assert "connection refused" in line


async def test_redis_on_a_host_that_does_not_resolve(tmp_path):
    code, output = await foldgate(tmp_path, "redis: {url: 'redis://foldgate-test.invalid:6379/0'}\n", "run")
    line = failure_line(code, output, "redis.url", "foldgate-test.invalid")
    assert "cannot resolve" in line


async def test_a_redis_password_never_reaches_the_terminal(tmp_path):
    port = closed_port()
    code, output = await foldgate(tmp_path, f"redis: {{url: 'redis://:s3cret-pw@127.0.0.1:{port}/0'}}\n", "run")
    failure_line(code, output, "redis.url")
    assert "s3cret-pw" not in output


async def test_redis_refusing_the_login(tmp_path, redis_url):
    if not redis_url.startswith("redis://") or "@" in redis_url:
        pytest.skip("needs the test server at a redis:// URL without credentials")
    url = redis_url.replace("redis://", "redis://:not-the-password@", 1)  # the test server has no password
    code, output = await foldgate(tmp_path, f"redis: {{url: '{url}'}}\n", "run")
    line = failure_line(code, output, "redis.url")
    assert "refused the login" in line and "not-the-password" not in output


# --------------------------------------------------------------------------- Telegram


@pytest.mark.parametrize(
    ("where", "stdin"),
    [("closed port", None), ("unresolvable name", "")],
    ids=["refused-stdin-open", "dns-stdin-at-eof"],
)
async def test_telegram_unreachable(tmp_path, bot_api, where, stdin):
    api = f"http://127.0.0.1:{closed_port()}" if where == "closed port" else "http://foldgate-bot-api.invalid"
    line = await only_line(
        tmp_path,
        TELEGRAM_AND_TERMINAL.format(api=api),
        "platforms.telegram.api_server",
        env={"TELEGRAM_BOT_TOKEN": bot_api.token},
        stdin=stdin,
    )
    assert f"cannot reach the Telegram Bot API at {api} after 3 attempts" in line
    assert bot_api.token not in line
    assert not leftover_servers(tmp_path / "home")


async def test_a_silent_telegram_bot_api(tmp_path, bot_api):
    with BlackHole() as hole:
        line = await only_line(
            tmp_path,
            TELEGRAM_AND_TERMINAL.format(api=hole.url),
            "platforms.telegram.api_server",
            env={"TELEGRAM_BOT_TOKEN": bot_api.token},
        )
    assert f"no answer from the Telegram Bot API at {hole.url} within 8 s" in line  # its deadline ended the wait
    assert not leftover_servers(tmp_path / "home")


class SilentBot:
    """A bot whose getMe is never answered: aiogram gives up once the ``request_timeout`` it was handed has
    passed, and says so as it does (a network error caused by a TimeoutError). What it was handed is kept."""

    token = "123456789:abc"

    def __init__(self) -> None:
        self.request_timeouts: list[int] = []

    async def get_me(self, request_timeout: int) -> User:
        from aiogram.exceptions import TelegramNetworkError
        from aiogram.methods import GetMe

        self.request_timeouts.append(request_timeout)
        raise TelegramNetworkError(method=GetMe(), message="Request timeout error") from TimeoutError()


async def test_a_silent_telegram_bot_api_gets_the_whole_deadline_in_one_attempt():
    """One deadline for every attempt: a silent Bot API is waited out, not cut short, and not asked again."""
    from gateway.platforms.telegram.errors import TelegramAdapterError
    from gateway.platforms.telegram.identify import START_SECONDS, identify

    bot = SilentBot()
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    said = r"no answer from the Telegram Bot API at http://silent\.test within 8 s"
    with pytest.raises(TelegramAdapterError, match=said):
        await identify(cast("Bot", bot), "http://silent.test", sleep=sleep)
    assert bot.request_timeouts == [math.ceil(START_SECONDS)] and slept == []


async def test_telegram_rejects_the_token(tmp_path, bot_api):
    line = await only_line(
        tmp_path,
        TELEGRAM_AND_TERMINAL.format(api=bot_api.base_url),
        "platforms.telegram.token (from TELEGRAM_BOT_TOKEN)",
        env={"TELEGRAM_BOT_TOKEN": "123456789:not-the-real-secret"},
    )
    assert "Telegram rejected the bot token" in line and "@BotFather" in line
    assert "not-the-real-secret" not in line
    assert not leftover_servers(tmp_path / "home")


async def test_a_malformed_telegram_token(tmp_path, bot_api):
    config = TELEGRAM.format(api=bot_api.base_url).replace("enabled: true,", "enabled: true, token: 'pasted twice',")
    code, output = await foldgate(tmp_path, config, "run")
    line = failure_line(code, output, "platforms.telegram.token", "TELEGRAM_BOT_TOKEN")
    assert "not a Telegram bot token" in line and "(from" not in line  # it came from the file
    assert bot_api.calls == []  # refused before anything was sent


async def test_a_telegram_adapter_that_stops_while_running_says_why_in_one_line(tmp_path, bot_api):
    bot_api.webhook = {"url": "https://bot.example.com/telegram/webhook"}  # getUpdates answers 409
    code, output = await foldgate(
        tmp_path, TELEGRAM.format(api=bot_api.base_url), "run", env={"TELEGRAM_BOT_TOKEN": bot_api.token}
    )
    line = failure_line(code, output, "platforms.telegram.mode", "409 Conflict")
    assert "deleteWebhook" in line


# --------------------------------------------------------------------------- Discord


async def test_discord_rejects_the_token(tmp_path, discord_api):
    line = await only_line(
        tmp_path,
        DISCORD_AND_TERMINAL,
        "platforms.discord.token (from DISCORD_BOT_TOKEN)",
        env={"DISCORD_BOT_TOKEN": "NDI0Mg.test.not-the-fake-apis-hmac"},
        discord_base=discord_api.base,
    )
    assert "Discord rejected the bot token" in line
    assert not leftover_servers(tmp_path / "home")


@pytest.mark.parametrize(
    ("variable", "token", "said"),
    [
        ("DISCORD_BOT_TOKEN", "garbage", "three parts joined by dots"),
        ("DISCORD_BOT_TOKEN", "abc.def.ghi", "first part is not a user id"),
        ("FOLDGATE_PLATFORMS__DISCORD__TOKEN", "Bot abc.def", "'Bot '"),
    ],
)
async def test_a_malformed_discord_token(tmp_path, variable, token, said):
    base = f"http://127.0.0.1:{closed_port()}/api/v10"  # were the token sent, this would say "cannot reach"
    line = await only_line(
        tmp_path,
        DISCORD_AND_TERMINAL,
        f"platforms.discord.token (from {variable})",
        env={variable: token},
        discord_base=base,
    )
    assert "not a Discord bot token" in line and said in line and "developer portal" in line


async def test_discord_unreachable(tmp_path):
    base = f"http://127.0.0.1:{closed_port()}/api/v10"
    line = await only_line(
        tmp_path, DISCORD_AND_TERMINAL, "platforms.discord", env={"DISCORD_BOT_TOKEN": DISCORD_TOKEN}, discord_base=base
    )
    assert f"cannot reach the Discord API at {base} after 3 attempts" in line
    assert not leftover_servers(tmp_path / "home")


async def test_a_silent_discord_api(tmp_path):
    with BlackHole() as hole:
        base = f"{hole.url}/api/v10"
        line = await only_line(
            tmp_path,
            DISCORD_AND_TERMINAL,
            "platforms.discord",
            stdin="",
            env={"DISCORD_BOT_TOKEN": DISCORD_TOKEN},
            discord_base=base,
        )
    assert f"no answer from the Discord API at {base} within 8 s" in line  # its deadline ended the wait


async def test_a_silent_discord_api_gets_one_deadline_for_every_attempt(monkeypatch):
    """The login's one attempt is still waiting when the deadline ends it: waited out, not cut short by a
    timeout of its own, and not tried again (a short deadline here: the 8 s one is the line above)."""
    from gateway.platforms.discord import DiscordAdapter, DiscordAdapterError

    adapter = DiscordAdapter(DISCORD_TOKEN)
    attempts: list[str] = []

    async def never_answered(token: str) -> None:
        attempts.append("asked")
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            attempts.append("ended by the deadline")
            raise

    monkeypatch.setattr(adapter.client, "login", never_answered)
    try:
        with pytest.raises(DiscordAdapterError, match=r"no answer from the Discord API at \S+ within 0\.25 s"):
            await adapter.login(timeout=0.25)
    finally:
        await adapter.client.close()
    assert attempts == ["asked", "ended by the deadline"]


# --------------------------------------------------------------------------- the model provider


async def test_an_unreachable_provider_costs_the_first_turn_a_clear_reply_not_the_process(tmp_path):
    """Nothing contacts the provider at start; the first turn answers what went wrong and the gateway lives on."""
    config = (
        "model: {provider: custom, name: gpt-4o-mini, base_url: 'http://foldgate-llm.invalid/v1', max_retries: 0}\n"
    )
    code, output = await foldgate(tmp_path, config, "run", stdin="hello?\n")
    assert code == 0 and "Traceback" not in output, output
    reply = next(line for line in output.splitlines() if "bot> " in line)
    assert "The model provider could not be reached. Your message is saved" in reply
    assert "foldgate-llm.invalid" not in reply  # a chat never sees the provider's address; the operator's log does
    logged = [line for line in output.splitlines() if "model.base_url" in line and "foldgate-llm.invalid" in line]
    assert len(logged) == 1, output


async def test_an_unreachable_provider_fails_doctor_naming_the_url(tmp_path):
    async with FakeLLMServer() as llm:  # a real provider on another port: only the configured one is down
        assert llm.openai_base_url
        base = f"http://127.0.0.1:{closed_port()}/v1"
        code, output = await foldgate(
            tmp_path, f"model: {{provider: custom, name: gpt-4o-mini, base_url: '{base}'}}\n", "doctor"
        )
    assert code == 1 and "Traceback" not in output, output
    row = next(line for line in output.splitlines() if line.startswith("provider"))
    assert "FAIL" in row and "model.base_url" in row and base in row and " — check model.base_url" in row


# --------------------------------------------------------------------------- the shared wording


def test_the_label_names_the_variable_that_set_the_value():
    assert setting_label("platforms.telegram.token", {}) == "platforms.telegram.token"
    assert setting_label("platforms.telegram.token", {"TELEGRAM_BOT_TOKEN": "1:x"}) == (
        "platforms.telegram.token (from TELEGRAM_BOT_TOKEN)"
    )
    both = {"TELEGRAM_BOT_TOKEN": "1:x", "foldgate_platforms__telegram__token": "2:y"}  # the FOLDGATE_ form wins
    assert setting_label("platforms.telegram.token", both) == (
        "platforms.telegram.token (from foldgate_platforms__telegram__token)"
    )
    assert (
        setting_label("model.api_key", {"OPENAI_API_KEY": "sk"}, provider="openai")
        == "model.api_key (from OPENAI_API_KEY)"
    )
    assert setting_label("redis.url", {"FOLDGATE_REDIS": '{"url": "redis://x"}'}) == "redis.url (from FOLDGATE_REDIS)"


def test_an_unknown_error_is_left_to_its_traceback():
    assert explain(KeyError("a bug")) is None


@pytest.mark.parametrize("command", [["search", "local:terminal", "anything"], ["replay", "--keep", "FIXTURE"]])
def test_search_and_replay_on_an_unreachable_redis_say_so_in_one_line(tmp_path, command):
    """The commands that open Redis besides ``run`` fail the same way: one line naming redis.url."""
    fixture = RECORDED / "overnight_ops.jsonl"
    config = tmp_path / "config.yaml"
    config.write_text("redis:\n  url: redis://127.0.0.1:1/0\n")
    argv = [a if a != "FIXTURE" else str(fixture) for a in command]
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "--config", str(config), *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("FOLDGATE_")},
    )
    output = done.stdout + done.stderr
    assert done.returncode == 1 and "Traceback" not in output, output
    assert "redis.url: nothing accepts connections at 127.0.0.1:1" in output
