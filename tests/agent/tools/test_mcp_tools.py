"""MCP servers as the agent's tools, end to end: a real server written with the official SDK
(``tests.fakes.mcp_server``) over stdio and over streamable HTTP, a real GatewayRunner on real Redis, the fake
provider asking for the tools; every request body checked against the official SDK types.

Shown: the reply uses a tool's result; the tools reach the model in a stable order with their schemas; a chat outside
``tools.allow`` never sees them; a destructive tool is not offered until configured, nor one that appears after a
restart; a server that exits mid-call, one that never answers and a tool with a broken schema each cost one line in the
log and the chat goes on; a 5 MB result reaches the model as head and tail and is fetched back by id after a
compaction; an image a tool returns goes to the person; every call is in the chat's activity and the metrics.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

import pytest

from agent.loop import STOPPED_REPLY
from agent.retrying import MCP_CONNECT
from agent.tools import ToolRegistry
from agent.tools.mcp import McpServer, McpServerSpec, McpTools, ServerDown, exposed_name
from gateway.cli.doctor import checks_for
from gateway.events import CompressEvent, ToolCallEvent
from gateway.platforms.local import TerminalAdapter
from gateway.platforms.telegram import TelegramAdapter
from gateway.store.activity import ActivityLog
from tests.fakes.agent_media import ROUTES, Shelf, run_route, validate
from tests.fakes.bot_api import FakeBotAPI
from tests.fakes.gateway import PATIENCE, make_settings, message, running_gateway, wait_for
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.fakes.mcp_server import TICKET, chart_png, serve_http, stdio_command
from tests.fakes.paths import REPO
from tests.fakes.sdk_shapes import validate_chat_completions
from tests.fakes.telegram import telegram_gateway, telegram_settings
from tests.fakes.tool_model import agent_for, last_tool_result, tool_names

WINDOW = 64_000
ROOT = str(REPO)


def notes_settings(
    redis_url: str,
    key_prefix: str,
    base_url: str,
    *,
    window: int = WINDOW,
    compression: dict[str, Any] | None = None,
    **server: Any,
) -> Any:
    command, args = stdio_command()
    config = {"command": command, "args": args, "cwd": ROOT, "timeout_seconds": 3, **server}
    tools = {
        "allowed_commands": [command],
        "mcp_servers": {"notes": config},
        "allow": [{"servers": ["notes"], "chats": ["local:ops"]}],
    }
    return make_settings(
        redis_url,
        key_prefix,
        base_url,
        context_length=window,
        tools=tools,
        gateway={"max_message_tokens": 4_000},
        compression=compression or {},
    )


class SteppedClock:
    """The clock a server's wait before it is started again is read on: it moves when the test moves it, so
    "past the first wait" is a step, not a second of sleep that a busy machine may stretch or cut short."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def past_the_first_wait(self) -> None:
        self.now += MCP_CONNECT.delay(1)


def stepped(runner: Any, server: str = "notes") -> SteppedClock:
    """Put ``server`` of ``runner``'s MCP servers on a clock of the test's."""
    assert runner.mcp is not None
    clock = SteppedClock()
    runner.mcp.servers[server].clock = clock
    return clock


