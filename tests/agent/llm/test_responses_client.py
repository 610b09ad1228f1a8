"""The Responses API client: request shape, native-compaction gating, replay, rejection and issuers (SPEC S7.2)."""

from __future__ import annotations

import pytest

from agent.context_compressor import ContextCompressor
from agent.llm.errors import ProviderRejected
from agent.llm.responses import (
    REPLAY_KEY,
    ResponsesClient,
    classify_route,
    native_compaction_model,
    server_compact_threshold,
)
from agent.loop import Agent
from agent.settings import CompressionSettings
from tests.fakes.llm_server import Reply
from tests.fakes.responses_server import FakeResponsesServer

SYSTEM = {"role": "system", "content": "You are terse."}


def user(text: str) -> dict:
    return {"role": "user", "content": text}


@pytest.fixture
async def server():
    async with FakeResponsesServer(name="a") as fake:
        yield fake


def client_for(fake: FakeResponsesServer, **options) -> ResponsesClient:
    options.setdefault("route", "openai")
    options.setdefault("native_compaction", True)
    return ResponsesClient(fake.responses_base_url, api_key="sk-test", **options)


@pytest.mark.parametrize(
    "provider, base_url, route",
    [
        ("openai", "https://api.openai.com/v1", "openai"),
        ("openai-codex", "https://chatgpt.com/backend-api/codex", "openai-codex"),
        ("openai", "https://relay.example.com/v1", "other"),  # an OpenAI-compatible relay
        ("custom", "https://api.x.ai/v1", "other"),
        ("custom", "https://api.githubcopilot.com", "other"),
        ("openrouter", "https://openrouter.ai/api/v1", "other"),
        ("custom", "http://localhost:8080/v1", "other"),
        ("openai-codex", "http://127.0.0.1:9999/codex", "other"),
    ],
)
def test_only_the_direct_openai_api_and_the_codex_backend_are_native_routes(provider, base_url, route):
    assert classify_route(provider, base_url) == route


@pytest.mark.parametrize(
    "model, eligible",
    [
        ("gpt-5.6", True),
        ("gpt-5.6-sol", True),
        ("openai/gpt-5.6-terra", True),
        ("gpt-5.6-luna-900k", True),
        ("gpt-5.5", False),
        ("gpt-5.4", False),
        ("gpt-5.2", False),
        ("gpt-5.1", False),
        ("gpt-4o", False),
        ("gpt-5.60", False),
    ],
)
def test_only_the_gpt56_family_is_eligible(model, eligible):
    assert native_compaction_model(model) is eligible


def test_the_server_threshold_sits_8k_below_the_local_trigger():
    assert server_compact_threshold(200_000, 231_200) == 200_000  # configured value already below
    assert server_compact_threshold(200_000, 136_000) == 128_000
    assert server_compact_threshold(200_000, None) == 200_000


async def test_request_is_stateless_with_instructions_items_and_converted_tools(server):
    client = client_for(server, native_compaction=False)
    tools = [{"type": "function", "function": {"name": "lookup", "description": "d", "parameters": {"type": "object"}}}]
    history = [
        SYSTEM,
        user("find x"),
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "x=1"},
    ]
    async with client:
        completion = await client.complete(history, model="gpt-5.6", max_tokens=50, tools=tools)
    body = server.requests[0].body
    assert completion.text == "ok"
    assert body["store"] is False and "previous_response_id" not in body
    assert body["instructions"] == "You are terse."
    assert [item["type"] for item in body["input"]] == ["message", "function_call", "function_call_output"]
    assert body["input"][1] == {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"q": "x"}'}
    assert body["tools"] == [
        {"type": "function", "name": "lookup", "description": "d", "parameters": {"type": "object"}, "strict": False}
    ]
    assert "context_management" not in body  # native compaction not configured


@pytest.mark.parametrize(
    "route, model, native, sent",
    [
        ("openai", "gpt-5.6-sol", True, True),
        ("openai-codex", "gpt-5.6", True, True),
        ("openai", "gpt-5.5", True, False),  # other models fail server-side instead of refusing
        ("other", "gpt-5.6", True, False),  # relays, xAI, Copilot, OpenRouter, local servers
        ("openai", "gpt-5.6", False, False),  # codex_responses_native: false
    ],
)
async def test_the_compaction_field_is_sent_only_when_eligible(server, route, model, native, sent):
    async with client_for(server, route=route, native_compaction=native, compact_threshold=150_000) as client:
        await client.complete([user("hi")], model=model, max_tokens=20)
    body = server.requests[0].body
    assert ("context_management" in body) is sent
    if sent:
        assert body["context_management"] == [{"type": "compaction", "compact_threshold": 150_000}]


async def test_the_compaction_item_is_kept_on_the_assistant_message_and_replayed(server):
    server.default = Reply.answer("noted")
    client = client_for(server, compact_threshold=60)
    session = client.for_session("chat-1")
    messages = [SYSTEM, user("first message " + "words " * 80)]
    async with client:
        first = await session.complete(messages, model="gpt-5.6", max_tokens=20)
        assistant = first.as_message()
        assert server.compactions == 1
        stored = assistant[REPLAY_KEY]
        assert stored["items"][0]["type"] == "compaction"
        messages += [assistant, user("second")]
        await session.complete(messages, model="gpt-5.6", max_tokens=20)
    replayed = server.requests[1].body["input"]
    # the compaction item comes first and what it folded is not sent again
    assert replayed[0] == stored["items"][0]
    assert [item.get("role") for item in replayed[1:]] == ["assistant", "user"]
    assert "first message" not in server.requests[1].text
    assert server.requests[1].body["instructions"] == "You are terse."


