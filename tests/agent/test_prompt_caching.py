"""Prompt caching (SPEC S8): breakpoint placement, when it is on, the Anthropic dialect, and the cache it earns."""

from __future__ import annotations

import copy
import io
import json

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from agent.context_compressor import ContextCompressor
from agent.llm.client import ChatClient
from agent.loop import Agent
from agent.prompt_caching import CachingPlan, apply_anthropic_cache_control, count_breakpoints, plan_prompt_caching
from agent.settings import CompressionSettings
from agent.tools import Tool, ToolRegistry
from evals import bench_caching
from evals.cli import available_benchmarks
from gateway.config import Settings
from gateway.run.app import serve
from tests.fakes.anthropic_cache import AnthropicCacheServer
from tests.fakes.gateway import message, running_gateway
from tests.fakes.llm_server import Reply

EPHEMERAL = {"type": "ephemeral"}
HOUR = {"type": "ephemeral", "ttl": "1h"}


def call(call_id: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}


def conversation() -> list[dict]:
    return [
        {"role": "system", "content": "You are a careful assistant."},
        {"role": "user", "content": "open a.py"},
        {"role": "assistant", "content": None, "tool_calls": [call("c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": "print('a')"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "and this image"},
                {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
            ],
        },
    ]


# --------------------------------------------------------------------------- placement


def test_string_content_becomes_one_marked_text_part():
    out = apply_anthropic_cache_control([{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}])
    assert out[0]["content"] == [{"type": "text", "text": "sys", "cache_control": EPHEMERAL}]
    assert out[1]["content"] == [{"type": "text", "text": "hi", "cache_control": EPHEMERAL}]
    assert "cache_control" not in out[1]


def test_list_content_is_marked_on_its_last_part_on_the_messages_api():
    out = apply_anthropic_cache_control(conversation(), native_anthropic=True)
    parts = out[4]["content"]
    assert "cache_control" not in parts[0]
    assert parts[1]["cache_control"] == EPHEMERAL


def test_through_openrouter_the_marker_goes_on_the_last_text_part_never_an_image():
    out = apply_anthropic_cache_control(conversation())
    parts = out[4]["content"]
    assert parts[1]["type"] == "image_url" and "cache_control" not in parts[1]
    assert parts[0]["cache_control"] == EPHEMERAL
    images_only = apply_anthropic_cache_control([{"role": "user", "content": [dict(parts[1])]}])
    assert count_breakpoints(images_only) == 0  # nothing there can carry one


@pytest.mark.parametrize("empty", [None, "", []])
def test_empty_content_is_marked_on_the_message(empty):
    out = apply_anthropic_cache_control(
        [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": empty, "tool_calls": [call("c1")]},
            {"role": "tool", "tool_call_id": "c1", "content": "r"},
        ],
        native_anthropic=True,
    )
    assert out[1]["cache_control"] == EPHEMERAL
    assert out[1]["content"] == empty


def test_tool_messages_get_a_message_marker_only_on_the_native_api():
    native = apply_anthropic_cache_control(conversation(), native_anthropic=True)
    routed = apply_anthropic_cache_control(conversation(), native_anthropic=False)
    assert native[3]["cache_control"] == EPHEMERAL and native[3]["content"] == "print('a')"
    assert "cache_control" not in routed[3] and routed[3]["content"] == "print('a')"
    # off the native API the window counts only messages that can carry a marker, so a tool
    # loop still caches the conversation up to the newest markable message
    assert count_breakpoints(native) == 4 and count_breakpoints(routed) == 4
    assert "cache_control" not in json.dumps(native[1]) and "cache_control" in json.dumps(routed[1])


def test_system_and_the_last_three_non_system_messages_are_the_breakpoints():
    out = apply_anthropic_cache_control(conversation(), native_anthropic=True)
    marked = [i for i, m in enumerate(out) if "cache_control" in json.dumps(m)]
    assert marked == [0, 2, 3, 4]


def test_one_hour_ttl_when_configured():
    out = apply_anthropic_cache_control(conversation(), cache_ttl="1h", native_anthropic=True)
    assert out[0]["content"][0]["cache_control"] == HOUR
    assert out[2]["cache_control"] == HOUR
    with pytest.raises(ValueError):
        apply_anthropic_cache_control(conversation(), cache_ttl="10m")


def test_the_callers_messages_are_never_touched():
    messages = conversation()
    before = copy.deepcopy(messages)
    parts = messages[4]["content"]
    out = apply_anthropic_cache_control(messages, native_anthropic=True)
    assert messages == before
    assert messages[4]["content"] is parts and "cache_control" not in parts[1]
    assert out[4]["content"] is not parts


def test_stale_markers_are_replaced_not_added_to():
    messages = apply_anthropic_cache_control(conversation(), native_anthropic=True) + [
        {"role": "user", "content": "more"}
    ]
    out = apply_anthropic_cache_control(messages, native_anthropic=True)
    assert count_breakpoints(out) == 4
    assert "cache_control" not in json.dumps(out[2])  # slid out of the window


message_strategy = st.one_of(
    st.builds(lambda text: {"role": "user", "content": text}, st.text(max_size=5)),
    st.builds(lambda text: {"role": "assistant", "content": text}, st.one_of(st.none(), st.text(max_size=5))),
    st.builds(lambda text: {"role": "system", "content": text}, st.text(max_size=5)),
    st.builds(
        lambda texts: {
            "role": "user",
            "content": [{"type": "text", "text": t, "cache_control": EPHEMERAL} for t in texts],
        },
        st.lists(st.text(max_size=3), max_size=3),
    ),
    st.just({"role": "tool", "tool_call_id": "c", "content": "r", "cache_control": EPHEMERAL}),
)


@hypothesis_settings(max_examples=200, deadline=None)
@given(st.lists(message_strategy, max_size=12), st.booleans(), st.sampled_from(["5m", "1h"]))
def test_never_more_than_four_breakpoints_and_the_input_is_unchanged(messages, native, ttl):
    before = copy.deepcopy(messages)
    out = apply_anthropic_cache_control(messages, cache_ttl=ttl, native_anthropic=native)
    assert messages == before
    assert count_breakpoints(out) <= 4
    assert len(out) == len(messages)


# --------------------------------------------------------------------------- when it is on


@pytest.mark.parametrize(
    "model, provider, base_url, enabled, line",
    [
        (
            "anthropic/claude-sonnet-4",
            "openrouter",
            None,
            True,
            "💾 Prompt caching: ENABLED (Claude via OpenRouter, 5m TTL)",
        ),
        ("claude-sonnet-4-5", "anthropic", None, True, "💾 Prompt caching: ENABLED (Claude via Anthropic, 5m TTL)"),
        (
            "anthropic/claude-3.5-haiku",
            "custom",
            "https://openrouter.ai/api/v1",
            True,
            "💾 Prompt caching: ENABLED (Claude via OpenRouter, 5m TTL)",
        ),
        ("gpt-4o", "openrouter", None, False, "💾 Prompt caching: DISABLED (gpt-4o is not a Claude model)"),
        (
            "claude-sonnet-4",
            "openai",
            None,
            False,
            "💾 Prompt caching: DISABLED (provider openai does not pass cache_control through)",
        ),
        (
            "claude-sonnet-4",
            "custom",
            "https://relay.example.com/v1",
            False,
            "💾 Prompt caching: DISABLED (provider custom does not pass cache_control through)",
        ),
    ],
)
def test_auto_enabled_only_for_claude_on_routes_that_take_cache_control(model, provider, base_url, enabled, line):
    plan = plan_prompt_caching(model, provider, base_url=base_url)
    assert plan.enabled is enabled
    assert plan.status_line == line
    assert (plan.request_hook() is not None) is enabled
    assert plan.native_anthropic is (enabled and provider == "anthropic")


def test_configured_off_and_the_one_hour_ttl_show_in_the_status():
    assert plan_prompt_caching("claude-sonnet-4", "anthropic", enabled=False).status_line == (
        "💾 Prompt caching: DISABLED (turned off by prompt_caching.enabled)"
    )
    assert plan_prompt_caching("claude-sonnet-4", "openrouter", cache_ttl="1h").status_line == (
        "💾 Prompt caching: ENABLED (Claude via OpenRouter, 1h TTL)"
    )


# --------------------------------------------------------------------------- the Anthropic dialect


def test_the_anthropic_dialect_carries_every_marker_to_its_block():
    client = ChatClient("http://127.0.0.1:9", dialect="anthropic")
    marked = apply_anthropic_cache_control(conversation(), native_anthropic=True)
    body = client.build_body(marked, model="claude-sonnet-4", max_tokens=10)
    assert body["system"] == [{"type": "text", "text": "You are a careful assistant.", "cache_control": EPHEMERAL}]
    assistant = body["messages"][1]
    assert assistant["role"] == "assistant" and assistant["content"][-1]["type"] == "tool_use"
    assert assistant["content"][-1]["cache_control"] == EPHEMERAL
    results = body["messages"][2]["content"]  # the tool result and the next user turn merge into one user turn
    assert results[0]["type"] == "tool_result" and results[0]["cache_control"] == EPHEMERAL
    assert results[-1]["type"] == "image" and results[-1]["cache_control"] == EPHEMERAL
    assert json.dumps(body).count("cache_control") == 4


def test_without_markers_the_system_prompt_stays_a_string():
    client = ChatClient("http://127.0.0.1:9", dialect="anthropic")
    assert (
        client.build_body(conversation(), model="claude-sonnet-4", max_tokens=10)["system"]
        == "You are a careful assistant."
    )


# --------------------------------------------------------------------------- the faithful fake's rules


def body_with(blocks: list[str], marks: set[int], model: str = "claude-sonnet-4", ttl: str | None = None) -> dict:
    marker = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
    content = [
        {"type": "text", "text": text, **({"cache_control": marker} if i in marks else {})}
        for i, text in enumerate(blocks)
    ]
    return {"model": model, "max_tokens": 5, "messages": [{"role": "user", "content": content}]}


def words(n: int, seed: str) -> list[str]:
    return [f"{seed} block {i} " + "lorem ipsum dolor " * 100 for i in range(n)]


def test_fake_reads_a_prefix_written_at_a_breakpoint_and_writes_only_what_is_new():
    clock = [0.0]
    server = AnthropicCacheServer(clock=lambda: clock[0])
    blocks = words(30, "a")
    first = server.account(body_with(blocks[:10], {9}))
    assert first.cache_read == 0 and first.cache_write == first.prompt_tokens
    second = server.account(body_with(blocks[:15], {14}))
    assert second.cache_read == first.prompt_tokens  # found 5 blocks back
    assert second.cache_write == second.prompt_tokens - first.prompt_tokens
    other_model = server.account(body_with(blocks[:15], {14}, model="claude-opus-4"))
    assert other_model.cache_read == 0  # the model is part of the key


def test_fake_looks_back_twenty_blocks_and_no_further():
    server = AnthropicCacheServer(clock=lambda: 0.0)
    blocks = words(60, "b")
    server.account(body_with(blocks[:10], {9}))
    assert server.account(body_with(blocks[:30], {29})).cache_read > 0  # 20 blocks after the entry
    server.clear()
    server.account(body_with(blocks[:10], {9}))
    assert server.account(body_with(blocks[:31], {30})).cache_read == 0  # 21 blocks: out of reach


def test_fake_refuses_more_than_four_breakpoints():
    server = AnthropicCacheServer(clock=lambda: 0.0)
    with pytest.raises(ValueError, match="maximum of 4"):
        server.account(body_with(words(6, "c"), {0, 1, 2, 3, 4}))


def test_fake_entries_expire_after_five_minutes_unless_read_and_one_hour_ones_last():
    clock = [0.0]
    server = AnthropicCacheServer(clock=lambda: clock[0])
    blocks = words(12, "d")
    server.account(body_with(blocks[:10], {9}))
    clock[0] = 280
    assert server.account(body_with(blocks[:10], {9})).cache_read > 0  # read: lifetime refreshed to t=580
    clock[0] = 560
    assert server.account(body_with(blocks[:10], {9})).cache_read > 0
    clock[0] = 900
    assert server.account(body_with(blocks[:10], {9})).cache_read == 0  # 340 s after the last read
    hour = AnthropicCacheServer(clock=lambda: clock[0])
    hour.account(body_with(blocks[:10], {9}, ttl="1h"))
    clock[0] += 1_800
    assert hour.account(body_with(blocks[:10], {9}, ttl="1h")).cache_read > 0


def test_fake_never_caches_a_prefix_below_the_minimum():
    server = AnthropicCacheServer(clock=lambda: 0.0)
    small = body_with(["tiny"], {0})
    assert server.account(small).cache_write == 0
    assert server.account(small).cache_read == 0


# --------------------------------------------------------------------------- through the agent


SYSTEM_PROMPT = "You are the team's assistant. " + "Follow the house rules carefully. " * 300


async def test_the_agent_hook_earns_cache_reads_on_the_next_turn():
    clock = [0.0]
    async with AnthropicCacheServer(clock=lambda: clock[0]) as server:
        server.default = Reply.answer("noted " * 20)
        plan = plan_prompt_caching("claude-sonnet-4", "anthropic")
        engine = ContextCompressor("claude-sonnet-4", 200_000, CompressionSettings())
        async with ChatClient(server.anthropic_base_url, api_key="k", dialect="anthropic") as client:
            agent = Agent(client, engine, model="claude-sonnet-4", request_hook=plan.request_hook())
            history = [{"role": "system", "content": SYSTEM_PROMPT}]
            for turn in range(4):
                clock[0] += 30
                result = await agent.run_turn(
                    history, {"role": "user", "content": f"point {turn}: " + "details " * 200}
                )
                history = result.messages
        assert all(request.text.count("cache_control") <= 4 for request in server.requests)
        assert server.ledger[0].cache_read == 0
        assert all(entry.cache_read > 0.8 * (entry.prompt_tokens - 400) for entry in server.ledger[1:])
        assert all("cache_control" not in json.dumps(m) for m in history)  # the stored transcript stays clean


def tool_user(request) -> Reply:
    """A model that reads a file for every new message, then answers (so the loop compacts between calls)."""
    last = request.body["messages"][-1]["content"]
    if any(isinstance(block, dict) and block.get("type") == "tool_result" for block in last):
        return Reply.answer("done " * 30)
    return Reply.tool_call(
        "read_file", {"path": "notes.txt"}, call_id=f"call_{len(request.raw)}_{len(request.body['messages'])}"
    )


def read_file_tools() -> ToolRegistry:
    async def read(args: dict) -> str:
        return f"contents of {args.get('path')}: " + "line of text " * 150

    tools = ToolRegistry()
    tools.add(Tool("read_file", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}}, read))
    return tools