async def test_the_model_uses_a_stdio_servers_tool_and_a_chat_outside_allow_never_sees_it(
    redis, redis_url, key_prefix
) -> None:
    handler = agent_for({"ticket": ("notes__lookup", {"ticket": "42"})})
    async with FakeLLMServer(handler=handler, context_limit=WINDOW) as llm:
        settings = notes_settings(redis_url, key_prefix, llm.openai_base_url)
        async with running_gateway(settings, redis) as (runner, adapter, events):
            await runner.intake(message("ops", "1", "what does ticket 42 say?"))
            await runner.wait_idle()  # answered before the second question, so each is a turn of its own
            await runner.intake(message("ops", "2", "and the ticket again?"))
            await runner.intake(message("public", "3", "any ticket about logins?"))
            await runner.wait_idle()
    replies = dict((chat, text) for chat, text in adapter.sent if chat == "ops")
    assert [text for chat, text in adapter.sent if chat == "ops"] == [f"tool said: {TICKET}"] * 2
    asked = [request for request in llm.requests if "notes__lookup" in tool_names(request)]
    assert len(asked) == 4  # two turns of two requests each, in the allowed chat only
    assert len({tuple(tool_names(request)) for request in asked}) == 1  # the same tools, in the same order
    names = tool_names(asked[0])
    assert [name for name in names if name.startswith("notes__")] == sorted(  # not broken, not extra
        ["notes__chart", "notes__die", "notes__dump", "notes__fussy", "notes__hang", "notes__lookup", "notes__wipe"]
    )
    public = [request for request in llm.requests if "logins" in request.text]
    assert public and all(not name.startswith("notes__") for request in public for name in tool_names(request))
    assert ("public", "no tool needed") in adapter.sent and replies
    calls = [event for event in events if isinstance(event, ToolCallEvent)]
    assert [(call.chat, call.server, call.tool, call.outcome) for call in calls] == [
        ("local:ops", "notes", "lookup", "ok")
    ] * 2
    assert runner.events.counters["tool_calls"] == 2 and runner.events.counters["tool_calls_failed"] == 0


async def test_an_http_server_gets_its_bearer_token_from_the_environment(
    redis, redis_url, key_prefix, monkeypatch
) -> None:
    monkeypatch.setenv("NOTES_TOKEN", "s3cret-token")
    handler = agent_for({"ticket": ("web__lookup", {"ticket": "42"})})
    async with serve_http("s3cret-token") as (url, guard), FakeLLMServer(handler=handler) as llm:
        tools = {
            "mcp_servers": {"web": {"url": url, "headers": {"Authorization": "Bearer ${NOTES_TOKEN}"}}},
            "allow": [{"servers": ["web"]}],
        }
        settings = make_settings(redis_url, key_prefix, llm.openai_base_url, context_length=WINDOW, tools=tools)
        async with running_gateway(settings, redis) as (runner, adapter, _events):
            await runner.intake(message("any", "1", "ticket 42?"))
            await runner.wait_idle()
    assert adapter.sent == [("any", f"tool said: {TICKET}")]
    assert guard.seen and set(guard.seen) == {"Bearer s3cret-token"}


async def test_a_server_that_dies_one_that_hangs_and_a_broken_schema_cost_a_line_each_and_the_chat_goes_on(
    redis, redis_url, key_prefix, caplog, tmp_path, monkeypatch
) -> None:
    cancelled = tmp_path / "cancelled"
    handler = agent_for(
        {"crash": ("notes__die", {}), "wait": ("notes__hang", {}), "ticket": ("notes__lookup", {"ticket": "42"})}
    )
    async with FakeLLMServer(handler=handler, context_limit=WINDOW) as llm:
        settings = notes_settings(
            redis_url, key_prefix, llm.openai_base_url, timeout_seconds=2, env={"FAKE_MCP_CANCELLED": str(cancelled)}
        )
        async with running_gateway(settings, redis) as (runner, adapter, events):
            clock = stepped(runner)
            caplog.set_level(logging.WARNING, logger="agent.tools.mcp")
            await runner.intake(message("ops", "1", "crash the server"))
            await runner.wait_idle()
            clock.past_the_first_wait()  # before a failed server is started again
            await runner.intake(message("ops", "2", "wait for it"))
            await runner.wait_idle()
            await runner.intake(message("ops", "3", "and ticket 42?"))
            await runner.wait_idle()
    texts = [text for _, text in adapter.sent]
    assert len(texts) == 3
    assert "the MCP server 'notes' is not available" in texts[0] and "Connection closed" in texts[0]
    assert "notes__hang did not answer within 2 s; the call was cancelled" in texts[1]
    assert cancelled.read_text() == "cancelled"  # the server was told
    assert texts[2] == f"tool said: {TICKET}"  # started again for the next message
    lines = [record.getMessage() for record in caplog.records]
    assert sum("tool 'broken' left out" in line for line in lines) >= 1
    assert all("Traceback" not in line for line in lines)
    outcomes = [event.outcome for event in events if isinstance(event, ToolCallEvent)]
    assert outcomes == ["down", "timeout", "ok"]


