"""ChatClient against a real HTTP fake provider: both dialects, conversions both ways, typed errors, usage."""

import json
import socket

import pytest

from agent.http_options import HttpOptions
from agent.llm import (
    BadResponse,
    ChatClient,
    ContextTooLong,
    InvalidRequest,
    ProviderRejected,
    ProviderTimeout,
    ProviderUnavailable,
    RateLimited,
)
from agent.llm.retry import RetryPolicy, parse_retry_after
from agent.models import request_rules
from tests.fakes.llm_server import FakeLLMServer, Reply

#: One try only: these tests look at what a single failed request becomes.
NO_RETRY = RetryPolicy(max_retries=0)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    }
]

CONVERSATION = [
    {"role": "system", "content": "You are terse.", "_id": "m-1"},
    {"role": "user", "content": "Read a.py", "_id": "m-2", "_tok": 7},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "print('hi')"},
    {"role": "user", "content": "And now?"},
]


@pytest.fixture
async def server():
    async with FakeLLMServer() as fake:
        yield fake


async def test_openai_request_and_response(server):
    server.enqueue(Reply.tool_call("read_file", {"path": "b.py"}, call_id="call_9", text="Reading."))
    async with ChatClient(server.openai_base_url, api_key="sk-test") as client:
        completion = await client.complete(CONVERSATION, model="gpt-4o", max_tokens=50, tools=TOOLS, temperature=0.1)
    request = server.requests[0]
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.body["model"] == "gpt-4o" and request.body["max_tokens"] == 50 and request.body["temperature"] == 0.1
    assert request.body["tools"] == TOOLS
    assert all(not key.startswith("_") for m in request.body["messages"] for key in m)
    assert completion.text == "Reading." and completion.finish_reason == "tool_calls"
    assert completion.tool_calls[0]["function"] == {"name": "read_file", "arguments": '{"path": "b.py"}'}
    assert completion.usage.prompt_tokens > 20 and completion.usage.completion_tokens > 0
    assert completion.as_message()["tool_calls"][0]["id"] == "call_9"


async def test_anthropic_request_is_converted_and_the_answer_converted_back(server):
    server.enqueue(Reply.tool_call("read_file", {"path": "c.py"}, call_id="toolu_1"))
    async with ChatClient(server.anthropic_base_url, api_key="sk-ant", dialect="anthropic") as client:
        completion = await client.complete(CONVERSATION, model="claude-sonnet-4", max_tokens=64, tools=TOOLS)
    request = server.requests[0]
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == "sk-ant" and request.headers["anthropic-version"] == "2023-06-01"
    body = request.body
    assert body["system"] == "You are terse."
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][1]["content"] == [
        {"type": "tool_use", "id": "call_1", "name": "read_file", "input": {"path": "a.py"}}
    ]
    assert body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "call_1", "content": "print('hi')"},
        {"type": "text", "text": "And now?"},
    ]
    assert body["tools"][0] == {
        "name": "read_file",
        "description": "Read a file",
        "input_schema": TOOLS[0]["function"]["parameters"],
    }
    assert completion.finish_reason == "tool_calls"
    assert completion.tool_calls == [
        {"id": "toolu_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path":"c.py"}'}}
    ]


async def test_anthropic_cache_markers_yield_cache_writes_then_reads(server):
    long_system = "Rules. " * 900
    messages = [
        {"role": "system", "content": [{"type": "text", "text": long_system, "cache_control": {"type": "ephemeral"}}]},
        {"role": "user", "content": "hello"},
    ]
    async with ChatClient(server.anthropic_base_url, dialect="anthropic") as client:
        first = await client.complete(messages, model="claude", max_tokens=10)
        second = await client.complete(messages, model="claude", max_tokens=10)
    assert server.requests[0].body["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert first.usage.cache_write_tokens > 1000 and first.usage.cache_read_tokens == 0
    assert second.usage.cache_read_tokens == first.usage.cache_write_tokens
    assert second.usage.prompt_tokens == first.usage.prompt_tokens


async def test_openai_prefix_caching_reports_cached_tokens(server):
    prefix = [{"role": "system", "content": "Policy. " * 1500}, {"role": "user", "content": "one"}]
    async with ChatClient(server.openai_base_url) as client:
        first = await client.complete(prefix, model="gpt-4o", max_tokens=5)
        second = await client.complete(
            [*prefix, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "two"}],
            model="gpt-4o",
            max_tokens=5,
        )
    assert first.usage.cache_read_tokens == 0
    assert second.usage.cache_read_tokens >= 1024 and second.usage.cache_read_tokens % 128 == 0


