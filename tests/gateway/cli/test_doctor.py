"""``foldgate doctor`` through the real command line, against real servers on loopback.

Redis is the test server (or the embedded one, started and stopped by the check), the provider
the fake LLM server, Telegram the fake Bot API, Discord the fake REST API (discord.py's base is
pointed at it in the child, as tests/gateway/platforms/test_discord.py does in-process). Black-holed addresses show
that every check ends on its own deadline, each row saying which; that the checks wait side by side
(the slowest bounds the doctor, not their sum) is shown in-process, with checks that can only end
once all of them have started. No test times the child.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import pytest_asyncio

from gateway.cli import doctor
from gateway.config import Settings
from tests.fakes.bot_api import FakeBotAPI
from tests.fakes.cli import PATIENCE, closed_port, foldgate, leftover_servers
from tests.fakes.discord_api import TOKEN as DISCORD_TOKEN
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.network import BlackHole

CHECKS = ["config", "redis", "provider", "telegram", "discord"]


def rows(output: str) -> dict[str, tuple[str, str]]:
    """check name -> (result, detail), from the table; the header and the summary are checked too."""
    lines = output.splitlines()
    header = next(index for index, line in enumerate(lines) if line.split()[:3] == ["check", "result", "detail"])
    table = lines[header + 1 : header + 1 + len(CHECKS)]
    assert [line.split()[0] for line in table] == CHECKS, output
    assert lines[header + 1 + len(CHECKS)].startswith("foldgate doctor: "), output
    parsed = {}
    for line in table:
        name, result, detail = line.split(None, 2)
        parsed[name] = (result, detail)
    return parsed


@pytest_asyncio.fixture
async def llm() -> AsyncIterator[FakeLLMServer]:
    async with FakeLLMServer() as server:
        yield server


def everything(redis_url: str, llm: FakeLLMServer, bot_api: FakeBotAPI) -> str:
    return f"""\
redis: {{url: "{redis_url}"}}
model: {{provider: custom, name: gpt-4o-mini, base_url: "{llm.openai_base_url}", api_key: sk-test}}
platforms:
  local: {{enabled: false}}
  telegram: {{enabled: true, api_server: "{bot_api.base_url}"}}
  discord: {{enabled: true}}
"""


async def test_every_check_passes_against_the_fakes(tmp_path, redis_url, llm, bot_api, discord_api):
    code, output = await foldgate(
        tmp_path,
        everything(redis_url, llm, bot_api),
        "doctor",
        env={"TELEGRAM_BOT_TOKEN": bot_api.token, "DISCORD_BOT_TOKEN": DISCORD_TOKEN},
        discord_base=discord_api.base,
    )
    assert code == 0, output
    found = rows(output)
    assert {name: result for name, (result, _) in found.items()} == dict.fromkeys(CHECKS, "ok"), output
    assert "answers PING" in found["redis"][1]
    assert "gpt-4o-mini" in found["provider"][1]
    assert "@foldgate_bot" in found["telegram"][1]
    assert "@foldbot" in found["discord"][1].lower()
    assert "every enabled check passed" in output and "Traceback" not in output
    # one one-token answer; besides it, only questions about the model's window (GETs)
    assert [request.body.get("max_tokens") for request in llm.requests if request.method == "POST"] == [1]
    assert bot_api.calls == ["getme"]  # getMe only: no polling, no webhook changes
    assert bot_api.token not in output and DISCORD_TOKEN not in output


async def test_the_embedded_server_is_checked_and_not_left_running(tmp_path):
    code, output = await foldgate(tmp_path, "platforms: {local: {enabled: true}}\n", "doctor")
    assert code == 0, output
    found = rows(output)
    assert found["redis"][0] == "ok" and "embedded server" in found["redis"][1]
    assert found["provider"] == ("ok", found["provider"][1]) and "no network" in found["provider"][1]
    assert found["telegram"] == ("skipped", "platforms.telegram.enabled is false")
    assert found["discord"] == ("skipped", "platforms.discord.enabled is false")
    assert not leftover_servers(tmp_path / "home")


async def test_failing_rows_name_what_to_fix(tmp_path, redis_url, llm, bot_api):
    llm.enqueue(Reply.error(401, "Incorrect API key provided", kind="invalid_request_error", code="invalid_api_key"))
    config = everything(redis_url, llm, bot_api).replace("discord: {enabled: true}", "discord: {enabled: false}")
    code, output = await foldgate(tmp_path, config, "doctor", env={"TELEGRAM_BOT_TOKEN": "123456789:revoked"})
    assert code == 1, output
    found = rows(output)
    assert found["config"][0] == "ok" and found["redis"][0] == "ok" and found["discord"][0] == "skipped"
    assert found["provider"][0] == "FAIL" and found["provider"][1].startswith("model.api_key: ")
    assert "check model.api_key" in found["provider"][1]
    assert found["telegram"][0] == "FAIL"
    assert found["telegram"][1].startswith("platforms.telegram.token (from TELEGRAM_BOT_TOKEN): Telegram rejected")
    assert "2 checks failed (provider, telegram)" in output and "Traceback" not in output


async def test_an_invalid_configuration_names_the_key_and_skips_the_rest(tmp_path):
    code, output = await foldgate(tmp_path, "redis: {url: 'localhost:6379'}\n", "doctor")
    assert code == 1, output
    found = rows(output)
    assert found["config"][0] == "FAIL" and "redis.url" in found["config"][1]
    assert all(found[name] == ("skipped", "needs a valid configuration") for name in CHECKS[1:])


async def test_black_holed_hosts_cost_seconds_not_minutes(tmp_path):
    with BlackHole() as redis_hole, BlackHole() as telegram_hole, BlackHole() as discord_hole:
        config = f"""\
