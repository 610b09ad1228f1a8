"""The codex app-server route (SPEC S7.1) against a fake app-server PROCESS speaking JSON-RPC on stdio."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from agent.codex_chat import THREAD_KEY, CodexAppServer, CodexAppServerChat, CodexThreadEngine, thread_of
from agent.loop import Agent
from agent.settings import CompressionSettings
from gateway.config import Settings
from gateway.events import CompressEvent
from gateway.store import SessionStore
from tests.fakes.gateway import message, running_gateway
from tests.fakes.paths import REPO

ROOT = REPO
FAKE = [sys.executable, "-m", "tests.fakes.codex_app_server"]


def fake_server(log: Path, *options: str) -> CodexAppServer:
    return CodexAppServer([*FAKE, "--log", str(log), *options], cwd=str(ROOT), request_timeout=20, turn_timeout=20)


def received(log: Path) -> list[str]:
    if not log.exists():
        return []
    return [json.loads(line).get("method") or "(answer)" for line in log.read_text().splitlines()]


def engine_for(server: CodexAppServer, mode: str, *, context_length: int = 200_000) -> CodexThreadEngine:
    return CodexThreadEngine(
        "gpt-4o",
        context_length,
        CompressionSettings(codex_app_server_auto=mode),
        server=server,
        provider="openai-codex",
    )


async def chat(agent: Agent, history: list[dict], text: str) -> list[dict]:
    result = await agent.run_turn(history, {"role": "user", "content": text})
    return result.messages


async def test_a_turn_runs_on_a_thread_and_the_reply_names_it(tmp_path):
    log = tmp_path / "log.jsonl"
    server = fake_server(log)
    engine = engine_for(server, "native")
    agent = Agent(CodexAppServerChat(server, engine), engine, model="gpt-5.5")
    try:
        history = await chat(agent, [{"role": "system", "content": "be brief"}], "hello there")
        history = await chat(agent, history, "second message")
    finally:
        await server.aclose()
    assert received(log)[:3] == ["initialize", "initialized", "thread/start"]
    first, second = history[2], history[4]
    assert first["content"].startswith("echo: Instructions:\nbe brief") and "hello there" in first["content"]
    assert second["content"] == "echo: second message"  # the thread already has the rest
    assert first[THREAD_KEY]["thread"] == second[THREAD_KEY]["thread"] == thread_of(history)
    assert engine.last_prompt_tokens and engine.last_prompt_tokens > 0  # the thread's size as codex reports it


async def test_compress_asks_the_app_server_and_waits_for_the_compaction_to_complete(tmp_path):
    log = tmp_path / "log.jsonl"
    server = fake_server(log, "--compact-delay", "0.4", "--carry", "50")
    engine = engine_for(server, "native")
    agent = Agent(CodexAppServerChat(server, engine), engine, model="gpt-5.5")
    try:
        history = await chat(agent, [], "a long message " * 40)
        thread = thread_of(history)
        assert thread is not None
        done = await engine.compact_thread(thread)
        # only known once the compaction item completed, 0.4 s after thread/compact/start was answered
        assert server.compactions[thread] == 1
    finally:
        await server.aclose()
    assert done.tokens_before > 100 and done.tokens_after == 50
    assert "thread/compact/start" in received(log)
    assert engine.native_compactions["manual"] == 1 and engine.last_compaction.outcome == "compacted"


async def test_native_mode_records_the_app_servers_own_compactions_and_never_starts_one(tmp_path):
    log = tmp_path / "log.jsonl"
    server = fake_server(log, "--auto-compact-at", "120")
    engine = engine_for(server, "native", context_length=200)  # far over our threshold: still not ours to start
    agent = Agent(CodexAppServerChat(server, engine), engine, model="gpt-5.5")
    history: list[dict] = []
    try:
        for index in range(8):
            history = await chat(agent, history, f"message {index} " + "word " * 30)
        kept = list(history)
        assert await engine.compress(history, force=True) is history
    finally:
        await server.aclose()
    assert "thread/compact/start" not in received(log)
    assert engine.native_compactions["app_server"] >= 2 and engine.compression_count >= 2
    marked = [m for m in history if m.get(THREAD_KEY, {}).get("compactions")]
    assert marked and all(m[THREAD_KEY]["compactions"]["app_server"] == 1 for m in marked)
    assert history == kept and len(history) == 16  # nothing rewritten or dropped


async def test_hermes_mode_starts_the_compaction_at_our_threshold(tmp_path):
    log = tmp_path / "log.jsonl"
    server = fake_server(log)
    engine = engine_for(server, "hermes", context_length=400)  # compaction at 50% = 200 tokens of thread context
    agent = Agent(CodexAppServerChat(server, engine), engine, model="gpt-5.5")
    history: list[dict] = []
    try:
        while engine.native_compactions["gateway"] == 0:
            assert len(history) < 40
            history = await chat(agent, history, "word " * 40)
    finally:
        await server.aclose()
    methods = [m for m in received(log) if m in ("turn/start", "thread/compact/start")]
    assert methods.count("thread/compact/start") == 1
    assert methods[-2:] == ["thread/compact/start", "turn/start"]  # compacted, then the turn went on the small thread
    assert history[-1][THREAD_KEY]["compactions"] == {"app_server": 0, "gateway": 1}


async def test_off_mode_never_starts_one(tmp_path):
    log = tmp_path / "log.jsonl"
    server = fake_server(log)
    engine = engine_for(server, "off", context_length=400)
    agent = Agent(CodexAppServerChat(server, engine), engine, model="gpt-5.5")
    history: list[dict] = []
    try:
        for _ in range(6):
            history = await chat(agent, history, "word " * 40)
        assert engine.last_prompt_tokens > engine.threshold_tokens
        assert await engine.compress(history, force=True) is history
    finally:
        await server.aclose()
    assert "thread/compact/start" not in received(log)
    assert engine.compression_count == 0


async def test_approval_requests_are_declined(tmp_path):
    log = tmp_path / "log.jsonl"
    server = fake_server(log)
    engine = engine_for(server, "native")
    agent = Agent(CodexAppServerChat(server, engine), engine, model="gpt-5.5")
    try:
        history = await chat(agent, [], "please NEEDS-APPROVAL now")
    finally:
        await server.aclose()
    assert history[-1]["content"] == 'approval: {"decision": "decline"}'


async def test_a_restarted_app_server_resumes_the_thread(tmp_path):
    state = tmp_path / "threads.json"
    first = fake_server(tmp_path / "one.jsonl", "--state", str(state))
    engine = engine_for(first, "native")
    try:
        history = await chat(Agent(CodexAppServerChat(first, engine), engine, model="gpt-5.5"), [], "remember 7")
    finally:
        await first.aclose()
    second = fake_server(tmp_path / "two.jsonl", "--state", str(state))
    engine = engine_for(second, "native")
    try:
        history = await chat(Agent(CodexAppServerChat(second, engine), engine, model="gpt-5.5"), history, "and now?")
    finally:
        await second.aclose()
    assert received(tmp_path / "two.jsonl")[:4] == ["initialize", "initialized", "thread/resume", "turn/start"]
    assert history[-1]["content"] == "echo: and now?" and thread_of(history) == history[1][THREAD_KEY]["thread"]


async def test_through_the_gateway_compress_waits_and_the_transcript_is_untouched(
    tmp_path, redis, redis_url, key_prefix
):
    log = tmp_path / "log.jsonl"
    command = " ".join([*FAKE, "--log", str(log), "--compact-delay", "0.2", "--carry", "40"])
    settings = Settings(
        redis={"url": redis_url, "key_prefix": key_prefix},
        model={
            "name": "gpt-5.5",
            "provider": "openai-codex",
            "api_mode": "codex_app_server",
            "app_server_command": command,
        },
        platforms={"local": {"enabled": True}},
        gateway={"home": str(tmp_path)},
    )
    store = SessionStore(redis, key_prefix)
    async with running_gateway(settings, redis) as (runner, adapter, events):
        for index in range(3):
            await runner.intake(message("c1", f"u{index}", f"message {index} " + "word " * 30))
            await runner.wait_idle()
        sid = await store.current_session("local:c1")
        before = await store.active("local:c1", sid)
        await runner.intake(message("c1", "compress", "/compress"))
        await runner.wait_idle()
        after = await store.active("local:c1", sid)
        meta = await store.meta("local:c1", sid)
        await runner.intake(message("c1", "usage", "/usage"))
        await runner.wait_idle()
        await runner.intake(message("c1", "more", "still there?"))
        await runner.wait_idle()
        archived = await store.archive("local:c1", sid)
    replies = [text for _, text in adapter.sent]
    assert replies[0].startswith("echo: ") and replies[2] == "echo: message 2 " + "word " * 30
    assert replies[3].startswith("Compacted the codex thread: ") and replies[3].split("→ ")[1].startswith("40 tokens")
    assert [m["_id"] for m in after] == [m["_id"] for m in before] and len(before) == 6
    assert archived == []
    assert meta.compaction_count == 1 and meta.last_prompt_tokens == 40
    assert (
        "Compactions: 1 (codex thread: 1 by /compress, 0 at foldgate's threshold, 0 by the app-server itself)"
        in replies[4]
    )
    assert "not billed per token" in replies[4]
    assert replies[5] == "echo: still there?"
    assert [e.trigger for e in events if isinstance(e, CompressEvent)] == ["manual"]
    assert received(log).count("thread/start") == 1  # one thread for the chat, across turns and /compress


async def test_through_the_gateway_the_app_servers_own_compactions_are_marked_as_native(
    tmp_path, redis, redis_url, key_prefix
):
    log = tmp_path / "log.jsonl"
    command = " ".join([*FAKE, "--log", str(log), "--auto-compact-at", "120"])
    settings = Settings(
        redis={"url": redis_url, "key_prefix": key_prefix},
        model={
            "name": "gpt-5.5",
            "provider": "openai-codex",
            "api_mode": "codex_app_server",
            "app_server_command": command,
        },
        platforms={"local": {"enabled": True}},
        gateway={"home": str(tmp_path)},
    )
    async with running_gateway(settings, redis) as (runner, _adapter, events):
        for index in range(8):
            await runner.intake(message("c1", f"u{index}", f"message {index} " + "word " * 30))
            await runner.wait_idle()
    native = [e for e in events if isinstance(e, CompressEvent) and e.trigger == "native"]
    assert len(native) >= 2 and all(e.summarizer == "the provider" and e.in_place for e in native)
    assert "thread/compact/start" not in received(log)  # the app-server's own, never one foldgate started
