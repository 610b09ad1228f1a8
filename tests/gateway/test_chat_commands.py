"""Chat commands through a running gateway: /help, unknown commands, text that only looks like one,
and /model checked against what the provider serves."""

from __future__ import annotations

from aiohttp import web

from agent.llm.client import lists_model
from agent.llm.local import LocalDemoModel
from gateway.commands import COMMANDS, parse, summary
from gateway.config import Settings
from gateway.store import SessionStore
from tests.fakes.gateway import make_settings, message, running_gateway
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply


def echo(request: RecordedRequest) -> Reply:
    return Reply.answer(f"echo: {request.last_user_text}")


def completions(server: FakeLLMServer) -> list[RecordedRequest]:
    """Requests that asked the model for an answer (model-list lookups are not chat)."""
    return [r for r in server.requests if r.method == "POST"]


def local_settings(redis_url: str, prefix: str, tmp_path) -> Settings:
    return Settings(
        redis={"url": redis_url, "key_prefix": prefix},
        model={"name": "foldgate-local", "provider": "local"},
        platforms={"local": {"enabled": True}},
        gateway={"home": str(tmp_path)},
    )


async def say(runner, chat: str, update: str, text: str, **kwargs) -> None:
    await runner.intake(message(chat, update, text, **kwargs))
    await runner.wait_idle()


# --------------------------------------------------------------------------- what counts as a command


def test_a_command_is_a_first_word_of_telegram_command_shape():
    assert parse("/help") == ("help", "")
    assert parse("/Model  gpt-4o ") == ("model", "gpt-4o")
    assert parse("/compress@foldgate_bot the deploy\nand the rollback") == ("compress", "the deploy\nand the rollback")
    assert parse("/frobnicate now") == ("frobnicate", "now")  # unknown, but a command: it is answered, not chatted
    for text in (
        "/usr/bin is missing",
        "/etc/hosts has it",
        "/ nothing",
        "/9lives",
        "//comment",
        "hello /help",
        "/" + "x" * 33,
        "",
    ):
        assert parse(text) is None, text


async def test_help_lists_every_command_with_what_it_does(redis, redis_url, key_prefix):
    async with FakeLLMServer(handler=echo) as server:
        settings = make_settings(redis_url, key_prefix, server.openai_base_url, context_length=16_000)
        async with running_gateway(settings, redis) as (runner, adapter, _events):
            await say(runner, "h", "1", "/help")
    [(chat, reply)] = adapter.sent
    lines = reply.splitlines()[1:]
    assert chat == "h" and not completions(server)
    for name, command in COMMANDS.items():
        line = next((line for line in lines if f"/{name} " in line or f"(/{name})" in line), None)
        assert line is not None, f"/help does not list /{name}"
        assert line.endswith(summary(command)) and summary(command)
    assert any(line.startswith("/new (/reset) — ") for line in lines)
    assert any(line.startswith("/resume N — ") for line in lines)
    assert len(lines) == len(set(COMMANDS.values()))  # one line per command, aliases on their command's line


async def test_an_unknown_command_is_answered_and_never_sent_to_the_model(redis, redis_url, key_prefix):
    async with FakeLLMServer(handler=echo) as server:
        settings = make_settings(redis_url, key_prefix, server.openai_base_url, context_length=16_000)
        async with running_gateway(settings, redis) as (runner, adapter, _events):
            await say(runner, "u", "1", "/frobnicate the logs")
            await say(runner, "u", "2", "/Deploy@foldgate_bot")
            assert not completions(server)
            await say(runner, "u", "3", "/usr/bin is missing on the new image")
            sid = await SessionStore(redis, key_prefix).current_session("local:u")
            stored = [m["content"] for m in await SessionStore(redis, key_prefix).active("local:u", sid)]
    first, second, third = (text for _, text in adapter.sent)
    assert "Unknown command /frobnicate" in first and "/help" in first
    assert "Unknown command /deploy" in second and "/help" in second
    assert third == "echo: /usr/bin is missing on the new image"  # a path is text: the model answers it
    assert [r.last_user_text for r in completions(server)] == ["/usr/bin is missing on the new image"]
    assert "/frobnicate the logs" not in stored


async def test_a_command_for_another_bot_is_recorded_not_answered(redis, redis_url, key_prefix):
    """The Telegram adapter marks ``/cmd@other_bot`` in a group as not addressed to this bot
    (``tests/gateway/platforms/test_telegram.py`` checks that); the gateway then neither runs nor answers it."""
    async with FakeLLMServer(handler=echo) as server:
        settings = make_settings(redis_url, key_prefix, server.openai_base_url, context_length=16_000)
        async with running_gateway(settings, redis) as (runner, adapter, _events):
            await say(runner, "g", "1", "Cy: /start@other_bot", respond=False)
            await say(runner, "g", "2", "/new@other_bot", respond=False)
            await say(runner, "g", "3", "/frobnicate@other_bot", respond=False)
            store = SessionStore(redis, key_prefix)
            sid = await store.current_session("local:g")
            stored = [m["content"] for m in await store.active("local:g", sid)]
            await say(runner, "g", "4", "/usage@foldgate_bot")
    assert len(adapter.sent) == 1 and adapter.sent[0][1].startswith("Context:")
    assert stored == ["Cy: /start@other_bot", "/new@other_bot", "/frobnicate@other_bot"]  # no /new ran: one session
    assert len(await store.indexed_sessions("local:g")) == 1 and not completions(server)


