"""Streamed answers from every route assemble to the same message however the bytes are split.

The streams are the providers' real event shapes, served through httpx's ``MockTransport``
in chunks cut at chosen byte offsets, so httpx, httpx-sse and foldgate's assemblers run for
real; hypothesis picks the cuts. A stream that breaks off never becomes a reply.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.llm import ChatClient
from agent.llm.errors import ProviderRejected, ProviderUnavailable, RateLimited, StreamInterrupted
from agent.llm.responses import ResponsesClient
from agent.llm.retry import RetryPolicy
from agent.llm.stream import StreamReset, TextDelta, ToolCallStarted

TEXT = "Checking the deploy log — ünïcødé 🚀 and\nnew lines."
ARGUMENTS = {"path": "logs/deploy 2026-12-01.txt", "lines": [1, 2, 3], "note": 'quote " and emoji 🧪'}
MESSAGES = [{"role": "user", "content": "what broke?"}]


def _sse(*events: tuple[str | None, Any]) -> bytes:
    out = []
    for name, data in events:
        text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
        out.append((f"event: {name}\n" if name else "") + f"data: {text}\n\n")
    return "".join(out).encode()


def _pieces(text: str, size: int = 7) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def openai_stream(*, comments: bool = False) -> bytes:
    arguments = json.dumps(ARGUMENTS, ensure_ascii=False)
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o"}
    events: list[tuple[str | None, Any]] = [
        (None, {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
    ]
    events += [(None, {**base, "choices": [{"index": 0, "delta": {"content": piece}}]}) for piece in _pieces(TEXT)]
    events.append(
        (
            None,
            {
                **base,
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "tool_calls": [
                                {
                                    "index": 0,
                                    "id": "call_a",
                                    "type": "function",
                                    "function": {"name": "read_log", "arguments": ""},
                                }
                            ]
                        },
                    }
                ],
            },
        )
    )
    events += [
        (
            None,
            {
                **base,
                "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}}],
            },
        )
        for piece in _pieces(arguments, 5)
    ]
    events.append((None, {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}))
    events.append(
        (
            None,
            {
                **base,
                "choices": [],
                "usage": {
                    "prompt_tokens": 120,
                    "completion_tokens": 30,
                    "total_tokens": 150,
                    "prompt_tokens_details": {"cached_tokens": 64, "cache_write_tokens": 16},
                },
            },
        )
    )
    events.append((None, "[DONE]"))
    body = _sse(*events)
    return b": OPENROUTER PROCESSING\n\n: OPENROUTER PROCESSING\n\n" + body if comments else body


def anthropic_stream() -> bytes:
    arguments = json.dumps(ARGUMENTS, ensure_ascii=False)
    events: list[tuple[str | None, Any]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-sonnet-4",
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": 20,
                        "cache_read_input_tokens": 90,
                        "cache_creation_input_tokens": 10,
                        "output_tokens": 1,
                    },
                },
            },
        ),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ),
        ("ping", {"type": "ping"}),
    ]
    events += [
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}},
        )
        for piece in _pieces(TEXT)
    ]
    events += [
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "tool_use", "id": "toolu_a", "name": "read_log", "input": {}},
            },
        ),
    ]
    events += [
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": piece}},
        )
        for piece in _pieces(arguments, 5)
    ]
    events += [
        ("content_block_stop", {"type": "content_block_stop", "index": 1}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": {"output_tokens": 30},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return _sse(*events)


def responses_stream() -> bytes:
    arguments = json.dumps(ARGUMENTS, ensure_ascii=False)
    final = {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "model": "gpt-5.6",
        "output": [
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": TEXT, "annotations": []}],
            },
            {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "read_log", "arguments": arguments},
        ],
        "usage": {
            "input_tokens": 120,
            "input_tokens_details": {"cached_tokens": 64},
            "output_tokens": 30,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 150,
        },
    }
    events: list[tuple[str | None, Any]] = [
        (
            "response.created",
            {"type": "response.created", "response": {**final, "status": "in_progress", "output": []}},
        ),
        (
            "response.output_item.added",
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []},
            },
        ),
    ]
    events += [
        (
            "response.output_text.delta",
            {"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": piece},
        )
        for piece in _pieces(TEXT)
    ]
    events.append(
        (
            "response.output_item.added",
            {
                "type": "response.output_item.added",
                "output_index": 1,
                "item": {
                    "type": "function_call",
                    "id": "fc_1",
                    "call_id": "call_a",
                    "name": "read_log",
                    "arguments": "",
                },
            },
        )
    )
    events += [
        (
            "response.function_call_arguments.delta",
            {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": piece},
        )
        for piece in _pieces(arguments, 5)
    ]
    events.append(("response.completed", {"type": "response.completed", "response": final}))
    return _sse(*events)


class ChunkedStream(httpx.AsyncByteStream):
    """The body in the chunks given (a real server's writes, as a client reads them)."""

    def __init__(self, chunks: Sequence[bytes]) -> None:
        self.chunks = list(chunks)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk


def split(body: bytes, cuts: Sequence[int]) -> list[bytes]:
    points = sorted({c for c in cuts if 0 < c < len(body)})
    edges = [0, *points, len(body)]
    return [body[a:b] for a, b in zip(edges, edges[1:])]


def serving(*bodies: list[bytes], status: int = 200) -> httpx.AsyncClient:
    """A client whose n-th request is answered with the n-th chunk list (the last one repeats)."""
    answers = list(bodies)

    def handler(request: httpx.Request) -> httpx.Response:
        chunks = answers.pop(0) if len(answers) > 1 else answers[0]
        return httpx.Response(status, headers={"content-type": "text/event-stream"}, stream=ChunkedStream(chunks))

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


ROUTES = {
    "openai": (openai_stream, "https://api.example/v1", "openai"),
    "openrouter": (lambda: openai_stream(comments=True), "https://openrouter.example/api/v1", "openai"),
    "anthropic": (anthropic_stream, "https://anthropic.example", "anthropic"),
    "responses": (responses_stream, "https://api.example/v1", "responses"),
}


def client_for(route: str, http: httpx.AsyncClient, retries: int = 0) -> Any:
    _, base, dialect = ROUTES[route]
    retry = RetryPolicy(max_retries=retries, initial_backoff=0.0)
    if dialect == "responses":
        return ResponsesClient(base, stream=True, http=http, retry=retry)
    return ChatClient(base, dialect=dialect, stream=True, http=http, retry=retry)


async def complete(route: str, chunks: list[bytes], events: list[Any] | None = None) -> Any:
    async with serving(chunks) as http:
        client = client_for(route, http)

        async def sink(event: Any) -> None:
            if events is not None:
                events.append(event)

        return await client.complete(
            MESSAGES, model="gpt-5.6" if route == "responses" else "m", max_tokens=100, on_event=sink
        )


def assert_whole(completion: Any) -> None:
    assert completion.text == TEXT
    assert len(completion.tool_calls) == 1
    call = completion.tool_calls[0]
    assert call["function"]["name"] == "read_log" and json.loads(call["function"]["arguments"]) == ARGUMENTS
    assert completion.finish_reason == "tool_calls"
    assert completion.usage.prompt_tokens == 120 and completion.usage.completion_tokens == 30


@pytest.mark.parametrize("route", ROUTES)
async def test_every_route_streams_text_deltas_and_assembles_tool_calls(route):
    events: list[Any] = []
    completion = await complete(route, [ROUTES[route][0]()], events)
    assert_whole(completion)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == TEXT
    assert len([e for e in events if isinstance(e, TextDelta)]) > 3  # pieces, not one blob at the end
    assert [e.name for e in events if isinstance(e, ToolCallStarted)] == ["read_log"]


@pytest.mark.parametrize("route", ROUTES)
async def test_a_split_at_every_single_byte_boundary_gives_the_same_message(route):
    body = ROUTES[route][0]()
    for cut in range(1, len(body), 3 if len(body) > 3000 else 1):
        assert_whole(await complete(route, split(body, [cut])))


@pytest.mark.parametrize("route", ROUTES)
# A test's own list replaces the profile's, so too_slow (a timing, not a verdict) is named again here.
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(data=st.data())
async def test_any_split_gives_the_same_message(route, data):
    body = ROUTES[route][0]()
    cuts = data.draw(st.lists(st.integers(min_value=1, max_value=len(body) - 1), max_size=60))
    assert_whole(await complete(route, split(body, cuts)))


@pytest.mark.parametrize("route", ROUTES)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
async def test_a_stream_cut_anywhere_before_its_end_never_becomes_a_reply(route, data):
    body = ROUTES[route][0]()
    terminal = {
        "openai": b'finish_reason": "tool_calls',
        "openrouter": b'finish_reason": "tool_calls',
        "anthropic": b"event: message_stop",
        "responses": b"event: response.completed",
    }[route]
    end = body.index(terminal)
    cut = data.draw(st.integers(min_value=1, max_value=end))
    with pytest.raises((StreamInterrupted, ProviderUnavailable)):
        await complete(route, [body[:cut]])


@pytest.mark.parametrize("route", ROUTES)
async def test_a_cut_stream_is_retried_and_the_preview_is_reset(route):
    body = ROUTES[route][0]()
    half = body[: len(body) // 2]
    events: list[Any] = []
    async with serving([half], [body]) as http:
        client = client_for(route, http, retries=1)

        async def sink(event: Any) -> None:
            events.append(event)

        completion = await client.complete(
            MESSAGES, model="gpt-5.6" if route == "responses" else "m", max_tokens=100, on_event=sink
        )
    assert_whole(completion)
    resets = [i for i, e in enumerate(events) if isinstance(e, StreamReset)]
    assert len(resets) == 1
    after = events[resets[0] + 1 :]
    assert "".join(e.text for e in after if isinstance(e, TextDelta)) == TEXT  # the preview restarts from nothing


async def test_openrouter_usage_carries_cache_writes():
    completion = await complete("openrouter", [openai_stream(comments=True)])
    assert completion.usage.cache_read_tokens == 64 and completion.usage.cache_write_tokens == 16


@pytest.mark.parametrize(
    ("route", "event", "error"),
    [
        (
            "openrouter",
            (
                None,
                {
                    "error": {"code": 502, "message": "upstream overloaded"},
                    "choices": [{"index": 0, "delta": {}, "finish_reason": "error"}],
                },
            ),
            ProviderUnavailable,
        ),
        ("openrouter", (None, {"error": {"code": 429, "message": "slow down"}}), RateLimited),
        ("openai", (None, {"error": {"code": 400, "message": "bad"}}), ProviderRejected),
        (
            "anthropic",
            ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
            ProviderUnavailable,
        ),
        (
            "responses",
            ("response.failed", {"type": "response.failed", "response": {"error": {"code": "server_error"}}}),
            ProviderUnavailable,
        ),
    ],
)
async def test_an_error_reported_inside_the_stream_is_a_typed_error(route, event, error):
    body = ROUTES[route][0]()
    head = body[: body.index(b"\n\n", len(body) // 3) + 2]
    with pytest.raises(error):
        await complete(route, [head + _sse(event)])


async def test_an_endpoint_that_ignores_stream_true_is_read_whole():
    answer = {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "whole"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }

    def handler(request: httpx.Request) -> httpx.Response:
        assert json.loads(request.content)["stream"] is True
        return httpx.Response(200, json=answer)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        client = ChatClient("https://api.example/v1", stream=True, http=http)
        completion = await client.complete(MESSAGES, model="m", max_tokens=5)
    assert completion.text == "whole"


async def test_an_agent_turn_hands_on_text_tool_calls_and_tool_runs_in_order():
    from agent.context_compressor import ContextCompressor
    from agent.loop import Agent, ToolRunning
    from agent.tools import Tool, ToolRegistry

    final = _sse(
        *[(None, {"choices": [{"index": 0, "delta": {"content": piece}}]}) for piece in _pieces("All fine.", 3)],
        (None, {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        (None, "[DONE]"),
    )
    tools = ToolRegistry()
    ran: list[dict[str, Any]] = []

    async def read_log(arguments: dict[str, Any]) -> str:
        ran.append(arguments)
        return "no errors"

    tools.add(Tool("read_log", "Read a log file", {"type": "object", "properties": {}}, read_log))
    events: list[Any] = []

    async def sink(event: Any) -> None:
        events.append(event)

    async with serving([openai_stream()], [final]) as http:
        agent = Agent(
            ChatClient("https://api.example/v1", stream=True, http=http),
            ContextCompressor("m", 128_000),
            model="m",
            tools=tools,
        )
        result = await agent.run_turn([], {"role": "user", "content": "check"}, on_event=sink)
    assert result.reply == "All fine." and ran == [ARGUMENTS]
    kinds = [type(event).__name__ for event in events]
    assert kinds.index("ToolCallStarted") < kinds.index("ToolRunning") < len(kinds) - 1
    running = next(event for event in events if isinstance(event, ToolRunning))
    assert running.name == "read_log" and json.loads(running.arguments) == ARGUMENTS
    after = events[kinds.index("ToolRunning") + 1 :]
    assert "".join(event.text for event in after if isinstance(event, TextDelta)) == "All fine."


# --------------------------------------------------------------------------- edge cases of real servers


def _chunks(*deltas: dict[str, Any], finish: str = "tool_calls") -> bytes:
    events: list[tuple[str | None, Any]] = [(None, {"choices": [{"index": 0, "delta": delta}]}) for delta in deltas]
    events += [(None, {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}), (None, "[DONE]")]
    return _sse(*events)


async def test_tool_call_pieces_without_an_index_continue_the_call_they_belong_to():
    body = _chunks(
        {"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": ""}}]},
        {"tool_calls": [{"function": {"arguments": '{"q":'}}]},
        {"tool_calls": [{"function": {"arguments": ' "x"}'}}]},
        {"tool_calls": [{"id": "c2", "type": "function", "function": {"name": "fetch", "arguments": "{}"}}]},
    )
    completion = await complete("openai", [body])
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in completion.tool_calls] == [
        ("c1", "lookup", '{"q": "x"}'),
        ("c2", "fetch", "{}"),
    ]


async def test_a_new_call_id_at_an_index_already_used_is_a_new_call():
    body = _chunks(
        {"tool_calls": [{"index": 0, "id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"tool_calls": [{"index": 0, "id": "b", "type": "function", "function": {"name": "g", "arguments": ""}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"k": 1}'}}]},
    )
    completion = await complete("openai", [body])
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in completion.tool_calls] == [
        ("a", "f", "{}"),
        ("b", "g", '{"k": 1}'),
    ]


@pytest.mark.parametrize(
    ("route", "event"),
    [
        (
            "responses",
            (
                "response.failed",
                {
                    "type": "response.failed",
                    "response": {
                        "error": {
                            "code": "context_length_exceeded",
                            "message": "Your input exceeds the context window of this model.",
                        }
                    },
                },
            ),
        ),
        (
            "openrouter",
            (None, {"error": {"code": 400, "message": "This endpoint's maximum context length is 8192 tokens."}}),
        ),
    ],
)
async def test_a_context_length_error_inside_a_stream_lets_the_loop_compact(route, event):
    from agent.llm.errors import ContextTooLong

    body = ROUTES[route][0]()
    head = body[: body.index(b"\n\n") + 2]
    with pytest.raises(ContextTooLong):
        await complete(route, [head + _sse(event)])


async def test_a_watcher_that_fails_is_not_taken_for_the_provider_and_nothing_is_asked_twice():
    requests = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal requests
        requests += 1
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, stream=ChunkedStream([openai_stream()])
        )

    async def failing(event: Any) -> None:
        raise ConnectionResetError("the chat platform hung up")

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        client = ChatClient("https://api.example/v1", stream=True, http=http, retry=RetryPolicy(max_retries=3))
        with pytest.raises(ConnectionResetError, match="platform hung up"):
            await client.complete(MESSAGES, model="m", max_tokens=5, on_event=failing)
    assert requests == 1


@pytest.mark.parametrize(("finish", "final"), [("length", True), ("content_filter", True), ("stop", False)])
async def test_an_empty_answer_is_retried_only_when_it_does_not_say_why(finish, final):
    from agent.llm.errors import BadResponse

    body = _chunks({"content": ""}, finish=finish)
    requests = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal requests
        requests += 1
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=ChunkedStream([body]))

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        client = ChatClient(
            "https://api.example/v1", stream=True, http=http, retry=RetryPolicy(max_retries=1, initial_backoff=0.0)
        )
        with pytest.raises(BadResponse) as caught:
            await client.complete(MESSAGES, model="m", max_tokens=5)
    assert requests == (1 if final else 2)
    if finish == "length":
        assert "max_output_tokens" in str(caught.value)