async def test_a_five_megabyte_result_goes_as_head_and_tail_and_is_found_and_fetched_after_a_compaction(
    redis, redis_url, key_prefix
) -> None:
    fetched: dict[str, str] = {}

    def handler(request: RecordedRequest) -> Reply:
        validate_chat_completions(request.body)
        if not request.body.get("tools"):  # the summarizer's request: the agent's always offers tools
            return Reply.answer("## Goal\nThe person is reviewing a table dump and taking notes.")
        result = last_tool_result(request)
        called = (
            [call["function"]["name"] for call in request.messages[-2].get("tool_calls") or ()]
            if result is not None
            else []
        )
        if called == ["notes__dump"]:
            return Reply.answer(f"the dump is {len(result or ''):,} characters here")
        if called == ["session_search"]:
            hits = json.loads(result or "{}")["hits"]
            return Reply.tool_call("session_fetch", {"ids": [hits[0]["message_id"]]}, call_id="call_fetch")
        if called == ["session_fetch"]:
            fetched["text"] = result or ""
            return Reply.answer("fetched it back")
        if "again" in request.last_user_text:
            fetched["live"] = request.text
            return Reply.tool_call("session_search", {"query": "END-OF-DUMP"}, call_id="call_search")
        if "dump" in request.last_user_text:
            return Reply.tool_call("notes__dump", {"kilobytes": 5 * 1024}, call_id="call_dump")
        return Reply.answer("noted")

    async with FakeLLMServer(handler=handler, context_limit=16_000) as llm:
        settings = notes_settings(
            redis_url,
            key_prefix,
            llm.openai_base_url,
            window=16_000,
            compression={"tail_mode": "legacy", "protect_last_n": 2},
        )
        async with running_gateway(settings, redis) as (runner, adapter, events):
            for number in range(1, 10):  # the dump comes in the middle of a conversation that goes on after it
                text = "dump the table" if number == 4 else f"note {number}: row {number} looks fine"
                await runner.intake(message("ops", str(number), text))
                await runner.wait_idle()
            await runner.intake(message("ops", "30", "/compress"))
            await runner.wait_idle()
            await runner.intake(message("ops", "31", "read the end of that dump again"))
            await runner.wait_idle()
    assert max(len(json.dumps(request.body)) for request in llm.requests) < 200_000  # never the 5 MB
    shown = int(adapter.sent[3][1].removeprefix("the dump is ").split()[0].replace(",", ""))
    assert 1_000 < shown < 40_000  # head and tail within the bound, naming the archived whole
    assert [event.trigger for event in events if isinstance(event, CompressEvent)] == ["manual"]
    assert "row 1: value 0007" not in fetched["live"]  # folded away by the compaction
    assert fetched["text"].count("row 1: value 0007") == 1  # the archived whole, found by search, fetched by id
    assert adapter.sent[-1] == ("ops", "fetched it back")


