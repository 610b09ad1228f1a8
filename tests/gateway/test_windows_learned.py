"""Every model's window comes from somewhere real, and a provider's refusal teaches the real one once.

A summarizer whose name no catalog knows is never planned for a window larger than the chat
model's; a provider that refuses a request as too long is believed — the window it names is kept
in Redis for every process, the work is redone within it, and the same refusal never comes back.
"""

from __future__ import annotations

import asyncio
import io
import json
import uuid

import pytest

from agent.compaction.summary_prompt import SYSTEM_PROMPT
from agent.llm.errors import ContextTooLong
from agent.models import DEFAULT_CONTEXT_LENGTH
from agent.windows import (
    MAX_HALVINGS,
    MemoryWindowBook,
    ModelWindow,
    WindowTeacher,
    WindowUnknown,
    resolve_window,
    taught_window,
)
from evals.bench_backlog import model, night
from gateway.cli.doctor import check_provider
from gateway.config import Settings
from gateway.events import CompressEvent
from gateway.run.app import serve
from gateway.run.assembly import message_path
from gateway.store.channel import channel_for
from gateway.store.windows import LearnedWindows
from tests.fakes.gateway import make_settings, message, running_gateway
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply, prompt_tokens
from tests.fakes.waiting import wait_for
from tests.fakes.workers import _count, sent, start_worker, stop

SUMMARIZER = "fake-summarizer"
CHAT_WINDOW = 16_000


def refusal(window: int | None) -> ContextTooLong:
    error = ContextTooLong("too long", status=400)
    error.window = window  # type: ignore[attr-defined]
    error.prompt_tokens = None  # type: ignore[attr-defined]
    return error


# --------------------------------------------------------------------------- where a window comes from


def test_the_configuration_wins_then_the_provider_then_the_catalog_then_a_default():
    assert (
        resolve_window(
            "gpt-4o", configured=50_000, configured_key="model.context_length", reported=(64_000, "x")
        ).tokens
        == 50_000
    )
    reported = resolve_window(
        "gpt-4o",
        configured=None,
        configured_key="model.context_length",
        reported=(64_000, "vLLM /v1/models max_model_len"),
    )
    assert reported == ModelWindow(64_000, "reported by the provider: vLLM /v1/models max_model_len")
    assert resolve_window("gpt-4o", configured=None, configured_key="k").tokens == 128_000
    unknown = resolve_window("my-company-llm", configured=None, configured_key="model.context_length")
    assert unknown.tokens == DEFAULT_CONTEXT_LENGTH and "set model.context_length" in unknown.source


def test_an_unknown_summarizer_is_never_assumed_larger_than_the_chat_model():
    chat = ModelWindow(CHAT_WINDOW, "configured: model.context_length")
    guessed = resolve_window(
        SUMMARIZER, configured=None, configured_key="auxiliary.compression.context_length", default_cap=chat
    )
    assert guessed.tokens == CHAT_WINDOW
    assert "auxiliary.compression.context_length" in guessed.source
    known = resolve_window("claude-sonnet-4", configured=None, configured_key="k", default_cap=chat)
    assert known.tokens == 200_000  # the catalog knows better than a cap


# --------------------------------------------------------------------------- what a refusal teaches


def test_a_named_window_is_believed_and_a_silent_refusal_halves_at_most_three_times():
    assert taught_window(refusal(8_192), assumed=16_000, started=16_000, setting="s") == 8_192
    assumed, seen = 64_000, []
    for _ in range(MAX_HALVINGS):
        assumed = taught_window(refusal(None), assumed=assumed, started=64_000, setting="s")
        seen.append(assumed)
    assert seen == [32_000, 16_000, 8_000]
    with pytest.raises(WindowUnknown, match="set auxiliary.compression.context_length"):
        taught_window(refusal(None), assumed=assumed, started=64_000, setting="auxiliary.compression.context_length")


