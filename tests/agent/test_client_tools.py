"""Tools the client runs itself (an OpenAI-compatible caller's own function tools) against the fake providers:
the turn ends with the client's calls unanswered and nothing standing in for their results, the client's
results continue it, an answer may mix the bot's calls with the client's, compaction keeps the pending calls
with their assistant message, and results or tools that cannot be taken are refused before any request."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from agent.context_compressor import ContextCompressor
from agent.llm.client import ChatClient
from agent.llm.responses import ResponsesClient
from agent.loop import Agent, ClientToolError
from agent.messages import SYNTHETIC_KEY, api_problems
from agent.tool_calls import pending_calls
from agent.tools import Tool, ToolRegistry
from agent.transcript_repair import repair_transcript
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.fakes.responses_server import FakeResponsesServer
from tests.fakes.sdk_shapes import validate_anthropic_messages, validate_chat_completions

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city, looked up by the client.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
QUESTION = {"role": "user", "content": "what is the weather in Oslo?"}


async def lookup(args: dict[str, Any]) -> str:
    return f"looked up {args.get('q')}"


def registry() -> ToolRegistry:
    tools = ToolRegistry()
    tools.add(Tool("lookup", "look something up", {"type": "object"}, lookup))
    return tools


def call(name: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def offered(request: RecordedRequest) -> list[str]:
    """The tool names a request offers, whatever the route's shape of a tool."""
    return [tool.get("name") or tool["function"]["name"] for tool in request.body.get("tools") or ()]


def weather_then_answer(request: RecordedRequest) -> Reply:
    """The fake model: asks the client's weather tool first, answers with its result once it has it."""
    validate_chat_completions(request.body)
    last = request.messages[-1]
    if last.get("role") == "tool":
        return Reply.answer(f"the client says: {last['content']}")
    return Reply.tool_call("get_weather", {"city": "Oslo"}, call_id="call_weather")


async def test_a_client_tool_call_ends_the_turn_with_the_call_pending_and_nothing_in_its_place():
    async with FakeLLMServer(handler=weather_then_answer) as server:
        async with ChatClient(server.openai_base_url) as client:
            agent = Agent(client, ContextCompressor(model="m", context_length=40_000), model="m", tools=registry())
            result = await agent.run_turn([], dict(QUESTION), client_tools=[WEATHER])
    assert offered(server.requests[0]) == ["lookup", "get_weather"]
    assert len(server.requests) == 1  # the client runs its tool: the loop does not ask the model again
    assert [call["id"] for call in result.pending_client_calls] == ["call_weather"]
    assert result.pending_client_calls[0]["function"]["name"] == "get_weather"
    assert [m["role"] for m in result.new_messages] == ["user", "assistant"]  # no tool result stood in
    assert pending_calls(result.messages) == result.pending_client_calls


async def test_the_clients_results_continue_the_turn_and_pair_with_their_calls():
    async with FakeLLMServer(handler=weather_then_answer) as server:
        async with ChatClient(server.openai_base_url) as client:
            agent = Agent(client, ContextCompressor(model="m", context_length=40_000), model="m", tools=registry())
            first = await agent.run_turn([], dict(QUESTION), client_tools=[WEATHER])
            results = [{"tool_call_id": "call_weather", "content": "sunny, 21 °C"}]
            second = await agent.run_turn(first.messages, None, client_tools=[WEATHER], tool_results=results)
    assert second.reply == "the client says: sunny, 21 °C" and not second.pending_client_calls
    assert [m["role"] for m in second.new_messages] == ["tool", "assistant"]
    result = second.new_messages[0]
    assert (result["tool_call_id"], result["content"]) == ("call_weather", "sunny, 21 °C")
    sent = server.requests[-1].messages
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"] and not api_problems(sent)