async def test_the_system_prompt_changes_once_across_three_compactions():
    """S8.4 / L7: the compaction note is added on the first compaction only, so the system cache survives."""
    async with AnthropicCacheServer(clock=lambda: 0.0) as server:
        server.handler = tool_user
        plan = plan_prompt_caching("claude-sonnet-4", "anthropic")
        engine = ContextCompressor("claude-sonnet-4", 40_000, CompressionSettings(protect_last_n=4))
        async with ChatClient(server.anthropic_base_url, api_key="k", dialect="anthropic") as client:
            agent = Agent(
                client, engine, model="claude-sonnet-4", tools=read_file_tools(), request_hook=plan.request_hook()
            )
            history = [{"role": "system", "content": SYSTEM_PROMPT}]
            turn = 0
            while engine.compression_count < 3:
                turn += 1
                assert turn < 100
                result = await agent.run_turn(
                    history, {"role": "user", "content": f"note {turn}: " + "payload " * 1_500}
                )
                history = result.messages
        systems = [json.dumps(request.body["system"]) for request in server.requests]
        changes = [i + 1 for i, (before, after) in enumerate(zip(systems, systems[1:])) if before != after]
        assert len(changes) == 1
        # from the request after the first compaction on, the system prompt's cache entry is read every time
        assert all(entry.cache_read >= 1_800 for entry in server.ledger[changes[0] + 1 :])