async def test_broken_pairs_are_refused_before_anything_is_sent(server):
    broken = [{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "nope", "content": "y"}]
    async with ChatClient(server.openai_base_url) as client:
        with pytest.raises(InvalidRequest, match="no preceding call"):
            await client.complete(broken, model="m", max_tokens=5)
    assert server.requests == []


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (Reply.server_error(500), ProviderUnavailable),
        (Reply.server_error(529), ProviderUnavailable),
        (Reply.context_too_long(), ContextTooLong),
        (Reply.error(401, "invalid x-api-key", "authentication_error"), ProviderRejected),
        (Reply.error(400, "unknown parameter foo", "invalid_request_error"), ProviderRejected),
        (Reply.empty(), BadResponse),
        (Reply.malformed_json(), BadResponse),
        (Reply.drop_connection(), ProviderUnavailable),
    ],
)
async def test_faults_become_typed_errors(server, dialect, reply, error):
    server.enqueue(reply)
    base = server.anthropic_base_url if dialect == "anthropic" else server.openai_base_url
    async with ChatClient(base, dialect=dialect, retry=NO_RETRY) as client:
        with pytest.raises(error):
            await client.complete([{"role": "user", "content": "hi"}], model="m", max_tokens=5)
        # the client stays usable after any fault
        assert (await client.complete([{"role": "user", "content": "hi"}], model="m", max_tokens=5)).text == "ok"


async def test_rate_limit_carries_retry_after(server):
    server.enqueue(Reply.rate_limited(retry_after=7))
    async with ChatClient(server.openai_base_url, retry=NO_RETRY) as client:
        with pytest.raises(RateLimited) as caught:
            await client.complete([{"role": "user", "content": "hi"}], model="m", max_tokens=5)
    assert caught.value.retry_after == 7


async def test_a_slow_answer_times_out(server):
    server.enqueue(Reply.slow(5))
    async with ChatClient(server.openai_base_url, options=HttpOptions(timeout_seconds=0.2), retry=NO_RETRY) as client:
        with pytest.raises(ProviderTimeout):
            await client.complete([{"role": "user", "content": "hi"}], model="m", max_tokens=5)


async def test_truncated_answers_are_flagged(server):
    server.enqueue(Reply.truncated("## Goal\nhalf"))
    async with ChatClient(server.anthropic_base_url, dialect="anthropic") as client:
        completion = await client.complete([{"role": "user", "content": "hi"}], model="m", max_tokens=5)
    assert completion.truncated and completion.text == "## Goal\nhalf"


async def test_the_server_window_is_enforced(server):
    server.context_limit = 50
    async with ChatClient(server.openai_base_url) as client:
        with pytest.raises(ContextTooLong):
            await client.complete([{"role": "user", "content": "word " * 200}], model="m", max_tokens=5)


async def test_connection_refused_is_unavailable():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with ChatClient(f"http://127.0.0.1:{port}/v1", retry=NO_RETRY) as client:
        with pytest.raises(ProviderUnavailable):
            await client.complete([{"role": "user", "content": "hi"}], model="m", max_tokens=5)


def test_retry_after_formats():
    assert parse_retry_after({"retry-after": "12"}) == 12
    assert parse_retry_after({"retry-after-ms": "1500"}) == 1.5
    assert parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:30 GMT"}, now=1445412500.0) == 10
    assert parse_retry_after({}) is None
    # A number that is no wait time is ignored, never turned into an endless cooldown.
    assert parse_retry_after({"retry-after": "inf"}) is None and parse_retry_after({"retry-after": "nan"}) is None
    assert parse_retry_after({"retry-after-ms": "1e999", "retry-after": "3"}) == 3


async def test_handler_scripts_answers_from_the_request(server):
    server.handler = lambda request: Reply.answer(f"you said {request.last_user_text}")
    async with ChatClient(server.openai_base_url) as client:
        completion = await client.complete([{"role": "user", "content": "ping"}], model="m", max_tokens=5)
    assert completion.text == "you said ping"
    assert json.loads(server.requests[0].raw)["messages"][0]["content"] == "ping"


def test_an_image_in_a_tool_result_stays_an_image_block_on_anthropic():
    from agent.llm.anthropic import build_request

    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    messages = [
        {"role": "user", "content": "take a screenshot"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "s1", "type": "function", "function": {"name": "screenshot", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "s1", "content": [{"type": "text", "text": "here it is"}, image]},
    ]
    body = build_request(
        messages,
        model="claude-sonnet-4",
        max_tokens=100,
        tools=None,
        temperature=None,
        rules=request_rules("claude-sonnet-4", "anthropic"),
    )
    result = body["messages"][-1]["content"][0]
    assert result["type"] == "tool_result" and [b["type"] for b in result["content"]] == ["text", "image"]