async def test_no_path_calls_a_tool_the_policy_denies_or_the_chat_may_not_use(redis, redis_url, key_prefix) -> None:
    handler = agent_for({"wipe": ("notes__wipe", {}), "ticket": ("notes__lookup", {"ticket": "42"})}, insist=True)
    async with FakeLLMServer(handler=handler, context_limit=WINDOW) as llm:
        settings = notes_settings(redis_url, key_prefix, llm.openai_base_url, tools={"wipe": "deny"})
        async with running_gateway(settings, redis) as (runner, adapter, events):
            await runner.intake(message("ops", "1", "wipe every ticket"))  # configured never to run
            await runner.intake(message("public", "2", "ticket 42?"))  # a chat tools.allow does not name
            await runner.wait_idle()
    assert all("unknown tool" in text for _, text in adapter.sent) and len(adapter.sent) == 2
    assert not [event for event in events if isinstance(event, ToolCallEvent)]  # no server saw a call


async def test_a_destructive_tool_runs_without_asking_once_configured_to(redis, redis_url, key_prefix) -> None:
    handler = agent_for({"wipe": ("notes__wipe", {})})
    async with FakeLLMServer(handler=handler, context_limit=WINDOW) as llm:
        settings = notes_settings(redis_url, key_prefix, llm.openai_base_url, tools={"wipe": "auto"})
        async with running_gateway(settings, redis) as (runner, adapter, _events):
            await runner.intake(message("ops", "1", "wipe every ticket"))
            await runner.wait_idle()
    assert adapter.sent == [("ops", "tool said: wiped")]


async def test_a_tool_that_appears_after_a_restart_is_not_offered_until_configured(
    redis, redis_url, key_prefix, tmp_path
) -> None:
    flag = tmp_path / "extra"
    handler = agent_for({"crash": ("notes__die", {}), "extra": ("notes__extra", {})})
    async with FakeLLMServer(handler=handler, context_limit=WINDOW) as llm:
        settings = notes_settings(redis_url, key_prefix, llm.openai_base_url, env={"FAKE_MCP_EXTRA": str(flag)})
        async with running_gateway(settings, redis) as (runner, adapter, _events):
            clock = stepped(runner)
            await runner.intake(message("ops", "1", "crash the server"))
            await runner.wait_idle()
            flag.write_text("now")  # the server lists one more tool when it starts again
            clock.past_the_first_wait()  # before a failed server is started again
            await runner.intake(message("ops", "2", "use the extra tool"))
            await runner.wait_idle()
    assert adapter.sent[1] == ("ops", "no tool needed")
    assert all("notes__extra" not in tool_names(request) for request in llm.requests)
    assert "notes__lookup" in tool_names(llm.requests[-1])  # the server is back with its other tools


def test_the_policy_follows_the_settings_then_the_tools_own_hints() -> None:
    import mcp_types as types

    read = types.Tool(
        name="read", input_schema={"type": "object"}, annotations=types.ToolAnnotations(read_only_hint=True)
    )
    drop = types.Tool(
        name="drop", input_schema={"type": "object"}, annotations=types.ToolAnnotations(destructive_hint=True)
    )
    add = types.Tool(
        name="add",
        input_schema={"type": "object"},
        annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=False),
    )
    bare = types.Tool(name="bare", input_schema={"type": "object"})
    spec = McpServerSpec("db", command="x")
    assert [spec.policy(tool) for tool in (read, drop, add, bare)] == ["auto", "ask", "auto", "ask"]
    assert spec.policy(read, new=True) == "deny"  # appeared after a restart: only a setting lets it run
    configured = McpServerSpec("db", command="x", tool_policies={"drop": "auto", "read": "deny"})
    assert [configured.policy(tool) for tool in (read, drop)] == ["deny", "auto"]
    assert McpServerSpec("db", command="x", server_policy="auto").policy(bare, new=True) == "auto"
    assert exposed_name("db", "rows.read/all") == "db__rows_read_all"
    assert len(exposed_name("d" * 24, "t" * 80)) == 64