async def test_a_teacher_lowers_its_window_and_never_raises_it():
    book = MemoryWindowBook()
    teacher = WindowTeacher(book, "http://llm/v1", "m", start=ModelWindow(32_000, "default"), setting="s")
    assert await teacher.refused(refusal(12_000), 32_000) == 12_000
    assert teacher.window.tokens == 12_000 and "learned from a refusal (was 32,000" in teacher.window.source
    await book.learn("http://llm/v1", "m", 20_000)
    assert teacher.window.tokens == 12_000
    # A refusal planned for the old window after another turn learned the new one teaches nothing new.
    assert await teacher.refused(refusal(None), 32_000) == 12_000


async def test_learned_windows_are_kept_in_redis_for_every_process(redis, key_prefix):
    channel = channel_for(redis)
    now = [0.0]
    first = LearnedWindows(channel, key_prefix, clock=lambda: now[0])
    second = LearnedWindows(channel, key_prefix, clock=lambda: now[0])
    try:
        await second.refresh()
        assert await first.learn("http://llm/v1", SUMMARIZER, 9_000) == 9_000
        assert await first.learn("http://llm/v1", SUMMARIZER, 12_000) == 9_000  # never raised again
        assert first.learned("http://llm/v1", SUMMARIZER) == 9_000
        await second.refresh()
        assert second.learned("http://llm/v1", SUMMARIZER) is None  # its copy is still fresh
        now[0] += 10
        await second.refresh()
        assert second.learned("http://llm/v1", SUMMARIZER) == 9_000
    finally:
        await channel.aclose()


# --------------------------------------------------------------------------- a night's backlog


def summary_requests(server: FakeLLMServer) -> list:
    return [r for r in server.requests if r.path.endswith("/chat/completions") and SYSTEM_PROMPT[:40] in r.system]


def long_night(count: int, seed: int) -> list[str]:
    """A night of status lines three times the usual length (a 400-message night fills twice a 16K window)."""
    return [f"{text} | {text} | {text}" for text in night(count, seed=seed)]


async def backlog(redis, settings, chat: str, count: int, *, seed: int, long: bool = False) -> tuple[list, list]:
    """``count`` messages waiting in ``chat`` when a gateway starts; returns (compactions, replies)."""
    _, inbox = message_path(redis, settings)
    for index, text in enumerate(long_night(count, seed) if long else night(count, seed=seed)):
        await inbox.put(message(chat, f"{chat}-{index}", text))
    async with running_gateway(settings, redis) as (runner, adapter, events):
        await asyncio.wait_for(runner.wait_idle(), 240)
    return [e for e in events if isinstance(e, CompressEvent)], list(adapter.sent)


def settings_for(redis_url: str, prefix: str, server: FakeLLMServer, window: int = CHAT_WINDOW):
    return make_settings(
        redis_url,
        prefix,
        server.openai_base_url,
        context_length=window,
        auxiliary={"compression": {"model": SUMMARIZER}},
    )


@pytest.mark.parametrize(
    ("window", "count", "long"), [(16_000, 400, True), (8_000, 600, False), (32_000, 1_500, False)]
)
async def test_an_unknown_summarizer_folds_a_night_without_a_refusal(redis, redis_url, window, count, long):
    """No window is configured for the summarizer and no catalog knows its name: it is planned for the chat
    model's window, never for a 128K guess (whose first fold of these nights would carry 19K–60K tokens)."""
    prefix = f"fgtest-{uuid.uuid4().hex[:8]}"
    async with FakeLLMServer(handler=model, context_limit=window) as server:
        settings = settings_for(redis_url, prefix, server, window)
        compactions, replies = await backlog(redis, settings, "night", count, seed=window, long=long)
    assert server.overflowed == [], f"a request over the {window:,}-token window reached the provider"
    assert compactions and all(c.summarizer == SUMMARIZER for c in compactions), [c.summarizer for c in compactions]
    assert summary_requests(server) and max(prompt_tokens(r) for r in summary_requests(server)) <= window
    assert len(replies) == 1 and "PR #4821" in replies[0][1]