def test_a_disabled_plan_has_no_hook():
    assert CachingPlan(False, "x").request_hook() is None


# --------------------------------------------------------------------------- through the gateway


async def test_the_gateway_places_breakpoints_and_the_start_up_line_says_so(tmp_path, redis, redis_url, key_prefix):
    async with AnthropicCacheServer() as server:
        server.default = Reply.answer("noted")
        settings = Settings(
            redis={"url": redis_url, "key_prefix": key_prefix},
            model={
                "name": "claude-sonnet-4",
                "provider": "anthropic",
                "base_url": server.anthropic_base_url,
                "api_key": "k",
            },
            prompt_caching={"cache_ttl": "1h"},
            platforms={"local": {"enabled": True}},
            gateway={"home": str(tmp_path)},
        )
        out = io.StringIO()
        assert await serve(settings, demo=True, out=out) == 0
        assert "💾 Prompt caching: ENABLED (Claude via Anthropic, 1h TTL)\n" in out.getvalue()
        async with running_gateway(settings, redis) as (runner, adapter, _events):
            for index in range(3):
                await runner.intake(message("c", f"u{index}", f"part {index}: " + "context " * 1200))
                await runner.wait_idle()
    bodies = [request.body for request in server.requests if request.method == "POST"]  # not the model's window
    assert all(json.dumps(body).count('"cache_control"') <= 4 for body in bodies)
    assert all('"ttl": "1h"' in json.dumps(body["messages"][-1]) for body in bodies)
    assert [entry.cache_read > 0 for entry in server.ledger] == [False, True, True]


# --------------------------------------------------------------------------- the benchmark, small


def test_the_caching_benchmark_runs_through_compactions_and_reports_its_figures(tmp_path):
    assert "caching" in available_benchmarks()
    assert bench_caching.main(tmp_path, turns=45, ttls=("5m",)) == 0
    (row,) = json.loads((tmp_path / "bench_caching.json").read_text())["rows"]
    assert row["turns"] == 45 and row["compactions"] >= 2 and row["summarizer_requests"] >= 2
    tokens = row["chat_tokens"]
    assert tokens["cache_read_tokens"] + tokens["cache_write_tokens"] <= tokens["prompt_tokens"]
    assert row["cache_read_share"] > 0.5
    assert 0 < row["input_cost_ratio"] < row["with_summarizer_cost_ratio"] < 1
    first, *later = row["hit_share_around_compactions"]
    # the first compaction adds its note to the system prompt: nothing is a hit right after it, once
    assert first["after_1"] == 0 and first["after_2"] > 0.5
    # after later ones the system prompt is still cached, and a turn later the window is warm again
    assert all(0 < around["after_1"] < 0.5 < around["after_2"] for around in later)
