"""Several bots in one process: each with its own platforms, model, prompt and keys; one bot's failure its own;
a reload that adds and removes bots while turns are in flight.

The bots run as ``foldgate run`` runs them (:class:`gateway.bots.Fleet`): two Telegram bots polling two fake
Bot APIs with different tokens (real aiogram clients), one Discord bot on the fake Discord REST API (messages
built by discord.py from gateway payloads), one fake OpenAI-compatible model server that answers with the
model it was asked for and the system prompt it was given.

No wait here stands in for an event: a turn "in flight" is one whose answer the model holds until the test lets
it go, a message "not answered" is one no poller asked Telegram for, and the waits for what should come soon
(:func:`tests.fakes.waiting.wait_for`) only end a test that hangs.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections.abc import AsyncIterator
from typing import Any

import discord
import discord.gateway
import pytest
import pytest_asyncio
import yarl

from gateway.bots import Fleet
from gateway.cli.doctor import run_checks
from gateway.config import ConfigError, Settings
from gateway.config.loading import load_layers
from gateway.session_source import search_conversations
from gateway.startup_errors import StartupError, explain
from tests.fakes.bot_api import FakeBotAPI
from tests.fakes.discord_api import ALICE, DM_CHANNEL_ID, GUILD_ID, FakeDiscordAPI, message_payload
from tests.fakes.discord_api import TOKEN as DISCORD_TOKEN
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.fakes.waiting import PATIENCE, wait_for
from tests.fakes.web import free_port

TOKEN_A, TOKEN_B, TOKEN_D = "111111:support-token", "222222:ops-token", "444444:new-token"
#: The person who talks to every bot: the same numeric chat id on both Telegram bots.
PERSON = 42


def answer(request: RecordedRequest) -> Reply:
    """The model's answer names the model asked for and the system prompt it was given, then echoes."""
    return Reply(text=f"{request.model} | {request.system or '-'} | echo: {request.last_user_text}")


@pytest_asyncio.fixture
async def llm() -> AsyncIterator[FakeLLMServer]:
    async with FakeLLMServer(handler=answer) as server:
        yield server