async def test_a_summarizer_smaller_than_the_chat_model_is_refused_once_for_the_whole_cluster(redis, redis_url):
    """Its real window is 6K: the first summary request teaches it, the same compaction is redone in pieces with
    the model's notes, and a second gateway started afterwards plans for 6K from its first request."""
    prefix = f"fgtest-{uuid.uuid4().hex[:8]}"
    async with FakeLLMServer(handler=model, context_limit=CHAT_WINDOW, context_limits={SUMMARIZER: 6_000}) as server:
        settings = settings_for(redis_url, prefix, server)
        compactions, replies = await backlog(redis, settings, "night", 400, seed=6, long=True)
        refused = list(server.overflowed)
        assert len(refused) == 1 and refused[0][0].model == SUMMARIZER
        assert compactions and all(c.summarizer == SUMMARIZER for c in compactions)
        assert len(replies) == 1 and "PR #4821" in replies[0][1]
        stored = await redis.hgetall(f"{prefix}:windows:learned")
        assert stored == {f"{server.openai_base_url}|{SUMMARIZER}": "6000"}

        before = len(server.requests)
        compactions, replies = await backlog(redis, settings, "second-night", 400, seed=7, long=True)  # a new gateway
        later = [r for r in summary_requests(server)[0:] if server.requests.index(r) >= before]
        assert server.overflowed == refused, "the second gateway sent the size already refused"
        assert later and all(prompt_tokens(r) <= 6_000 for r in later)
        assert compactions and all(c.summarizer == SUMMARIZER for c in compactions)


async def test_another_os_process_reads_the_learned_window_before_its_first_summary(redis, redis_url):
    """A gateway learns the summarizer's 6K window from one refusal; a worker process started afterwards on the
    same Redis folds its own night within 6K from its first request: the refused size is never sent again."""
    prefix = f"fgtest-{uuid.uuid4().hex[:8]}"
    async with FakeLLMServer(handler=model, context_limit=CHAT_WINDOW, context_limits={SUMMARIZER: 6_000}) as server:
        await backlog(redis, settings_for(redis_url, prefix, server), "night", 400, seed=6, long=True)
        refused = list(server.overflowed)
        assert len(refused) == 1
        before = len(server.requests)
        _, inbox = message_path(redis, settings_for(redis_url, prefix, server))
        for index, text in enumerate(long_night(400, seed=8)):
            await inbox.put(message("other-night", f"other-{index}", text))
        auxiliary = json.dumps({"compression": {"model": SUMMARIZER}})
        options = ["--context-length", str(CHAT_WINDOW), "--auxiliary", auxiliary]
        worker = start_worker(redis_url, prefix, server.openai_base_url, options=options)
        try:
            await wait_for(lambda: _count(redis, f"{prefix}:sent", 1), timeout=240, what="the first reply")
        finally:
            stop(worker)
        later = [r for r in server.requests[before:] if SYSTEM_PROMPT[:40] in r.system]
    assert server.overflowed == refused, "the worker process sent the size already refused"
    assert later and all(prompt_tokens(r) <= 6_000 for r in later)
    assert "PR #4821" in (await sent(redis, prefix))[0]["text"]


async def test_a_chat_model_smaller_than_configured_is_learned_and_the_turn_still_answers(redis, redis_url):
    """The operator wrote 32K; the provider's real window is 8K. The first request over 8K teaches it (the chat
    model summarizes too: one lesson for both), the conversation is compacted into it and asked again, and no
    later request is refused."""
    prefix = f"fgtest-{uuid.uuid4().hex[:8]}"
    async with FakeLLMServer(handler=model, context_limit=8_000) as server:
        settings = make_settings(redis_url, prefix, server.openai_base_url, context_length=32_000)
        compactions, replies = await backlog(redis, settings, "night", 400, seed=32)
        assert len(server.overflowed) == 1
        assert len(replies) == 1 and "PR #4821" in replies[0][1]
        assert compactions and all(c.summarizer == "test-model" for c in compactions)
        compactions, replies = await backlog(redis, settings, "next-night", 400, seed=33)
        assert len(server.overflowed) == 1 and len(replies) == 1


# --------------------------------------------------------------------------- the start line and the doctor


def openrouter_settings(redis_url: str, prefix: str, server: FakeLLMServer, home) -> Settings:
    return Settings(
        redis={"url": redis_url, "key_prefix": prefix},
        model={
            "name": "acme/house-model",
            "provider": "openrouter",
            "base_url": server.openai_base_url,
            "api_key": "k",
        },
        auxiliary={"compression": {"model": "acme/house-mini"}},
        platforms={"local": {"enabled": True}},
        gateway={"home": str(home)},
    )