@pytest.mark.parametrize(
    "bad, key",
    [
        ({"allowed_commands": ["bash"]}, "allowed_commands"),
        ({"mcp_servers": {"db": {"command": "node"}}}, "mcp_servers.db.command"),
        ({"allowed_commands": ["node"], "mcp_servers": {"db": {"command": "node", "args": ["-c", "x"]}}}, "args"),
        ({"mcp_servers": {"db": {"url": "ftp://x"}}}, "url"),
        ({"mcp_servers": {"db": {"url": "https://x/mcp", "headers": {"A": "${FOLDGATE_TEST_UNSET_VAR}"}}}}, "headers"),
        ({"allow": [{"servers": ["nope"]}]}, "allow"),
    ],
)
def test_a_bad_tools_section_is_refused_naming_the_key(bad: dict[str, Any], key: str, redis_url, key_prefix) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as refused:
        make_settings(redis_url, key_prefix, "http://127.0.0.1:9/v1", context_length=WINDOW, tools=bad)
    assert key in str(refused.value)


async def test_an_image_a_tool_returns_goes_to_the_person(redis, redis_url, key_prefix) -> None:
    handler = agent_for({"chart": ("notes__chart", {})})
    async with FakeLLMServer(handler=handler, context_limit=WINDOW) as llm:
        settings = notes_settings(redis_url, key_prefix, llm.openai_base_url)
        async with running_gateway(settings, redis) as (runner, adapter, events):
            await runner.intake(message("ops", "1", "draw the latency chart"))
            await runner.wait_idle()
            # a reader of what the gateway's own log recorded: the gateway records its events as `foldgate run` does
            activity = ActivityLog(redis, runner.store.channel, key_prefix)
            [totals] = await activity.totals(["local:ops"])
            logged = [event for event in await activity.history("local:ops") if isinstance(event, ToolCallEvent)]
    assert [(file.kind, file.data) for _, file in adapter.files] == [("image", chart_png())]
    assert adapter.sent[0][1].startswith("tool said: [image image-1.png: shown to the person]")
    assert totals.tool_calls == 1 and totals.tool_errors == 0
    assert [(event.tool, event.outcome, event.user_id) for event in logged] == [("chart", "ok", "")]


@pytest.mark.parametrize("route", ROUTES)
async def test_the_servers_tool_schemas_and_results_fit_every_routes_official_types(route: str) -> None:
    """The tools as each route sends them, and a result with an image, checked against the official SDK types."""
    command, args = stdio_command()
    mcp = McpTools([McpServerSpec("notes", command=command, args=tuple(args), cwd=ROOT)])
    shelf = Shelf()
    try:
        tools = ToolRegistry()
        for tool in await mcp.tools(["notes"], shelf):
            tools.add(tool)
        calls = iter(
            [
                Reply.tool_call("notes__chart", {}, call_id="call_chart"),
                Reply.tool_call("notes__lookup", {"ticket": "42"}, call_id="call_lookup"),
            ]
        )

        def handler(request: RecordedRequest) -> Reply:
            validate(route, request.body)
            return next(calls, Reply.answer("done"))

        requests, result = await run_route(
            route, [], {"role": "user", "content": "chart and ticket"}, shelf, tools=tools, handler=handler
        )
    finally:
        await mcp.aclose()
    assert result.reply == "done" and len(requests) == 3
    assert [item["name"] for item in result.outgoing] == ["image-1.png"]
    sent = json.dumps(requests[-1].body)
    assert TICKET in sent and "notes__lookup" in sent