redis: {{url: "redis://{redis_hole.host}:{redis_hole.port}/0"}}
platforms:
  local: {{enabled: false}}
  telegram: {{enabled: true, token: "123456789:abc", api_server: "{telegram_hole.url}"}}
  discord: {{enabled: true, token: "{DISCORD_TOKEN}"}}
"""
        code, output = await foldgate(
            tmp_path, config, "doctor", timeout=PATIENCE, discord_base=f"{discord_hole.url}/api/v10"
        )
    assert code == 1, output
    found = rows(output)  # each ended by its own deadline, the one its row names
    assert found["redis"][0] == "FAIL"
    assert found["redis"][1].startswith(
        f"redis.url: no answer from {redis_hole.host}:{redis_hole.port} within {doctor.REDIS_TIMEOUT:g} s"
    )
    assert found["telegram"][0] == "FAIL"
    assert found["telegram"][1].startswith(
        f"platforms.telegram.api_server: no answer from the Telegram Bot API at {telegram_hole.url} within 8 s"
    )
    assert found["discord"][0] == "FAIL"
    assert found["discord"][1].startswith(f"platforms.discord: no answer from the Discord API at {discord_hole.url}")


async def test_the_checks_wait_side_by_side(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each check here returns only once every check has started: run one after another, the first would
    wait for the others for ever; side by side, all of them return."""
    started: set[str] = set()
    everyone = asyncio.Event()

    def waiting_for_the_others(name: str) -> Callable[[Settings], Awaitable[doctor.Check]]:
        async def check(settings: Settings) -> doctor.Check:
            started.add(name)
            if started == set(CHECKS[1:]):
                everyone.set()
            await everyone.wait()
            return doctor.Check(name, "ok", "every other check had started")

        return check

    monkeypatch.setattr(doctor, "SERVICE_CHECKS", {name: waiting_for_the_others(name) for name in CHECKS[1:]})
    async with asyncio.timeout(PATIENCE):
        checks = await doctor.run_checks(Settings(platforms={"local": {"enabled": True}}))
    assert [(check.name, check.status) for check in checks] == [(name, "ok") for name in CHECKS[1:]]


async def test_unreachable_platforms_and_a_malformed_token_fail_in_seconds(tmp_path):
    api = f"http://127.0.0.1:{closed_port()}"
    config = f"""\
platforms:
  local: {{enabled: true}}
  telegram: {{enabled: true, token: "123456789:abc", api_server: "{api}"}}
  discord: {{enabled: true}}
"""
    code, output = await foldgate(
        tmp_path,
        config,
        "doctor",
        env={"DISCORD_BOT_TOKEN": "garbage"},
        timeout=PATIENCE,
        discord_base=f"http://127.0.0.1:{closed_port()}/api/v10",
    )
    assert code == 1, output
    found = rows(output)  # three quick attempts, or none: no deadline was needed
    assert found["telegram"][0] == "FAIL"
    assert found["telegram"][1].startswith(
        f"platforms.telegram.api_server: cannot reach the Telegram Bot API at {api} after 3 attempts ("
    )
    assert found["discord"][0] == "FAIL"
    assert found["discord"][1].startswith("platforms.discord.token (from DISCORD_BOT_TOKEN): not a Discord bot token (")
    assert "developer portal" in found["discord"][1]
    assert "WARNING" not in output and "retry" not in output  # the attempts leave no log lines between the rows