async def test_a_mixed_answer_runs_the_bots_calls_and_leaves_the_clients_pending():
    def model(request: RecordedRequest) -> Reply:
        if request.messages[-1].get("role") == "tool":
            results = sorted(m["content"] for m in request.messages if m.get("role") == "tool")
            return Reply.answer(" + ".join(results))
        calls = [call("lookup", {"q": "Oslo"}, "call_lookup"), call("get_weather", {"city": "Oslo"}, "call_weather")]
        return Reply(text="", tool_calls=calls, finish_reason="tool_calls")

    async with FakeLLMServer(handler=model) as server:
        async with ChatClient(server.openai_base_url) as client:
            agent = Agent(client, ContextCompressor(model="m", context_length=40_000), model="m", tools=registry())
            first = await agent.run_turn([], dict(QUESTION), client_tools=[WEATHER])
            assert [m["role"] for m in first.new_messages] == ["user", "assistant", "tool"]
            assert first.new_messages[2]["content"] == "looked up Oslo"  # the bot's own call ran in the turn
            assert [c["id"] for c in first.pending_client_calls] == ["call_weather"]
            assert len(server.requests) == 1
            results = [{"tool_call_id": "call_weather", "content": "rain"}]
            second = await agent.run_turn(first.messages, None, client_tools=[WEATHER], tool_results=results)
    assert second.reply == "looked up Oslo + rain"
    assert not api_problems(server.requests[-1].messages)


WORDS = ["deploy", "canary", "ledger", "invoice", "webhook", "retry", "shard", "replica", "latency", "rollback"]


def long_history(tokens_wanted: int) -> list[dict[str, Any]]:
    """A stored conversation of about ``tokens_wanted`` tokens, ending with a client call awaiting its result."""
    rng = random.Random(7)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful assistant."}]
    while sum(len(str(m["content"])) for m in messages) < tokens_wanted * 5:
        text = " ".join(rng.choice(WORDS) + str(rng.randint(0, 999)) for _ in range(120))
        role = "user" if len(messages) % 2 else "assistant"
        messages.append({"role": role, "content": f"{len(messages)}: {text}", "_id": str(len(messages))})
    if messages[-1]["role"] == "assistant":
        messages.append({"role": "user", "content": "and the weather?", "_id": str(len(messages))})
    calls = [call("lookup", {"q": "x"}, "call_lookup"), call("get_weather", {"city": "Oslo"}, "call_weather")]
    messages.append({"role": "assistant", "content": "", "tool_calls": calls, "_id": str(len(messages))})
    messages.append({"role": "tool", "tool_call_id": "call_lookup", "content": "x", "_id": str(len(messages))})
    return messages


async def test_compaction_keeps_a_pending_client_call_with_its_assistant_message_until_its_result_comes():
    stored = long_history(27_000)
    engine = ContextCompressor(model="m", context_length=40_000)
    # Compaction before the turn (the gateway's hygiene) over a transcript that ends awaiting the client.
    compacted = await engine.compress(stored, current_tokens=30_000, force=True)
    assert engine.compression_count == 1 and len(compacted) < len(stored)
    assert compacted[-2]["tool_calls"] == stored[-2]["tool_calls"] and compacted[-1] is stored[-1]
    assert not any(m.get(SYNTHETIC_KEY) and m.get("role") == "tool" for m in compacted)  # nothing stood in
    assert [c["id"] for c in pending_calls(compacted)] == ["call_weather"]
    # The transcript repair a turn reads through leaves them too, when the turn brings their results.
    assert not repair_transcript(compacted, keep_trailing_pending=True).changed
    assert repair_transcript(compacted).unanswered == ["call_weather"]  # a plain message next: stood in

    # The loop compacting again once the results came (the window is still over its threshold).
    engine.update_from_response({"prompt_tokens": 27_000, "completion_tokens": 10, "total_tokens": 27_010})
    async with FakeLLMServer(handler=lambda request: Reply.answer("done")) as server:
        async with ChatClient(server.openai_base_url) as client:
            agent = Agent(client, engine, model="m", tools=registry())
            results = [{"tool_call_id": "call_weather", "content": "sunny"}]
            result = await agent.run_turn(long_history(27_000), None, client_tools=[WEATHER], tool_results=results)
    assert result.compacted and result.reply == "done"
    sent = server.requests[-1].messages
    assert not api_problems(sent)
    answered = {m["tool_call_id"]: m["content"] for m in sent if m.get("role") == "tool"}
    assert answered == {"call_lookup": "x", "call_weather": "sunny"}
    assert sent[-3]["role"] == "assistant" and {c["id"] for c in sent[-3]["tool_calls"]} == set(answered)