async def test_stop_cancels_a_call_that_hangs_and_the_server_is_told(redis, redis_url, key_prefix, tmp_path) -> None:
    cancelled = tmp_path / "cancelled"
    handler = agent_for({"wait": ("notes__hang", {}), "ticket": ("notes__lookup", {"ticket": "42"})})
    async with FakeLLMServer(handler=handler, context_limit=WINDOW) as llm:
        started = tmp_path / "started"
        settings = notes_settings(
            redis_url,
            key_prefix,
            llm.openai_base_url,
            timeout_seconds=60,
            env={"FAKE_MCP_CANCELLED": str(cancelled), "FAKE_MCP_STARTED": str(started)},
        )
        async with running_gateway(settings, redis) as (runner, adapter, events):
            await runner.intake(message("ops", "1", "wait for it"))
            await wait_for(started.exists, timeout=PATIENCE)  # the call is with the server
            await runner.intake(message("ops", "2", "/stop"))
            await wait_for(lambda: len(adapter.sent) >= 1, timeout=PATIENCE)  # under the call's 60 s timeout
            await runner.wait_idle()
            await runner.intake(message("ops", "3", "ticket 42?"))
            await runner.wait_idle()
    assert adapter.sent[0][1] == STOPPED_REPLY  # the stop, not the call's timeout, ended the turn
    await wait_for(cancelled.exists, timeout=PATIENCE)  # the server was told
    assert adapter.sent[-1] == ("ops", f"tool said: {TICKET}")  # the same session goes on serving
    assert [event.outcome for event in events if isinstance(event, ToolCallEvent)] == ["cancelled", "ok"]


async def test_doctor_starts_each_server_and_lists_what_the_model_is_offered(redis_url, key_prefix) -> None:
    command, args = stdio_command()
    settings = make_settings(
        redis_url,
        key_prefix,
        "http://127.0.0.1:9/v1",
        context_length=WINDOW,
        tools={
            "allowed_commands": [command],
            "mcp_servers": {
                "notes": {"command": command, "args": args, "cwd": ROOT},
                "gone": {"url": "http://127.0.0.1:9/mcp"},
            },
            "allow": [{"servers": ["notes"]}],
        },
    )
    checks = {name: check for name, check in checks_for(settings).items() if name.startswith("mcp ")}
    rows = {name: await check(settings) for name, check in checks.items()}
    notes, gone = rows["mcp notes"], rows["mcp gone"]
    assert notes.status == "ok" and notes.detail == (
        "6 tools offered: chart, die, dump, fussy, hang, lookup; asking the person first: wipe; left out, input "
        "schema unusable: broken"
    )
    assert gone.status == "FAIL" and gone.detail.startswith("tools.mcp_servers.gone: ")
    assert "\n" not in gone.detail and "Traceback" not in gone.detail


# --------------------------------------------------------------------------- approvals


def telegram_notes_settings(redis_url: str, key_prefix: str, base_url: str, chat: int, **tools: Any) -> Any:
    command, args = stdio_command()
    config = {
        "allowed_commands": [command],
        "allow": [{"servers": ["notes"], "chats": [f"tg:{chat}"]}],
        "mcp_servers": {"notes": {"command": command, "args": args, "cwd": ROOT}},
        **tools,
    }
    return make_settings(redis_url, key_prefix, base_url, context_length=WINDOW, tools=config)


