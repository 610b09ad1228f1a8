"""A client's own function tools over the Responses API, driven by OpenAI's SDK: the response ends with the model's
calls as ``function_call`` items (whole, and streamed as the SDK assembles them), the client's next request brings
their results as ``function_call_output`` items with ``previous_response_id`` and gets the final answer from the
same session, and what cannot be taken is refused naming the field."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from openai.types.responses import Response

from gateway.api.response_requests import parse_response_request
from gateway.api.sessions import SESSION_HEADER
from tests.fakes.api_gateway import api_gateway, api_settings
from tests.fakes.gateway import is_summary_request
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city, looked up by the client.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "strict": False,
}
QUESTION = "What is the weather in Oslo?"


def weather_model(text: str = "") -> Any:
    """A provider that calls the client's weather tool when offered it (saying ``text`` with the call), and
    answers with the tool's result once the conversation ends with one."""

    def answer(request: RecordedRequest) -> Reply:
        last = request.messages[-1]
        if last.get("role") == "tool":
            return Reply.answer(f"The client says: {last['content']}.", chunk_size=5)
        offered = [tool["function"]["name"] for tool in request.body.get("tools") or ()]
        if "get_weather" in offered:
            return Reply.tool_call("get_weather", {"city": "Oslo"}, call_id="call_weather", text=text)
        return Reply.answer("No tools were offered.")

    return answer


def chat_turns(provider: FakeLLMServer) -> list[RecordedRequest]:
    return [request for request in provider.requests if request.messages and not is_summary_request(request)]


def sunny(call_id: str = "call_weather") -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": "sunny, 21 °C"}


async def respond(client: openai.AsyncOpenAI, **asked: Any) -> tuple[str, Response]:
    """The session the request went to, and the response (checked against the SDK's own model)."""
    raw = await client.responses.with_raw_response.create(model="m", **asked)
    Response.model_validate(raw.http_response.json())
    return raw.headers[SESSION_HEADER], raw.parse()


async def streamed(client: openai.AsyncOpenAI, **asked: Any) -> tuple[list[str], Response]:
    """The event types of a streamed response, and the response the SDK's accumulator made of them."""
    kinds: list[str] = []
    async with client.responses.stream(model="m", **asked) as stream:
        async for event in stream:
            kinds.append(event.type)
        final = await stream.get_final_response()
    return kinds, final


@pytest.mark.parametrize("text", ["", "Let me look that up."])
async def test_a_call_ends_the_response_and_its_output_continues_the_session(redis_url, key_prefix, text):
    async with FakeLLMServer(handler=weather_model(text)) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            client = api.async_client()
            session, first = await respond(client, input=QUESTION, tools=[WEATHER])
            *said, call = first.output
            assert [item.type for item in said] == (["message"] if text else [])
            assert first.output_text == text
            assert (call.type, call.call_id, call.name, call.status) == (
                "function_call",
                "call_weather",
                "get_weather",
                "completed",
            )
            assert call.id and call.id.startswith("fc_")
            assert json.loads(call.arguments) == {"city": "Oslo"}
            assert [tool.name for tool in first.tools] == ["get_weather"]

            later_session, later = await respond(
                client, input=[sunny()], previous_response_id=first.id, tools=[WEATHER]
            )
            assert later_session == session
            assert later.output_text == "The client says: sunny, 21 °C."
            assert [item.type for item in later.output] == ["message"]
            fetched = await client.responses.retrieve(first.id)
            assert fetched.output[-1].model_dump() == call.model_dump()
    continued = chat_turns(provider)[-1].messages
    assert continued[-1] == {"role": "tool", "tool_call_id": "call_weather", "content": "sunny, 21 °C"}
    assert continued[-2]["tool_calls"][0]["id"] == "call_weather"


@pytest.mark.parametrize("text", ["", "Let me look that up."])
async def test_a_streamed_call_is_assembled_by_the_sdk_and_its_output_streams_the_answer(redis_url, key_prefix, text):
    async with FakeLLMServer(handler=weather_model(text)) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            client = api.async_client()
            kinds, first = await streamed(client, input=QUESTION, tools=[WEATHER], tool_choice="auto")
            said = [
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
            ]
            assert kinds == [
                "response.created",
                "response.in_progress",
                *(said if text else []),
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.completed",
            ]
            assert first.output_text == text
            *_, call = first.output
            assert (call.type, call.call_id, call.name) == ("function_call", "call_weather", "get_weather")
            assert json.loads(call.arguments) == {"city": "Oslo"}

            echoed = {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments}
            kinds, later = await streamed(
                client, input=[echoed, sunny()], previous_response_id=first.id, tools=[WEATHER]
            )
            assert "response.output_text.delta" in kinds
            assert later.output_text == "The client says: sunny, 21 °C."
    assert len(chat_turns(provider)) == 2


@pytest.mark.parametrize("stream", [False, True])
async def test_an_output_for_no_pending_call_is_400_naming_its_call_id(redis_url, key_prefix, stream):
    async with FakeLLMServer(handler=weather_model()) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            client = api.async_client()
            _, first = await respond(client, input=QUESTION, tools=[WEATHER])
            with pytest.raises(openai.BadRequestError) as refused:
                await client.responses.create(
                    model="m",
                    input=[sunny("call_weather"), sunny("call_nobody_made")],
                    previous_response_id=first.id,
                    tools=[WEATHER],
                    stream=stream,
                )
    assert refused.value.status_code == 400
    assert refused.value.body["param"] == "input[1].call_id"
    assert "call_nobody_made" in refused.value.body["message"]
    assert len(chat_turns(provider)) == 1


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"tools": [WEATHER, {"type": "file_search", "vector_store_ids": []}]}, "tools[1].type"),
        ({"tools": [WEATHER], "tool_choice": "required"}, "tool_choice"),
        ({"input": [{"type": "function_call_output", "output": "sunny"}]}, "input[0].call_id"),
    ],
)
async def test_tools_and_outputs_that_cannot_be_taken_are_400_naming_the_field(redis_url, key_prefix, fields, param):
    async with FakeLLMServer(handler=weather_model()) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            with pytest.raises(openai.BadRequestError) as refused:
                await api.async_client().responses.create(model="m", **{"input": QUESTION, **fields})
    assert refused.value.body["param"] == param
    assert chat_turns(provider) == []


def test_tool_choice_none_offers_no_tools_and_flat_tools_take_the_chat_shape():
    asked = parse_response_request(json.dumps({"model": "m", "input": "hi", "tools": [WEATHER]}).encode())
    (tool,) = asked.as_chat().client_tools
    assert tool == {"type": "function", "function": {key: value for key, value in WEATHER.items() if key != "type"}}
    silent = {"model": "m", "input": "hi", "tools": [WEATHER], "tool_choice": "none"}
    assert parse_response_request(json.dumps(silent).encode()).as_chat().client_tools == ()