async def test_a_structured_rejection_retries_without_the_field_and_the_session_stops_sending_it():
    async with FakeResponsesServer(name="strict", reject_context_management=True) as fake:
        client = client_for(fake)
        rejected = client.for_session("chat-1")
        other = client.for_session("chat-2")
        async with client:
            reply = await rejected.complete([user("hi")], model="gpt-5.6", max_tokens=20)
            assert reply.text == "ok"
            await rejected.complete([user("again")], model="gpt-5.6", max_tokens=20)
            await other.complete([user("hi")], model="gpt-5.6", max_tokens=20)
            await other.complete([user("hi")], model="gpt-5.6", max_tokens=20)
    sent = ["context_management" in request.body for request in fake.requests]
    # chat-1: refused, retried without; then never again.  chat-2: tries once, same story.
    assert sent == [True, False, False, True, False, False]


async def test_an_unstructured_failure_is_not_mistaken_for_a_rejection(server):
    server.enqueue(Reply.error(400, "model not found", "invalid_request_error", "model_not_found"))
    async with client_for(server) as client:
        with pytest.raises(ProviderRejected):
            await client.complete([user("hi")], model="gpt-5.6", max_tokens=20)
        await client.complete([user("hi")], model="gpt-5.6", max_tokens=20)
    assert "context_management" in server.requests[-1].body  # still eligible


async def test_items_from_another_issuer_are_never_replayed():
    async with FakeResponsesServer(name="a") as first, FakeResponsesServer(name="b") as second:
        one = client_for(first, compact_threshold=40)
        messages = [user("long " * 60)]
        async with one:
            answer = (await one.complete(messages, model="gpt-5.6", max_tokens=20)).as_message()
        assert REPLAY_KEY in answer
        messages += [answer, user("and now?")]
        two = client_for(second, compact_threshold=10_000)  # a different endpoint: items cannot decrypt there
        async with two:
            reply = await two.complete(messages, model="gpt-5.6", max_tokens=20)
        assert reply.text == "ok"  # the fake refuses foreign encrypted content with a 400
        sent = second.requests[0].body["input"]
        assert all(item["type"] == "message" for item in sent)
        assert "long long" in second.requests[0].text  # the full history goes instead


async def test_a_streamed_answer_is_read_to_its_completed_event(server):
    server.enqueue(Reply.tool_call("lookup", {"q": "y"}, call_id="c9"))
    async with client_for(server, stream=True, send_token_limit=False) as client:
        completion = await client.complete([user("hi")], model="gpt-5.6", max_tokens=20)
    body = server.requests[0].body
    assert body["stream"] is True and "max_output_tokens" not in body
    assert completion.tool_calls[0]["id"] == "c9"
    assert completion.finish_reason == "tool_calls"


async def test_usage_is_read_as_the_whole_prompt_with_cached_tokens_inside_it(server):
    server.enqueue(
        Reply(
            text="hi",
            usage={
                "input_tokens": 1_000,
                "input_tokens_details": {"cached_tokens": 800},
                "output_tokens": 50,
                "output_tokens_details": {"reasoning_tokens": 20},
                "total_tokens": 1_050,
            },
        )
    )
    async with client_for(server, native_compaction=False) as client:
        completion = await client.complete([user("count me")], model="gpt-5.6", max_tokens=20)
    usage = completion.usage
    assert (usage.prompt_tokens, usage.cache_read_tokens, usage.completion_tokens, usage.reasoning_tokens) == (
        1_000,
        800,
        50,
        20,
    )


async def test_the_agent_loop_runs_on_it_and_keeps_the_replay_data(server):
    server.default = Reply.answer("done")
    settings = CompressionSettings()
    engine = ContextCompressor("gpt-5.6-sol", 272_000, settings)
    client = client_for(server, compact_threshold=30)
    agent = Agent(
        client.for_session("chat-9", local_trigger_tokens=engine.threshold_tokens), engine, model="gpt-5.6-sol"
    )
    async with client:
        result = await agent.run_turn([SYSTEM], user("please remember the number 4242 " * 10))
    assert result.reply == "done"
    assert REPLAY_KEY in result.new_messages[-1]
    assert engine.last_prompt_tokens == 300  # the server's post-compaction input size is what the engine sees


async def test_switching_to_an_ineligible_model_stops_the_field_and_sends_the_full_transcript(server):
    client = client_for(server, compact_threshold=40)
    messages = [user("opening remarks " * 40)]
    async with client:
        answer = (await client.complete(messages, model="gpt-5.6", max_tokens=20)).as_message()
        assert answer[REPLAY_KEY]["model"] == "gpt-5.6" and server.compactions == 1
        messages += [answer, user("now on another model")]
        await client.complete(messages, model="gpt-5.5", max_tokens=20)
    body = server.requests[1].body
    assert "context_management" not in body
    assert [item["type"] for item in body["input"]] == ["message", "message", "message"]
    assert "opening remarks" in server.requests[1].text