@pytest_asyncio.fixture
async def discord_api(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeDiscordAPI]:
    async with FakeDiscordAPI() as api:
        monkeypatch.setattr(discord.http.Route, "BASE", api.base)
        monkeypatch.setattr(discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY", yarl.URL(api.gateway))
        yield api


def telegram(api: FakeBotAPI, token: str) -> dict[str, Any]:
    return {"telegram": {"enabled": True, "token": token, "api_server": api.base_url}}


def fleet_settings(redis_url: str, prefix: str, llm: FakeLLMServer, bots: list[dict[str, Any]]) -> Settings:
    return Settings(
        redis={"url": redis_url, "key_prefix": prefix},
        model={"name": "shared-model", "provider": "custom", "base_url": llm.openai_base_url, "context_length": 64_000},
        platforms={"local": {"enabled": False}},
        gateway={"lock_ttl_seconds": 5},
        delivery={"stream_replies": False},
        bots=bots,
    )


@contextlib.asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[Fleet]:
    """The bots, checked, opened and receiving, as ``foldgate run`` starts them; closed after."""
    fleet = await Fleet.open(settings, io.StringIO(), exclusive=False)
    try:
        await fleet.start_receiving()
        for bot in fleet.running.values():  # a Discord bot is connected to the fake gateway, its server announced
            if "dc" in bot.adapters:
                client = bot.adapters["dc"].client  # type: ignore[attr-defined]
                await wait_for(
                    lambda client=client: client.get_guild(GUILD_ID) is not None,
                    what="the Discord bot to join the fake gateway",
                )
        yield fleet
    finally:
        await fleet.close(grace_seconds=5)


def texts(api: FakeBotAPI) -> list[str]:
    return [sent.text for sent in api.sent]


async def user_texts(fleet: Fleet, bot: str, chat: str) -> list[str]:
    store = fleet.gateways()[bot].store
    sid = await store.current_session(chat)
    return [m["content"] for m in await store.active(chat, sid) if m["role"] == "user"]


async def test_three_bots_answer_each_with_its_own_model_and_prompt_and_keep_their_own_sessions(
    redis_url, key_prefix, llm, discord_api
):
    async with FakeBotAPI(TOKEN_A, username="support_bot") as support, FakeBotAPI(TOKEN_B, username="ops_bot") as ops:
        settings = fleet_settings(
            redis_url,
            key_prefix,
            llm,
            [
                {
                    "name": "support",
                    "model": {"name": "support-model", "system_prompt": "You are Support."},
                    "platforms": telegram(support, TOKEN_A),
                },
                {
                    "name": "ops",
                    "model": {"name": "ops-model", "system_prompt": "You are Ops."},
                    "platforms": telegram(ops, TOKEN_B),
                },
                {"name": "community", "platforms": {"discord": {"enabled": True, "token": DISCORD_TOKEN}}},
            ],
        )
        async with serving(settings) as fleet:
            assert [status.state for status in fleet.status_list()] == ["running"] * 3
            support.push(support.private_message(PERSON, "my order is late"))
            ops.push(ops.private_message(PERSON, "the deploy is stuck"))
            hello = message_payload(ALICE, "hello from discord", channel_id=DM_CHANNEL_ID, guild=False)
            await discord_api.dispatch("MESSAGE_CREATE", hello)  # through the gateway connection, as Discord pushes it
            await support.wait_until(lambda: len(support.sent) == 1)
            await ops.wait_until(lambda: len(ops.sent) == 1)
            await wait_for(lambda: bool(discord_api.contents(DM_CHANNEL_ID)), what="the Discord answer")

            assert texts(support) == ["support-model | You are Support. | echo: my order is late"]
            assert texts(ops) == ["ops-model | You are Ops. | echo: the deploy is stuck"]
            # what a bot leaves out is the top level's: the model, and no system prompt
            assert discord_api.contents(DM_CHANNEL_ID) == ["shared-model | - | echo: hello from discord"]

            # the same numeric chat id on two bots: two sessions, each with its own messages only
            chat = f"tg:{PERSON}"
            assert await user_texts(fleet, "support", chat) == ["my order is late"]
            assert await user_texts(fleet, "ops", chat) == ["the deploy is stuck"]
            support_store, ops_store = fleet.gateways()["support"].store, fleet.gateways()["ops"].store
            assert support_store.prefix == f"{key_prefix}.support" and ops_store.prefix == f"{key_prefix}.ops"
            # a search in one bot never finds another's messages
            found = [
                await search_conversations(store, chat, await store.current_session(chat), "deploy", 5)
                for store in (support_store, ops_store)
            ]
            assert found[0] == [] and "user" in [hit.role for hit in found[1]]


async def test_a_revoked_token_stops_its_bot_only_and_says_so_in_doctor(redis_url, key_prefix, llm, discord_api):
    async with FakeBotAPI(TOKEN_A) as support, FakeBotAPI(TOKEN_B) as ops:
        settings = fleet_settings(
            redis_url,
            key_prefix,
            llm,
            [
                {"name": "support", "platforms": telegram(support, TOKEN_A)},
                {"name": "ops", "platforms": telegram(ops, TOKEN_B)},
                {"name": "community", "platforms": {"discord": {"enabled": True, "token": DISCORD_TOKEN}}},
            ],
        )
        async with serving(settings) as fleet:
            support.push(support.private_message(PERSON, "before"))
            await support.wait_until(lambda: len(support.sent) == 1)

            support.token = "111111:revoked-by-botfather"  # every call with the old token is now 401
            support.push(support.private_message(PERSON, "after"))
            await wait_for(lambda: fleet.statuses["support"].state == "failed", what="the revoked bot to fail")
            status = fleet.statuses["support"]
            assert status.state == "failed" and "rejected the bot token" in status.detail
            assert "support" not in fleet.running and set(fleet.running) == {"ops", "community"}

            # the others go on answering
            ops.push(ops.private_message(PERSON, "still there?"))
            await discord_api.dispatch(
                "MESSAGE_CREATE", message_payload(ALICE, "and here?", channel_id=DM_CHANNEL_ID, guild=False)
            )
            await ops.wait_until(lambda: len(ops.sent) == 1)
            assert texts(ops) == ["shared-model | - | echo: still there?"]
            await wait_for(lambda: bool(discord_api.contents(DM_CHANNEL_ID)), what="the Discord answer")
            assert discord_api.contents(DM_CHANNEL_ID) == ["shared-model | - | echo: and here?"]

            # doctor: one row per bot and platform, the revoked one failed with what to fix
            rows = {check.name: check for check in await run_checks(settings)}
            assert rows["support telegram"].status == "FAIL" and "rejected" in rows["support telegram"].detail
            assert rows["ops telegram"].status == "ok" and rows["community discord"].status == "ok"
            assert rows["redis"].status == "ok" and "telegram" not in rows


async def test_reload_adds_a_bot_and_removes_one_while_turns_are_in_flight(redis_url, key_prefix, llm):
    released = asyncio.Event()

    async def held_while_slow(request: RecordedRequest) -> Reply:
        """An answer asked for slowly is held until the test lets it go: its turn is in flight until then."""
        if "slowly" in request.last_user_text:
            await released.wait()
        return answer(request)

    def slow_asks() -> int:
        return sum(1 for request in list(llm.requests) if request.body and "slowly" in request.last_user_text)

    llm.handler = held_while_slow
    async with FakeBotAPI(TOKEN_A) as support, FakeBotAPI(TOKEN_B) as ops, FakeBotAPI(TOKEN_D) as newcomer:
        before = fleet_settings(
            redis_url,
            key_prefix,
            llm,
            [
                {"name": "support", "platforms": telegram(support, TOKEN_A)},
                {"name": "ops", "platforms": telegram(ops, TOKEN_B)},
            ],
        )
        after = fleet_settings(
            redis_url,
            key_prefix,
            llm,
            [
                {"name": "support", "platforms": telegram(support, TOKEN_A)},
                {
                    "name": "newcomer",
                    "model": {"system_prompt": "You are new."},
                    "platforms": telegram(newcomer, TOKEN_D),
                },
            ],
        )
        async with serving(before) as fleet:
            support.push(support.private_message(PERSON, "answer slowly please"))
            ops.push(ops.private_message(PERSON, "answer slowly too"))
            await wait_for(lambda: slow_asks() == 2, what="both turns to ask the model")
            assert fleet.busy_chats == 2  # both turns are waiting on the model now

            reloading = asyncio.create_task(fleet.reload(after))
            await wait_for(lambda: "ops" not in fleet.running, what="the reload to stop ops")
            released.set()  # only now can ops' turn end: a reload that returns has waited for it
            async with asyncio.timeout(PATIENCE):
                lines = await reloading
            assert "bot ops stopped" in lines and "bot newcomer started" in lines
            assert [status.name for status in fleet.status_list()] == ["support", "newcomer"]

            # the removed bot finished the turn it had begun; the kept one was never touched
            assert texts(ops) == ["shared-model | - | echo: answer slowly too"]
            await support.wait_until(lambda: len(support.sent) == 1)
            polls_of_ops = len(ops.get_updates_calls)
            ops.push(ops.private_message(PERSON, "anyone?"))  # no one polls the removed bot's token now
            newcomer.push(newcomer.private_message(PERSON, "hi"))
            await newcomer.wait_until(lambda: len(newcomer.sent) == 1)
            assert texts(newcomer) == ["shared-model | You are new. | echo: hi"]
            # kept at Telegram, not lost, not answered: nobody asked for it, while the fleet went on answering
            assert len(ops.get_updates_calls) == polls_of_ops
            assert ops.pending_updates == 1 and len(ops.sent) == 1

            # adding it back answers what waited, once
            assert "bot ops started" in await fleet.reload(before)
            await ops.wait_until(lambda: len(ops.sent) == 2)
            # once Telegram has the update confirmed and the bot is idle, nothing can answer it a second time
            await ops.wait_until(lambda: ops.pending_updates == 0, timeout=PATIENCE)
            await fleet.running["ops"].gateway.runner.wait_idle(timeout=PATIENCE)
            assert texts(ops) == ["shared-model | - | echo: answer slowly too", "shared-model | - | echo: anyone?"]
            assert texts(support) == ["shared-model | - | echo: answer slowly please"]
            assert "newcomer" not in fleet.running


async def test_bots_that_would_be_one_are_refused_naming_the_key(redis_url, key_prefix, llm):
    with pytest.raises(ConfigError) as refused:
        load_layers(
            {
                "bots": [
                    {"name": "a", "platforms": {"telegram": {"enabled": True, "token": "1:x"}}},
                    {"name": "a", "platforms": {"telegram": {"enabled": True, "token": "1:x"}}},
                    {"name": "c", "model": {"provider": "custom"}},
                ]
            },
            {},
            "test",
        )
    problems = refused.value.problems
    assert any(p.startswith("bots[1].name: the same as bots[0]'s") for p in problems)
    assert any(p.startswith("bots[1].platforms.telegram.token: the same as bots[0]'s") for p in problems)
    assert any(p.startswith("bots[2].model.base_url: required when provider is custom") for p in problems)


def test_a_bot_on_another_provider_never_gets_the_top_levels_key(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-bot")
    settings = Settings(
        model={"provider": "openai", "name": "gpt-4o", "api_key": "sk-openai-top"},
        platforms={"local": {"enabled": False}},
        bots=[
            {
                "name": "claude",
                "model": {"provider": "anthropic", "name": "claude-sonnet-4"},
                "platforms": {"local": {"enabled": True}},
            },
            {
                "name": "same",
                "model": {"provider": "openai", "name": "gpt-4o-mini"},
                "platforms": {"local": {"enabled": True}},
            },
        ],
    )
    claude, same = settings.each_bot()
    assert claude.settings.model.api_key.get_secret_value() == "sk-ant-bot"
    assert same.settings.model.api_key.get_secret_value() == "sk-openai-top"  # the same provider keeps its key


async def test_an_unreachable_provider_or_tool_server_for_one_bot_is_its_own_degraded_state(redis_url, key_prefix, llm):
    away = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens: connections are refused
    broken_tools = {
        "mcp_servers": {"tracker": {"url": f"http://127.0.0.1:{free_port()}/mcp"}},
        "allow": [{"servers": ["tracker"]}],
    }
    async with FakeBotAPI(TOKEN_A) as support, FakeBotAPI(TOKEN_B) as ops, FakeBotAPI(TOKEN_D) as calm:
        settings = fleet_settings(
            redis_url,
            key_prefix,
            llm,
            [
                {
                    "name": "support",
                    "model": {"base_url": away, "max_retries": 0},
                    "platforms": telegram(support, TOKEN_A),
                },
                {"name": "ops", "tools": broken_tools, "platforms": telegram(ops, TOKEN_B)},
                {"name": "calm", "platforms": telegram(calm, TOKEN_D)},
            ],
        )
        async with serving(settings) as fleet:
            for api in (support, ops, calm):
                api.push(api.private_message(PERSON, "status?"))
            await ops.wait_until(lambda: len(ops.sent) == 1)  # answered without the tools of a server that is down
            await calm.wait_until(lambda: len(calm.sent) == 1)
            assert texts(ops) == texts(calm) == ["shared-model | - | echo: status?"]
            statuses = await eventually_degraded(fleet, "support")
            assert statuses["support"].detail.startswith("the model provider is away")
            assert statuses["ops"].state == "degraded"
            assert statuses["ops"].detail.startswith("MCP server tracker is down")
            assert statuses["calm"].state == "running" and statuses["calm"].detail == ""
            await support.wait_until(lambda: len(support.sent) == 1)  # the person is told, once; the message is kept
            assert set(fleet.running) == {"support", "ops", "calm"}  # each still takes messages in

            rows = {check.name: check for check in await run_checks(settings)}
            assert rows["support provider"].status == "FAIL" and rows["ops provider"].status == "ok"
            assert rows["ops mcp tracker"].status == "FAIL" and "support mcp tracker" not in rows


async def eventually_degraded(fleet: Fleet, name: str) -> dict[str, Any]:
    """Every bot's status, once bot ``name`` shows its problem (a running bot's problems show in ``status_list``)."""

    def statuses() -> dict[str, Any]:
        return {status.name: status for status in fleet.status_list()}

    await wait_for(lambda: statuses()[name].state == "degraded", what=f"bot {name} to show its problem")
    return statuses()


async def test_when_no_bot_can_start_each_says_why_and_nothing_is_left_open(redis_url, key_prefix, llm):
    async with FakeBotAPI("999999:the-only-token-it-knows") as api:
        settings = fleet_settings(
            redis_url,
            key_prefix,
            llm,
            [
                {"name": "support", "platforms": telegram(api, TOKEN_A)},
                {"name": "ops", "platforms": telegram(api, TOKEN_B)},
            ],
        )
        out = io.StringIO()
        with pytest.raises(StartupError, match="none of the 2 bots could start") as refused:
            await Fleet.open(settings, out, exclusive=False)
        lines = out.getvalue().splitlines()
        assert [line.split(":")[0] for line in lines] == ["foldgate"] * 2
        assert "bot support could not start" in lines[0] and "rejected the bot token" in lines[0]
        assert "bot ops could not start" in lines[1]
        assert explain(refused.value).startswith("bots: none of the 2 bots")


async def test_reload_restarts_a_changed_bot_but_never_the_one_holding_the_web_chat(redis_url, key_prefix, llm):
    async with FakeBotAPI(TOKEN_A) as support, FakeBotAPI(TOKEN_B) as ops:

        def bots(prompt: str) -> list[dict[str, Any]]:
            return [
                {"name": "support", "model": {"system_prompt": prompt}, "platforms": telegram(support, TOKEN_A)},
                {"name": "ops", "model": {"system_prompt": prompt}, "platforms": telegram(ops, TOKEN_B)},
            ]

        plain = fleet_settings(redis_url, key_prefix, llm, bots("Be brief."))
        async with serving(plain) as fleet:
            lines = await fleet.reload(fleet_settings(redis_url, key_prefix, llm, bots("Be kind.")))
            assert lines == ["bot support restarted", "bot ops restarted"]
            support.push(support.private_message(PERSON, "hello"))
            await support.wait_until(lambda: len(support.sent) == 1)
            assert texts(support) == ["shared-model | Be kind. | echo: hello"]

        with_web = plain.model_copy(
            update={
                "platforms": plain.platforms.model_copy(
                    update={"local": plain.platforms.local.model_copy(update={"enabled": True, "web": True, "port": 0})}
                )
            }
        )
        async with serving(with_web) as fleet:
            changed = with_web.model_copy(
                update={"bots": fleet_settings(redis_url, key_prefix, llm, bots("Be kind.")).bots}
            )
            lines = await fleet.reload(changed)
            assert lines == [
                "bot support serves the terminal or web chat: restart foldgate to change or remove it",
                "bot ops restarted",
            ]


def test_foldgate_reload_signals_only_live_gateways_never_a_recycled_pid(tmp_path):
    import subprocess
    import sys

    from gateway.run.registry import serving_dir, serving_processes

    folder = serving_dir(tmp_path)
    folder.mkdir(parents=True)
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    try:
        (folder / str(stranger.pid)).write_text("")  # no start time: counts only if it is a foldgate
        (folder / str(gone.pid)).write_text("12345")  # dead: its file is removed
        assert serving_processes(tmp_path) == []
        assert not (folder / str(gone.pid)).exists() and not (folder / str(stranger.pid)).exists()
        assert stranger.poll() is None  # never signalled
    finally:
        stranger.kill()
        stranger.wait()


def test_what_a_bot_leaves_empty_or_names_anew_is_read_as_a_person_would_expect(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    settings = Settings(
        model={"provider": "custom", "base_url": "https://a.example/v1", "api_key": "key-for-a"},
        platforms={"local": {"enabled": False}},
        access={"budgets": {"per_user": {"usd": 5.0, "period": "day"}}},
        bots=[
            {
                "name": "elsewhere",
                "model": {"base_url": "https://b.example/v1"},
                "platforms": {"local": {"enabled": True}},
                "access": {"budgets": {"per_user": {"tokens": 1000, "period": "week"}}},
            },
            {"name": "empty", "model": None, "platforms": {"local": {"enabled": True}, "telegram": None}},
        ],
    )
    elsewhere, empty = settings.each_bot()
    assert elsewhere.settings.model.api_key is None  # another endpoint never gets the top level's key
    budget = elsewhere.settings.access.budgets.per_user
    assert budget is not None and budget.tokens == 1000 and budget.usd is None  # a budget is replaced, not patched
    assert empty.settings.model == settings.model  # an empty section changes nothing