async def test_results_that_answer_no_pending_call_are_refused_before_any_request():
    async with FakeLLMServer(handler=weather_then_answer) as server:
        async with ChatClient(server.openai_base_url) as client:
            agent = Agent(client, ContextCompressor(model="m", context_length=40_000), model="m", tools=registry())
            first = await agent.run_turn([], dict(QUESTION), client_tools=[WEATHER])
            for results in (
                [{"tool_call_id": "call_nobody_made", "content": "?"}],
                [{"tool_call_id": "call_weather", "content": "a"}, {"tool_call_id": "call_weather", "content": "b"}],
            ):
                with pytest.raises(ClientToolError, match="call_nobody_made|call_weather") as refused:
                    await agent.run_turn(first.messages, None, client_tools=[WEATHER], tool_results=results)
                assert refused.value.param == "tool_call_id"
            two = [call("get_weather", {"city": "Oslo"}, "call_a"), call("get_weather", {"city": "Rome"}, "call_b")]
            history = [dict(QUESTION), {"role": "assistant", "content": "", "tool_calls": two}]
            with pytest.raises(ClientToolError, match="call_b") as unanswered:  # one call left without its result
                await agent.run_turn(history, None, client_tools=[WEATHER], tool_results=[{"tool_call_id": "call_a"}])
            assert unanswered.value.param == "tool_call_id"
    assert len(server.requests) == 1


async def test_a_client_tool_named_like_one_of_the_bots_is_refused_naming_tools():
    clash = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    async with FakeLLMServer(handler=weather_then_answer) as server:
        async with ChatClient(server.openai_base_url) as client:
            agent = Agent(client, ContextCompressor(model="m", context_length=40_000), model="m", tools=registry())
            for tools in ([clash], [WEATHER, WEATHER], [{"type": "function", "function": {"name": "no spaces"}}]):
                with pytest.raises(ClientToolError) as refused:
                    await agent.run_turn([], dict(QUESTION), client_tools=tools)
                assert refused.value.param == "tools"
    assert server.requests == []


async def test_the_anthropic_route_offers_client_tools_and_pairs_their_results():
    def model(request: RecordedRequest) -> Reply:
        validate_anthropic_messages(request.body)
        blocks = request.messages[-1]["content"]
        results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
        if results:
            return Reply.answer(f"the client says: {results[0]['content']}")
        return Reply.tool_call("get_weather", {"city": "Oslo"}, call_id="toolu_weather")

    async with FakeLLMServer(handler=model) as server:
        async with ChatClient(server.anthropic_base_url, api_key="k", dialect="anthropic") as client:
            agent = Agent(client, ContextCompressor(model="m", context_length=40_000), model="m", tools=registry())
            first = await agent.run_turn([], dict(QUESTION), client_tools=[WEATHER])
            results = [{"tool_call_id": "toolu_weather", "content": "snow"}]
            second = await agent.run_turn(first.messages, None, client_tools=[WEATHER], tool_results=results)
    assert server.requests[0].body["tools"][1]["input_schema"] == WEATHER["function"]["parameters"]
    assert [c["id"] for c in first.pending_client_calls] == ["toolu_weather"]
    assert "snow" in second.reply


async def test_the_responses_route_offers_client_tools_and_pairs_their_results():
    def model(request: RecordedRequest) -> Reply:
        outputs = [i for i in request.body["input"] if i.get("type") == "function_call_output"]
        if outputs:
            return Reply.answer(f"the client says: {outputs[-1]['output']}")
        return Reply.tool_call("get_weather", {"city": "Oslo"}, call_id="call_weather")

    async with FakeResponsesServer(name="client-tools", handler=model) as server:
        async with ResponsesClient(server.responses_base_url, api_key="k", route="openai") as client:
            agent = Agent(client, ContextCompressor(model="m", context_length=40_000), model="gpt-5.6")
            first = await agent.run_turn([], dict(QUESTION), client_tools=[WEATHER])
            results = [{"tool_call_id": "call_weather", "content": "fog"}]
            second = await agent.run_turn(first.messages, None, client_tools=[WEATHER], tool_results=results)
    tools = server.requests[0].body["tools"]
    assert tools[-1]["name"] == "get_weather" and tools[-1]["type"] == "function"
    assert [c["id"] for c in first.pending_client_calls] == ["call_weather"]
    assert second.reply == "the client says: fog"