async def test_on_telegram_a_destructive_tool_asks_with_buttons_and_runs_only_on_a_yes_in_time(
    redis, redis_url, key_prefix
) -> None:
    chat = 8801
    handler = agent_for({"wipe": ("notes__wipe", {})})
    async with FakeBotAPI() as api, FakeLLMServer(handler=handler, context_limit=WINDOW) as llm:
        settings = telegram_notes_settings(redis_url, key_prefix, llm.openai_base_url, chat, confirm_timeout_seconds=2)
        adapter = TelegramAdapter(telegram_settings(api), poll_timeout=1, typing_interval=0)
        async with telegram_gateway(settings, redis, adapter) as runner:
            events: list[Any] = []
            runner.events.subscribe(events.append)
            for number, press in enumerate(["y", "n", None], 1):
                api.push(api.private_message(chat, f"wipe every ticket, attempt {number}"))
                await api.wait_until(lambda: len(api.buttons(chat)) == 1, timeout=30)
                [(asked_in, data)] = api.buttons(chat)
                assert data[0].endswith(":y") and data[1].endswith(":n")
                if press == "y":
                    api.push(api.button_press(chat, 99, asked_in, data[0], first_name="Eve"))  # not the one asked
                if press is not None:
                    api.push(api.button_press(chat, chat, asked_in, data[0] if press == "y" else data[1]))
                await api.wait_until(
                    lambda number=number: sum(m.text.startswith("tool said") for m in api.sent) == number, timeout=30
                )
                assert api.buttons(chat) == []  # the question now says what was decided
            await runner.wait_idle()
    replies = [m.text for m in api.sent if m.text.startswith("tool said")]
    asked = [m for m in api.sent if m.text.startswith("🔐")]
    told_eve = [m.text for m in api.sent if m.text.startswith("No question")]
    assert len(told_eve) == 1 and "someone else was asked" in told_eve[0]
    assert [m.text.split("\n")[0] for m in asked] == ["🔐 Ann, may I run notes__wipe {}?"] * 3
    assert replies[0] == "tool said: [approved by Ann]\nwiped"
    assert replies[1].startswith('tool said: {"error":"notes__wipe was not run: refused by Ann"}')
    assert replies[2].startswith('tool said: {"error":"notes__wipe was not run: no answer within 2 s')
    shown = [api.message(str(chat), m.message_id).text for m in asked]
    assert [line.split("\n")[1] for line in shown] == [
        "→ approved by Ann",
        "→ refused by Ann",
        "→ no answer within 2 s, so it was not run",
    ]
    assert len(api.answered_queries) == 3  # every press was acknowledged, Eve's too
    assert [event.outcome for event in events if isinstance(event, ToolCallEvent)] == ["ok", "refused", "refused"]


async def test_in_the_terminal_y_answers_the_question(redis, redis_url, key_prefix) -> None:
    handler = agent_for({"wipe": ("notes__wipe", {})})
    async with FakeLLMServer(handler=handler, context_limit=WINDOW) as llm:
        command, args = stdio_command()
        settings = make_settings(
            redis_url,
            key_prefix,
            llm.openai_base_url,
            context_length=WINDOW,
            tools={
                "allowed_commands": [command],
                "allow": [{"servers": ["notes"], "platforms": ["local"]}],
                "mcp_servers": {"notes": {"command": command, "args": args, "cwd": ROOT}},
            },
        )
        reading, writing = os.pipe()
        typed = os.fdopen(writing, "w", buffering=1)
        terminal = TerminalAdapter(stdin=os.fdopen(reading), stdout=io.StringIO())
        async with running_gateway(settings, redis, adapter=terminal) as (runner, _adapter, _events):
            await terminal.start(runner.intake)
            typed.write("wipe every ticket\n")
            await wait_for(lambda: "[y/n]" in terminal.stdout.getvalue(), timeout=20)
            typed.write("y\n")
            await wait_for(lambda: "wiped" in terminal.stdout.getvalue(), timeout=20)
            typed.close()
            await terminal.stop()
    out = terminal.stdout.getvalue()
    assert "→ approved by you" in out and "tool said: [approved by you]\nwiped" in out


# --------------------------------------------------------------------------- one server's session


async def test_an_error_the_server_answers_goes_to_the_model_and_the_session_stays() -> None:
    command, args = stdio_command()
    mcp = McpTools([McpServerSpec("notes", command=command, args=tuple(args), cwd=ROOT)])
    try:
        tools = {tool.name: tool for tool in await mcp.tools(["notes"], None)}
        refused = await tools["notes__fussy"].handler({"x": 7})
        after = await tools["notes__lookup"].handler({"ticket": "42"})
    finally:
        await mcp.aclose()
    assert json.loads(refused.text) == {"error": "notes__fussy failed: x=7 is out of range"}
    assert after.text == TICKET  # the same session: no wait, no restart


