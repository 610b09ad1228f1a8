"""The provider fakes are faithful: the official SDKs (test-only dependencies) consume them as they would the real APIs.

If the OpenAI or Anthropic SDK parses a fake's stream into the scripted answer, raises its
own typed error for a refused parameter, and an ordinary TLS/proxy stack treats the fake's
certificates and tunnels as it would a provider's, then tests built on the fakes test the
client against the providers' real behaviour — not against the fake's own idea of it.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import pydantic
import pytest

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")
pytest.importorskip("trustme")

from tests.fakes.connect_proxy import ConnectProxy  # noqa: E402
from tests.fakes.llm_server import FakeLLMServer, Reply, StreamError  # noqa: E402
from tests.fakes.network import BlackHole, connect_hangs, resolve  # noqa: E402
from tests.fakes.responses_server import FakeResponsesServer  # noqa: E402
from tests.fakes.tls import OTHER_HOST  # noqa: E402

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
ARGUMENTS = {"city": "Paris", "units": "celsius", "days": [1, 2, 3]}
SYSTEM_BLOCK = {
    "type": "text",
    "text": "You answer questions about the weather. " * 20,
    "cache_control": {"type": "ephemeral"},
}


@pytest.fixture
async def server():
    async with FakeLLMServer(min_cache_tokens=64) as fake:
        yield fake


def openai_client(base_url: str, **options) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0, **options)


def anthropic_client(base_url: str, **options) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=base_url, api_key="x", max_retries=0, **options)


def weather_call(text: str = "Let me check.") -> Reply:
    return Reply(
        text=text,
        finish_reason="tool_calls",
        chunk_size=5,
        tool_calls=[
            {
                "id": "call_w1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": json.dumps(ARGUMENTS)},
            }
        ],
    )


async def sse_lines(response: httpx.Response) -> list[str]:
    return [line async for line in response.aiter_lines() if line]


# ------------------------------------------------------------------ OpenAI chat completions


async def test_openai_sdk_reads_a_plain_completion_with_usage(server):
    server.enqueue(Reply.answer("Sunny in Paris."))
    async with openai_client(server.openai_base_url) as client:
        completion = await client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert completion.choices[0].message.content == "Sunny in Paris."
    assert completion.choices[0].finish_reason == "stop" and completion.object == "chat.completion"
    assert completion.usage.prompt_tokens > 0 and completion.usage.prompt_tokens_details.cached_tokens == 0
    recorded = server.requests[0]
    assert recorded.path == "/v1/chat/completions" and recorded.headers["authorization"] == "Bearer x"
    assert recorded.first_byte_at is not None and recorded.first_byte_at >= recorded.received_at


async def test_openai_sdk_stream_reassembles_text_tool_calls_and_usage(server):
    server.enqueue(weather_call("Let me check the forecast."))
    async with openai_client(server.openai_base_url) as client:
        stream = await client.chat.completions.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": "weather?"}],
            tools=[WEATHER],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(texts) > 3 and "".join(texts) == "Let me check the forecast."
    fragments = [call for c in chunks if c.choices for call in c.choices[0].delta.tool_calls or ()]
    assert (
        fragments[0].id == "call_w1"
        and fragments[0].function.name == "get_weather"
        and fragments[0].function.arguments == ""
    )
    assert all(f.id is None and f.function.name is None for f in fragments[1:]) and len(fragments) > 3
    assert json.loads("".join(f.function.arguments for f in fragments)) == ARGUMENTS
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == 0


async def test_openai_sdk_stream_helper_builds_the_final_message(server):
    server.enqueue(weather_call())
    async with openai_client(server.openai_base_url) as client:
        async with client.chat.completions.stream(
            model="gpt-4o", messages=[{"role": "user", "content": "?"}], tools=[WEATHER]
        ) as stream:
            final = await stream.get_final_completion()
    message = final.choices[0].message
    assert message.content == "Let me check." and json.loads(message.tool_calls[0].function.arguments) == ARGUMENTS


async def test_a_stream_is_written_event_by_event_and_ends_with_done(server):
    server.enqueue(Reply(text="one two three four", event_delay=0.03))
    async with httpx.AsyncClient() as http:
        async with http.stream(
            "POST",
            f"{server.openai_base_url}/chat/completions",
            json={"model": "gpt-4o", "messages": [], "stream": True},
        ) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            assert response.headers["transfer-encoding"] == "chunked"
            arrivals = []
            async for line in response.aiter_lines():
                if line:
                    arrivals.append((time.monotonic(), line))
    assert arrivals[-1][1] == "data: [DONE]" and all(line.startswith("data: ") for _, line in arrivals)
    chunks = [openai.types.chat.ChatCompletionChunk.model_validate_json(line[6:]) for _, line in arrivals[:-1]]
    assert [chunk.choices[0].delta.content for chunk in chunks[1:-1]] == ["one ", "two ", "three ", "four"]
    assert all("usage" not in json.loads(line[6:]) for _, line in arrivals[:-1])  # not asked for
    assert arrivals[-1][0] - arrivals[0][0] >= 0.8 * 0.03 * (len(arrivals) - 1)  # really spaced, not one blob


@pytest.mark.parametrize(
    "model", ["gpt-5", "gpt-5-mini", "gpt-5.1", "gpt-5.6-sol", "openai/gpt-5.5", "o1", "o3", "o4-mini"]
)
async def test_openai_refuses_max_tokens_on_reasoning_models_as_the_sdk_expects(server, model):
    async with openai_client(server.openai_base_url) as client:
        with pytest.raises(openai.BadRequestError) as refused:
            await client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}], max_tokens=5)
        assert refused.value.code == "unsupported_parameter" and refused.value.param == "max_tokens"
        with pytest.raises(openai.BadRequestError) as refused:
            await client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "x"}], temperature=0.2, max_completion_tokens=5
            )
        assert refused.value.body == {
            "message": "Unsupported value: 'temperature' does not support 0.2 with this model. "
            "Only the default (1) value is supported.",
            "type": "invalid_request_error",
            "param": "temperature",
            "code": "unsupported_value",
        }
        ok = await client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "x"}], temperature=1, max_completion_tokens=5
        )
        with pytest.raises(openai.BadRequestError, match="only allowed when 'stream' is enabled"):
            await client.chat.completions.create(model=model, messages=[], stream_options={"include_usage": True})
    assert ok.choices[0].message.content == "ok"


async def test_non_reasoning_models_and_the_other_flavors_take_max_tokens_and_temperature():
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 5, "temperature": 0.2}
    async with FakeLLMServer() as plain, FakeLLMServer(flavor="openrouter", processing_comments=0) as router:
        async with httpx.AsyncClient() as http:
            plain_answer = await http.post(
                f"{plain.openai_base_url}/chat/completions", json={"model": "gpt-4o", **body}
            )
            assert plain_answer.status_code == 200
            for model in ("openai/gpt-5", "o3", "anthropic/claude-opus-4.7"):
                answer = await http.post(f"{router.openai_base_url}/chat/completions", json={"model": model, **body})
                assert answer.status_code == 200, answer.text


async def test_openai_mid_stream_error_and_overload_surface_as_sdk_errors(server):
    server.enqueue(
        Reply(text="partial answer here", stream_error=StreamError(after=2, message="upstream fell over")),
        Reply.overloaded(),
    )
    async with openai_client(server.openai_base_url) as client:
        stream = await client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "x"}], stream=True
        )
        with pytest.raises(openai.APIError, match="upstream fell over"):
            async for _ in stream:
                pass
        with pytest.raises(openai.InternalServerError) as overloaded:
            await client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    assert overloaded.value.status_code == 503 and overloaded.value.body["type"] == "server_error"


async def test_cut_and_dropped_connections_look_broken_to_the_client(server):
    server.enqueue(Reply(text="a b c d e f g", cut_after=3), Reply.drop_connection())
    request = {"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}], "stream": True}
    async with httpx.AsyncClient() as http:
        lines: list[str] = []
        with pytest.raises(httpx.RemoteProtocolError):
            async with http.stream("POST", f"{server.openai_base_url}/chat/completions", json=request) as response:
                async for line in response.aiter_lines():
                    if line:
                        lines.append(line)
        assert len(lines) == 3 and "data: [DONE]" not in lines
        with pytest.raises(httpx.RemoteProtocolError, match="without sending"):
            await http.post(f"{server.openai_base_url}/chat/completions", json=request)
    assert server.requests[1].first_byte_at is None


async def test_slow_replies_delay_and_first_byte_time_is_recorded(server):
    server.enqueue(Reply.slow(0.5), Reply(text="hello", first_byte_delay=0.1))
    async with httpx.AsyncClient() as http:
        with pytest.raises(httpx.ReadTimeout):
            await http.post(
                f"{server.openai_base_url}/chat/completions",
                timeout=0.1,
                json={"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]},
            )
        answer = await http.post(
            f"{server.openai_base_url}/chat/completions",
            json={"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}], "stream": True},
        )
    assert answer.status_code == 200 and server.requests[1].time_to_first_byte >= 0.1


@pytest.mark.parametrize("coding", ["gzip", "br"])
async def test_json_answers_are_compressed_when_the_client_accepts_it(coding):
    if coding == "br":
        pytest.importorskip("brotli")
    async with FakeLLMServer(compress=coding) as fake:
        async with httpx.AsyncClient() as http:
            url = f"{fake.openai_base_url}/chat/completions"
            body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]}
            packed = await http.post(url, json=body, headers={"accept-encoding": coding})
            plain = await http.post(url, json=body, headers={"accept-encoding": "identity"})
    assert packed.headers["content-encoding"] == coding and packed.json()["choices"][0]["message"]["content"] == "ok"
    assert "content-encoding" not in plain.headers


# ------------------------------------------------------------------ OpenRouter


async def test_openrouter_stream_has_processing_comments_and_cache_usage_with_cost():
    async with FakeLLMServer(flavor="openrouter", min_cache_tokens=64, processing_interval=0.01) as router:
        messages = [{"role": "system", "content": [SYSTEM_BLOCK]}, {"role": "user", "content": "Weather in Paris?"}]
        body = {"model": "anthropic/claude-sonnet-4.5", "messages": messages, "stream": True, "max_tokens": 50}
        async with httpx.AsyncClient() as http:
            async with http.stream("POST", f"{router.openai_base_url}/chat/completions", json=body) as response:
                lines = await sse_lines(response)
            again = (
                await http.post(f"{router.openai_base_url}/chat/completions", json={**body, "stream": False})
            ).json()
    assert lines[:2] == [": OPENROUTER PROCESSING"] * 2 and lines[-1] == "data: [DONE]"
    first = json.loads(lines[-2][6:])["usage"]  # usage always comes, unasked
    assert (
        first["prompt_tokens_details"]["cache_write_tokens"] > 0
        and first["prompt_tokens_details"]["cached_tokens"] == 0
    )
    assert first["cost"] > 0
    assert (
        again["usage"]["prompt_tokens_details"]["cached_tokens"] == first["prompt_tokens_details"]["cache_write_tokens"]
    )
    assert again["usage"]["prompt_tokens_details"]["cache_write_tokens"] == 0 and again["usage"]["cost"] < first["cost"]
    assert again["provider"] == "Anthropic" and again["choices"][0]["native_finish_reason"] == "end_turn"


async def test_openai_sdk_consumes_an_openrouter_stream_and_its_mid_stream_error():
    async with FakeLLMServer(flavor="openrouter", processing_interval=0.01) as router:
        router.enqueue(weather_call(), Reply.stream_failure(after=2, message="Provider disconnected"))
        async with openai_client(router.openai_base_url) as client:
            async with client.chat.completions.stream(
                model="openai/gpt-4o", messages=[{"role": "user", "content": "?"}], tools=[WEATHER]
            ) as stream:
                final = await stream.get_final_completion()
            stream = await client.chat.completions.create(
                model="openai/gpt-4o", messages=[{"role": "user", "content": "?"}], stream=True
            )
            with pytest.raises(openai.APIError, match="Provider disconnected"):
                async for _ in stream:
                    pass
    assert json.loads(final.choices[0].message.tool_calls[0].function.arguments) == ARGUMENTS
    assert final.usage.total_tokens > 0


# ------------------------------------------------------------------ Anthropic messages


async def test_anthropic_sdk_create_and_stream_give_the_scripted_message_with_cache_usage(server):
    scripted = weather_call("Checking the forecast now.")
    server.enqueue(scripted, scripted)
    request = dict(
        model="claude-sonnet-4-5",
        max_tokens=200,
        system=[SYSTEM_BLOCK],
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[{"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}],
    )
    async with anthropic_client(server.anthropic_base_url) as client:
        created = await client.messages.create(**request)
        async with client.messages.stream(**request) as stream:
            kinds = [event.type async for event in stream]
            streamed = await stream.get_final_message()
    assert [block.type for block in created.content] == ["text", "tool_use"] and created.stop_reason == "tool_use"
    assert created.usage.cache_creation_input_tokens > 0 and created.usage.cache_read_input_tokens == 0
    assert streamed.content[0].text == "Checking the forecast now."
    assert (streamed.content[1].id, streamed.content[1].name, streamed.content[1].input) == (
        "call_w1",
        "get_weather",
        ARGUMENTS,
    )
    assert streamed.stop_reason == "tool_use" and streamed.usage.output_tokens == created.usage.output_tokens
    assert streamed.usage.cache_read_input_tokens == created.usage.cache_creation_input_tokens
    assert streamed.usage.cache_creation_input_tokens == 0
    assert kinds[0] == "message_start" and "ping" not in kinds  # the SDK hides pings; raw events are checked below


async def test_anthropic_raw_stream_events_validate_against_the_sdk_types(server):
    server.enqueue(weather_call("Hi there."))
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 50,
        "stream": True,
        "messages": [{"role": "user", "content": "x"}],
    }
    async with httpx.AsyncClient() as http:
        async with http.stream(
            "POST", f"{server.anthropic_base_url}/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"}
        ) as response:
            lines = await sse_lines(response)
    events = [(lines[i][7:], json.loads(lines[i + 1][6:])) for i in range(0, len(lines), 2)]
    adapter = pydantic.TypeAdapter(anthropic.types.RawMessageStreamEvent)
    for name, data in events:
        if name != "ping":
            assert adapter.validate_python(data).type == name
    names = [name for name, _ in events]
    assert names[:3] == ["message_start", "content_block_start", "ping"] and names[-2:] == [
        "message_delta",
        "message_stop",
    ]
    assert events[0][1]["message"]["usage"]["output_tokens"] == 1
    partial = [
        data["delta"]["partial_json"]
        for name, data in events
        if name == "content_block_delta" and data["delta"]["type"] == "input_json_delta"
    ]
    assert partial[0] == "" and json.loads("".join(partial)) == ARGUMENTS


async def test_anthropic_rules_and_overload_are_the_real_apis(server):
    body = {"model": "claude-sonnet-4-5", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
    async with httpx.AsyncClient(base_url=server.anthropic_base_url) as http:
        unversioned = await http.post("/v1/messages", json=body)
        missing = await http.post(
            "/v1/messages",
            json={key: body[key] for key in ("model", "messages")},
            headers={"anthropic-version": "2023-06-01"},
        )
    assert unversioned.status_code == 400 and "anthropic-version" in unversioned.json()["error"]["message"]
    assert missing.status_code == 400 and missing.json()["error"] == {
        "type": "invalid_request_error",
        "message": "max_tokens: Field required",
    }
    server.enqueue(Reply.overloaded(), Reply.stream_failure(after=3))
    async with anthropic_client(server.anthropic_base_url) as client:
        for model in ("claude-opus-4-7", "anthropic/claude-opus-4.8", "claude-opus-4-7-20260101"):
            with pytest.raises(anthropic.BadRequestError) as refused:
                await client.messages.create(
                    model=model,
                    max_tokens=5,
                    messages=[{"role": "user", "content": "x"}],
                    extra_body={"temperature": 0.5},
                )  # this SDK no longer offers the parameter
            assert refused.value.body == {
                "type": "error",
                "error": {"type": "invalid_request_error", "message": "`temperature` is deprecated for this model."},
            }
        with pytest.raises(anthropic.OverloadedError) as overloaded:
            await client.messages.create(
                model="claude-sonnet-4-5", max_tokens=5, messages=[{"role": "user", "content": "x"}]
            )
        assert overloaded.value.body == {
            "type": "error",
            "error": {"type": "overloaded_error", "message": "Overloaded"},
        }
        with pytest.raises(anthropic.APIStatusError) as failed:
            async with client.messages.stream(
                model="claude-sonnet-4-5", max_tokens=5, messages=[{"role": "user", "content": "x"}]
            ) as stream:
                await stream.get_final_message()
        assert failed.value.body["error"]["type"] == "overloaded_error"
        marked = [{"type": "text", "text": f"part {n}", "cache_control": {"type": "ephemeral"}} for n in range(5)]
        with pytest.raises(anthropic.BadRequestError, match="A maximum of 4 blocks with cache_control"):
            await client.messages.create(
                model="claude-sonnet-4-5", max_tokens=5, messages=[{"role": "user", "content": marked}]
            )


async def test_both_dialects_list_their_models(server):
    async with openai_client(server.openai_base_url) as client:
        listed = [model.id async for model in client.models.list()]
        one = await client.models.retrieve("gpt-4o")
        with pytest.raises(openai.NotFoundError):
            await client.models.retrieve("gpt-0")
    async with anthropic_client(server.anthropic_base_url) as client:
        claude = [model.id async for model in client.models.list()]
    assert "gpt-4o" in listed and one.id == "gpt-4o" and one.object == "model"
    assert claude and all(name.startswith("claude") for name in claude)
    async with FakeLLMServer(models=["foldgate-local"]) as configured, httpx.AsyncClient() as http:
        assert (await http.get(f"{configured.openai_base_url}/models")).json()["data"][0]["id"] == "foldgate-local"


# ------------------------------------------------------------------ Responses


async def test_responses_stream_has_the_apis_event_sequence_and_final_response():
    async with FakeResponsesServer() as fake:
        fake.enqueue(weather_call("Looking it up."))
        async with openai_client(fake.responses_base_url) as client:
            stream = await client.responses.create(model="gpt-5.6", input="Weather in Paris?", stream=True)
            events = [event async for event in stream]
    kinds = [event.type for event in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds.count("response.output_text.delta") > 2 and kinds.count("response.function_call_arguments.delta") > 2
    assert kinds[-1] == "response.completed" and [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response
    assert final.output_text == "Looking it up." and final.usage.input_tokens > 0
    call = next(item for item in final.output if item.type == "function_call")
    assert call.call_id == "call_w1" and json.loads(call.arguments) == ARGUMENTS


async def test_responses_truncation_and_mid_stream_failure():
    async with FakeResponsesServer() as fake:
        fake.enqueue(
            Reply.truncated("cut short"),
            Reply.stream_failure(after=3, message="boom"),
            Reply.stream_failure(after=2, responses_event="error", message="bad"),
        )
        async with openai_client(fake.responses_base_url) as client:
            kinds = []
            for _ in range(3):
                stream = await client.responses.create(model="gpt-5.6", input="x", stream=True)
                try:
                    kinds.append([event.type async for event in stream][-1])
                except openai.APIError as error:
                    kinds.append(f"raised {error.message}")
    assert kinds[0] == "response.incomplete" and kinds[1] == "response.failed"
    assert kinds[2] == "error" or kinds[2].startswith("raised")


async def test_responses_strict_function_tools_follow_the_documented_rules():
    loose = {
        "type": "function",
        "name": "search",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["query"],
        },
    }
    sealed = {
        **loose,
        "parameters": {**loose["parameters"], "required": ["query", "limit"], "additionalProperties": False},
    }
    async with FakeResponsesServer() as fake, FakeResponsesServer(omitted_strict="reject") as old_rule:
        async with openai_client(fake.responses_base_url) as client:
            with pytest.raises(openai.BadRequestError) as refused:
                await client.responses.create(model="gpt-5.6", input="x", tools=[{**loose, "strict": True}])
            fallback = await client.responses.create(model="gpt-5.6", input="x", tools=[loose, sealed])
            relaxed = await client.responses.create(model="gpt-5.6", input="x", tools=[{**loose, "strict": False}])
            with pytest.raises(openai.BadRequestError) as hot:
                await client.responses.create(model="gpt-5.6", input="x", temperature=0.2)
        async with openai_client(old_rule.responses_base_url) as client:
            with pytest.raises(openai.BadRequestError) as rejected:
                await client.responses.create(model="gpt-5.6", input="x", tools=[sealed, loose])
    assert refused.value.code == "invalid_function_parameters" and refused.value.param == "tools[0].parameters"
    assert refused.value.message.endswith(
        "Invalid schema for function 'search': In context=(), 'required' is required to be supplied and to be an array "
        "including every key in properties. Missing 'limit'."
    )
    assert [tool.strict for tool in fallback.tools] == [False, True] and relaxed.tools[0].strict is False
    assert rejected.value.param == "tools[1].parameters" and hot.value.code == "unsupported_parameter"


async def test_responses_raw_events_validate_against_the_sdk_types():
    adapter = pydantic.TypeAdapter(openai.types.responses.ResponseStreamEvent)
    async with FakeResponsesServer() as fake, httpx.AsyncClient() as http:
        fake.enqueue(weather_call(), Reply.stream_failure(after=4))
        for _ in range(2):
            async with http.stream(
                "POST", f"{fake.responses_base_url}/responses", json={"model": "gpt-5.6", "input": "x", "stream": True}
            ) as response:
                lines = await sse_lines(response)
            pairs = [
                (lines[i][len("event: ") :], json.loads(lines[i + 1][len("data: ") :])) for i in range(0, len(lines), 2)
            ]
            assert all(adapter.validate_python(data).type == name for name, data in pairs)
    assert pairs[-1][0] == "response.failed" and pairs[-1][1]["sequence_number"] == 4


# ------------------------------------------------------------------ TLS, proxy, network


async def test_tls_is_trusted_only_through_the_test_ca(pki, monkeypatch):
    async with FakeLLMServer(ssl=pki.server_context, server_name="localhost") as fake:
        assert fake.base_url == f"https://localhost:{fake.port}"
        async with httpx.AsyncClient(verify=pki.client_context()) as trusting:
            assert (await trusting.get(f"{fake.openai_base_url}/models")).status_code == 200
        async with httpx.AsyncClient() as default_trust:  # the public roots know nothing of the test CA
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await default_trust.get(f"{fake.openai_base_url}/models")
        monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca_file))
        async with httpx.AsyncClient() as from_environment:
            assert (await from_environment.get(f"{fake.openai_base_url}/models")).status_code == 200
        async with openai_client(
            fake.openai_base_url, http_client=httpx.AsyncClient(verify=pki.client_context())
        ) as client:
            assert (await client.chat.completions.create(model="gpt-4o", messages=[])).choices[
                0
            ].message.content == "ok"


@pytest.mark.parametrize(
    "which, problem", [("untrusted_context", "unable to get local issuer"), ("wrong_host_context", "Hostname mismatch")]
)
async def test_an_untrusted_or_misnamed_certificate_is_refused(pki, which, problem):
    async with FakeLLMServer(ssl=getattr(pki, which), server_name="localhost") as fake:
        async with httpx.AsyncClient(verify=pki.client_context()) as http:
            with pytest.raises(httpx.ConnectError, match=problem):
                await http.get(f"{fake.openai_base_url}/models")
    assert OTHER_HOST not in fake.base_url


async def test_the_proxy_tunnels_https_and_forwards_http(pki):
    async with (
        FakeLLMServer(ssl=pki.server_context, server_name="localhost") as secure,
        FakeLLMServer() as plain,
        ConnectProxy() as proxy,
    ):
        async with httpx.AsyncClient(proxy=proxy.url, verify=pki.client_context()) as http:
            tunnelled = await http.post(
                f"{secure.openai_base_url}/chat/completions", json={"model": "gpt-4o", "messages": []}
            )
            forwarded = await http.get(f"{plain.openai_base_url}/models?limit=5")
    assert tunnelled.json()["choices"][0]["message"]["content"] == "ok" and forwarded.status_code == 200
    assert proxy.targets == [f"localhost:{secure.port}", f"{plain.openai_base_url}/models?limit=5"]
    assert plain.requests[0].path == "/v1/models?limit=5" and "proxy-connection" not in plain.requests[0].headers


async def test_the_proxy_can_require_credentials():
    async with FakeLLMServer() as fake, ConnectProxy(require_auth=("alice", "s3cret")) as proxy:
        async with httpx.AsyncClient(proxy=proxy.url) as anonymous:
            refused = await anonymous.get(f"{fake.openai_base_url}/models")
        async with httpx.AsyncClient(proxy=proxy.auth_url) as known:
            allowed = await known.get(f"{fake.openai_base_url}/models")
    assert refused.status_code == 407 and refused.headers["proxy-authenticate"].startswith("Basic")
    assert allowed.status_code == 200 and proxy.refused == [f"{fake.openai_base_url}/models"]


async def test_the_black_hole_hangs_a_connect_while_loopback_answers(server):
    with BlackHole() as hole:
        assert hole.host == "127.0.0.2"
        assert await connect_hangs(hole.address, timeout=0.2)
        assert not await connect_hangs(("127.0.0.1", server.port), timeout=0.2)


async def test_resolve_gives_a_name_several_addresses_in_order(server):
    with BlackHole(port=server.port) as hole, resolve({"fake-provider.test": [hole.host, "127.0.0.1"]}) as looked_up:
        # asyncio tries the addresses in order: without happy eyeballs the first one hangs it
        assert await connect_hangs(("fake-provider.test", server.port), timeout=0.2)
        _, writer = await asyncio.wait_for(
            asyncio.open_connection("fake-provider.test", server.port, happy_eyeballs_delay=0.05), 1.0
        )
        assert writer.get_extra_info("peername")[0] == "127.0.0.1"
        writer.close()
        async with httpx.AsyncClient() as http:  # anyio: getaddrinfo with a bytes host, then happy eyeballs
            answer = await http.get(f"http://fake-provider.test:{server.port}/v1/models", timeout=2.0)
    assert answer.status_code == 200 and looked_up.count("fake-provider.test") >= 3


def test_the_ca_bundle_is_a_pem_file(pki):
    assert Path(pki.ca_file).read_text().startswith("-----BEGIN CERTIFICATE-----")
