"""The agent's tool loop against a fake provider: when it compacts, what it never does to a turn in flight,
and how it copes with providers that number tool calls their own way."""

from __future__ import annotations

import random

from agent.compaction.lean import old_tool_result_cutoff, stub_old_tool_results
from agent.context_compressor import ContextCompressor
from agent.llm.client import ChatClient
from agent.loop import Agent
from agent.messages import api_problems
from agent.tools import Tool, ToolRegistry
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply

WORDS = [
    "deploy",
    "canary",
    "ledger",
    "invoice",
    "webhook",
    "retry",
    "shard",
    "replica",
    "latency",
    "rollback",
    "cache",
    "token",
]


def history(tokens_wanted: int, seed: int = 1) -> list[dict]:
    rng = random.Random(seed)
    messages: list[dict] = [{"role": "system", "content": "You are a careful assistant."}]
    index = 0
    while sum(len(str(m["content"])) for m in messages) < tokens_wanted * 5:
        text = " ".join(rng.choice(WORDS) + str(rng.randint(0, 999)) for _ in range(120))
        messages.append(
            {"role": "user" if index % 2 == 0 else "assistant", "content": f"{index}: {text}", "_id": str(index)}
        )
        index += 1
    if messages[-1]["role"] == "user":
        messages.append({"role": "assistant", "content": "ok", "_id": str(index)})
    return messages


async def echo_tool(args: dict) -> str:
    return "result " + "x" * 50


def registry() -> ToolRegistry:
    tools = ToolRegistry()
    tools.add(Tool("lookup", "look something up", {"type": "object"}, echo_tool))
    return tools


async def test_a_plain_chat_over_the_threshold_compacts_before_its_first_request():
    async with FakeLLMServer(handler=lambda r: Reply.answer("fine")) as server:
        engine = ContextCompressor(model="m", context_length=40_000)
        engine.update_from_response({"prompt_tokens": 27_000, "completion_tokens": 10, "total_tokens": 27_010})
        async with ChatClient(server.openai_base_url) as client:
            agent = Agent(client, engine, model="m")
            result = await agent.run_turn(history(27_000), {"role": "user", "content": "and now?"})
    assert result.compacted and engine.compression_count == 1
    assert result.reply == "fine"


async def test_without_reported_usage_the_loop_does_not_compact_on_every_step():
    steps = iter(range(100))

    def script(request: RecordedRequest) -> Reply:
        step = next(steps)
        reply = Reply.tool_call("lookup", {"q": step}, call_id=f"c{step}") if step < 6 else Reply.answer("done")
        reply.usage = {}  # the provider reports nothing
        return reply

    async with FakeLLMServer(handler=script) as server:
        engine = ContextCompressor(model="m", context_length=40_000)
        engine.update_from_response({"prompt_tokens": 27_000, "completion_tokens": 10, "total_tokens": 27_010})
        async with ChatClient(server.openai_base_url) as client:
            agent = Agent(client, engine, model="m", tools=registry())
            result = await agent.run_turn(history(27_000), {"role": "user", "content": "look it up"})
    assert result.reply == "done" and engine.compression_count == 1


async def test_tool_call_ids_a_provider_reuses_are_made_unique():
    def script(request: RecordedRequest) -> Reply:
        if request.messages[-1]["role"] == "tool":
            return Reply.answer("ok")
        return Reply.tool_call("lookup", {"q": 1}, call_id="functions.lookup:0")

    async with FakeLLMServer(handler=script) as server:
        engine = ContextCompressor(model="m", context_length=200_000)
        async with ChatClient(server.openai_base_url) as client:
            agent = Agent(client, engine, model="m", tools=registry())
            first = await agent.run_turn([{"role": "system", "content": "s"}], {"role": "user", "content": "one"})
            second = await agent.run_turn(first.messages, {"role": "user", "content": "two"})
    ids = [call["id"] for m in second.messages for call in m.get("tool_calls") or ()]
    assert len(ids) == 2 and len(set(ids)) == 2
    assert api_problems(second.messages) == [] and second.reply == "ok"


def test_results_of_the_newest_calls_are_never_stubbed():
    """The model has not seen them yet: a stub would make it call the tools again."""
    big = "line of output\n" * 2_000
    tail = [
        {"role": "user", "content": "read both files"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "read", "arguments": "{}"}},
                {"id": "b", "type": "function", "function": {"name": "read", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": big},
        {"role": "tool", "tool_call_id": "b", "content": big},
    ]
    cutoff = old_tool_result_cutoff(tail, budget_offset=4, fresh_tokens=100)
    stubbed_tail, stubbed = stub_old_tool_results(tail, cutoff)
    assert stubbed == [] and stubbed_tail[2]["content"] == big and stubbed_tail[3]["content"] == big


async def test_engine_state_survives_the_first_message_getting_its_id_at_commit():
    engine = ContextCompressor(model="m", context_length=40_000)
    messages = history(30_000)
    del messages[1]["_id"]  # the turn's first message is not stored yet when the turn compacts
    await engine.compress(messages, force=True)
    state = engine.export_state()
    restored = ContextCompressor(model="m", context_length=40_000)
    restored.load_state(state)
    messages[1]["_id"] = "1"  # committed: the store gave it an id
    await restored.compress(history(30_000, seed=1) + [{"role": "user", "content": "more"}], force=True)
    assert restored.compression_count == 2  # the same conversation: its count and summary carried on