async def test_a_server_that_keeps_dying_waits_twice_as_long_each_time_until_a_call_works(caplog) -> None:
    now = [1000.0]
    command, args = stdio_command()
    server = McpServer(McpServerSpec("notes", command=command, args=tuple(args), cwd=ROOT), clock=lambda: now[0])
    caplog.set_level(logging.WARNING, logger="agent.tools.mcp")
    try:
        waits = []
        for _ in range(3):
            with pytest.raises(ServerDown):
                await server.call("die", {})
            waits.append(re.search(r"trying again in (\d+) s", caplog.records[-1].getMessage())[1])
            with pytest.raises(ServerDown):  # within the wait: not started again
                await server.call("lookup", {"ticket": "42"})
            now[0] += 60
        assert (await server.call("lookup", {"ticket": "42"})).content[0].text == TICKET
        with pytest.raises(ServerDown):
            await server.call("die", {})
        waits.append(re.search(r"trying again in (\d+) s", caplog.records[-1].getMessage())[1])
    finally:
        await server.aclose()
    assert waits == ["1", "2", "4", "1"]


async def test_a_stdio_servers_process_ends_with_the_gateway(redis, redis_url, key_prefix) -> None:
    handler = agent_for({"ticket": ("notes__lookup", {"ticket": "42"})})
    async with FakeLLMServer(handler=handler, context_limit=WINDOW) as llm:
        settings = notes_settings(redis_url, key_prefix, llm.openai_base_url)
        async with running_gateway(settings, redis) as (runner, adapter, _events):
            await runner.intake(message("ops", "1", "ticket 42?"))
            await runner.wait_idle()
            children = servers_running()
            assert children, "the server runs while the gateway does"
    assert adapter.sent == [("ops", f"tool said: {TICKET}")]
    await wait_for(lambda: not (set(children) & set(servers_running())), timeout=10)


def servers_running() -> list[int]:
    """The pids of this process's children that run the test MCP server."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                status = (entry / "status").read_text()
                cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            parent = re.search(r"^PPid:\s+(\d+)", status, re.MULTILINE)
            if parent and int(parent[1]) == os.getpid() and "tests.fakes.mcp_server" in cmdline:
                found.append(int(entry.name))
    return found


async def test_a_result_of_every_kind_becomes_text_for_the_model_and_files_for_the_person() -> None:
    import base64

    import mcp_types as types

    from agent.tools.mcp import tool_output

    shelf = Shelf()
    png = chart_png()
    result = types.CallToolResult(
        content=[
            types.TextContent(text="two files attached"),
            types.ImageContent(data=base64.b64encode(png).decode(), mime_type="image/png"),
            types.EmbeddedResource(resource=types.TextResourceContents(uri="file:///srv/notes.md", text="# Notes\nok")),
            types.EmbeddedResource(
                resource=types.BlobResourceContents(
                    uri="file:///srv/report.csv", blob=base64.b64encode(b"a,b\n1,2\n").decode(), mime_type="text/csv"
                )
            ),
            types.ResourceLink(uri="https://tracker.example/T-42", name="TICKET-42"),
        ]
    )
    output = await tool_output(result, shelf)
    assert output.text.split("\n") == [
        "two files attached",
        "[image image-2.png: shown to the person]",
        "[file:///srv/notes.md]",
        "# Notes",
        "ok",
        "[file report.csv: shown to the person]",
        "[link: TICKET-42 https://tracker.example/T-42]",
    ]
    assert [(item["name"], item["kind"]) for item in output.items] == [
        ("image-2.png", "image"),
        ("report.csv", "document"),
    ]
    assert output.deliver and shelf.blobs[output.items[0]["sha"]] == (png, "image/png")
    structured = await tool_output(types.CallToolResult(content=[], structured_content={"rows": 3}), shelf)
    assert json.loads(structured.text) == {"rows": 3} and not structured.deliver
    failed = await tool_output(
        types.CallToolResult(content=[types.TextContent(text="no such table")], is_error=True), shelf
    )
    assert json.loads(failed.text) == {"error": "no such table"}