# --------------------------------------------------------------------------- /model


def test_a_listed_snapshot_serves_its_family_name_and_nothing_else():
    listed = ["claude-sonnet-4-20250514", "claude-opus-4-7", "gpt-4o"]
    assert lists_model(listed, "claude-sonnet-4") and lists_model(listed, "claude-sonnet-4-0")
    assert lists_model(listed, "gpt-4o") and lists_model(listed, "claude-opus-4-7")
    assert not lists_model(listed, "claude-opus-4") and not lists_model(listed, "gpt-4o-mini")


async def test_model_refuses_a_name_the_remote_provider_does_not_serve(redis, redis_url, key_prefix):
    async with FakeLLMServer(handler=echo, models=["gpt-4o", "gpt-4o-mini", "test-model"]) as server:
        settings = make_settings(redis_url, key_prefix, server.openai_base_url, context_length=16_000)
        async with running_gateway(settings, redis) as (runner, adapter, _events):
            store = SessionStore(redis, key_prefix)
            await say(runner, "m", "1", "hello")
            await say(runner, "m", "2", "/model gpt-4o-maxi")
            refused_meta = await store.meta("local:m", await store.current_session("local:m"))
            await say(runner, "m", "3", "/model gpt-4o")
            await say(runner, "m", "4", "/model gpt-4o-mini")
            await say(runner, "m", "5", "what now?")
    refused, switched, again = (text for _, text in adapter.sent[1:4])
    assert "does not serve gpt-4o-maxi" in refused and "staying on test-model" in refused and "gpt-4o" in refused
    assert refused_meta.model is None
    assert switched.startswith("Switched test-model → gpt-4o ") and "prompt cache belongs to the model" in switched
    assert "Could not verify" not in switched and again.startswith("Switched gpt-4o → gpt-4o-mini")
    assert completions(server)[-1].model == "gpt-4o-mini"
    listings = [r for r in server.requests if r.method == "GET"]
    assert len(listings) == 1 and listings[0].path.endswith("/v1/models")  # the list is cached between switches


class NoModelList(FakeLLMServer):
    """A provider whose model list is down (it still answers chat)."""

    async def _models(self, request: RecordedRequest, http: web.Request, path: str) -> web.StreamResponse:
        return await self._send_json(
            http, request, 503, {"error": {"message": "models unavailable", "type": "server_error"}}
        )


async def test_model_switches_but_says_so_when_the_list_cannot_be_read(redis, redis_url, key_prefix):
    async with NoModelList(handler=echo) as server:
        settings = make_settings(redis_url, key_prefix, server.openai_base_url, context_length=16_000)
        async with running_gateway(settings, redis) as (runner, adapter, _events):
            await say(runner, "m", "1", "/model gpt-4o")
            store = SessionStore(redis, key_prefix)
            meta = await store.meta("local:m", await store.current_session("local:m"))
    [(_, reply)] = adapter.sent
    assert reply.startswith("Switched test-model → gpt-4o") and "Could not verify that custom serves gpt-4o" in reply
    assert "could not be reached" in reply and "HTTP" not in reply and meta.model == "gpt-4o"


async def test_model_on_the_local_provider_knows_what_it_serves_and_warns_of_no_cost(
    redis, redis_url, key_prefix, tmp_path, monkeypatch
):
    async with running_gateway(local_settings(redis_url, key_prefix, tmp_path), redis) as (runner, adapter, _events):
        await say(runner, "l", "1", "/model gpt-4o")
        await say(runner, "l", "2", "/model foldgate-local")
        monkeypatch.setattr(LocalDemoModel, "list_models", lambda self: _served("foldgate-local", "foldgate-local-b"))
        await say(runner, "l", "3", "/model foldgate-local-b")
    refused, same, switched = (text for _, text in adapter.sent)
    assert "local does not serve gpt-4o" in refused and "staying on foldgate-local" in refused
    assert "foldgate-local" in refused.split("serves:")[1]
    assert same == "Already on foldgate-local."
    assert switched.startswith("Switched foldgate-local → foldgate-local-b")
    assert "prompt cache" not in switched and "uncached" not in switched  # the free demo model costs nothing


async def _served(*names: str) -> list[str]:
    return list(names)