async def test_the_start_line_and_the_doctor_say_where_each_window_came_from(tmp_path, redis, redis_url):
    """Names no catalog knows, behind OpenRouter: both windows are what its model list reports, and once a
    refusal taught a smaller one the doctor says so, with what it replaced."""
    prefix = f"fgtest-{uuid.uuid4().hex[:8]}"
    limits = {"acme/house-model": 24_000, "acme/house-mini": 12_000}
    async with FakeLLMServer(handler=model, flavor="openrouter", context_limits=limits, models=list(limits)) as server:
        settings = openrouter_settings(redis_url, prefix, server, tmp_path)
        out = io.StringIO()
        assert await serve(settings, demo=True, out=out) == 0
        lines = out.getvalue().splitlines()
        assert (
            "foldgate: window of acme/house-model: 24,000 tokens (reported by the provider: OpenRouter /v1/models "
            "context_length)"
        ) in lines, lines
        assert (
            "foldgate: window of the summarizer acme/house-mini: 12,000 tokens (reported by the provider: "
            "OpenRouter /v1/models context_length)"
        ) in lines, lines

        await LearnedWindows(channel_for(redis), prefix).learn(server.openai_base_url, "acme/house-mini", 9_000)
        row = await check_provider(settings)
    assert row.status == "ok", row.detail
    assert "window of acme/house-model: 24,000 tokens (reported by the provider" in row.detail
    assert (
        "window of the summarizer acme/house-mini: 9,000 tokens (learned from a refusal (was 12,000, reported "
        "by the provider: OpenRouter /v1/models context_length))"
    ) in row.detail


# --------------------------------------------------------------------------- a refusal that names no number

SILENT_REFUSAL = {
    "error": {
        "message": "The input is too long for this model.",
        "type": "invalid_request_error",
        "param": None,
        "code": "context_length_exceeded",
    }
}


def refusing_silently_over(window: int):
    """A provider that refuses a prompt over ``window`` without saying its window, else answers as the night's."""

    def handle(request: RecordedRequest) -> Reply:
        if prompt_tokens(request) > window:
            return Reply(status=400, body=SILENT_REFUSAL)
        return model(request)

    return handle


async def test_a_refusal_without_a_number_halves_the_window_until_the_night_fits(redis, redis_url):
    """Configured 32K, really 7K, and the provider never says so: halving to 16K and then 8K finds room (a request
    planned for 8K leaves its answer room), the morning question is answered from the night, and what was learned
    is kept for every process."""
    prefix = f"fgtest-{uuid.uuid4().hex[:8]}"
    async with FakeLLMServer(handler=refusing_silently_over(7_000)) as server:
        settings = make_settings(redis_url, prefix, server.openai_base_url, context_length=32_000)
        compactions, replies = await backlog(redis, settings, "night", 400, seed=3)
        refused = [r for r in server.requests if prompt_tokens(r) > 7_000]
        assert len(replies) == 1 and "PR #4821" in replies[0][1]
        learned = await redis.hgetall(f"{prefix}:windows:learned")
        assert learned == {f"{server.openai_base_url}|test-model": "8000"}
        assert len(refused) == 2, [prompt_tokens(r) for r in refused]  # one at 32K, one at 16K


async def test_past_three_halvings_the_person_is_told_and_the_log_names_the_setting(redis, redis_url, caplog):
    prefix = f"fgtest-{uuid.uuid4().hex[:8]}"
    async with FakeLLMServer(handler=refusing_silently_over(500)) as server:
        settings = make_settings(redis_url, prefix, server.openai_base_url, context_length=32_000)
        store, inbox = message_path(redis, settings)
        await inbox.put(message("c", "u1", "hello " * 600))
        async with running_gateway(settings, redis) as (runner, adapter, _):
            await asyncio.wait_for(runner.wait_idle(), 60)
        kept = await store.active("local:c", await store.current_session("local:c"))
    assert [m["content"] for m in kept if m.get("role") == "user"] == ["hello " * 600]  # nothing lost
    assert len(adapter.sent) == 1 and "too long" in adapter.sent[0][1]
    assert "set model.context_length to the model's real window" in caplog.text
