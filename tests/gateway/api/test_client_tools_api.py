"""A client's own function tools over the OpenAI-compatible API, driven by OpenAI's SDK: the answer ends with the
model's calls (whole and streamed), the client's next request brings their results and continues the same
session to the final answer, and what cannot be taken is refused naming the field."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from gateway.api.requests import ChatCompletionRequest, new_turn
from gateway.api.sessions import SESSION_HEADER
from tests.fakes.api_gateway import api_gateway, api_settings
from tests.fakes.gateway import is_summary_request
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city, looked up by the client.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
QUESTION = {"role": "user", "content": "What is the weather in Oslo?"}


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


def assistant_with_calls(calls: list[dict[str, Any]], content: str | None = None) -> dict[str, Any]:
    """The assistant message a client resends ahead of its tool results."""
    return {"role": "assistant", "content": content, "tool_calls": calls}


def sunny(call_id: str = "call_weather") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "sunny, 21 °C"}


async def test_a_tool_call_ends_the_answer_and_its_result_continues_the_session(redis_url, key_prefix):
    async with FakeLLMServer(handler=weather_model()) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            client = api.async_client()
            raw = await client.chat.completions.with_raw_response.create(
                model="m", messages=[QUESTION], tools=[WEATHER]
            )
            session, first = raw.headers[SESSION_HEADER], raw.parse()
            choice = first.choices[0]
            assert choice.finish_reason == "tool_calls"
            assert choice.message.content is None
            (call,) = choice.message.tool_calls
            assert (call.id, call.type, call.function.name) == ("call_weather", "function", "get_weather")
            assert json.loads(call.function.arguments) == {"city": "Oslo"}

            calls = [call.model_dump() for call in choice.message.tool_calls]
            later = await client.chat.completions.with_raw_response.create(
                model="m",
                messages=[QUESTION, assistant_with_calls(calls), sunny()],
                tools=[WEATHER],
                extra_headers={SESSION_HEADER: session},
            )
            final = later.parse()
            turns = chat_turns(provider)
    assert later.headers[SESSION_HEADER] == session
    assert final.choices[0].finish_reason == "stop" and final.choices[0].message.tool_calls is None
    assert final.choices[0].message.content == "The client says: sunny, 21 °C."
    assert len(turns) == 2
    continued = turns[-1].messages
    assert [m["role"] for m in continued if m["role"] != "system"] == ["user", "assistant", "tool"]
    assert continued[-1]["tool_call_id"] == "call_weather"


async def test_a_streamed_tool_call_assembles_and_the_sdk_stream_helper_reads_the_rest(redis_url, key_prefix):
    async with FakeLLMServer(handler=weather_model(text="Looking it up.")) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            client = api.async_client()
            raw = await client.chat.completions.with_raw_response.create(
                model="m", messages=[QUESTION], tools=[WEATHER], stream=True, stream_options={"include_usage": True}
            )
            session = raw.headers[SESSION_HEADER]
            chunks = [chunk async for chunk in raw.parse()]
            calls: dict[int, dict[str, Any]] = {}
            for chunk in chunks:
                for piece in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                    call = calls.setdefault(piece.index, {"id": "", "name": "", "arguments": ""})
                    call["id"] += piece.id or ""
                    if piece.function is not None:
                        call["name"] += piece.function.name or ""
                        call["arguments"] += piece.function.arguments or ""
            assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Looking it up."
            assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
                "tool_calls"
            ]
            assert list(calls) == [0] and calls[0]["id"] == "call_weather" and calls[0]["name"] == "get_weather"
            assert json.loads(calls[0]["arguments"]) == {"city": "Oslo"}
            assert chunks[-1].usage.completion_tokens > 0

            function = {"name": calls[0]["name"], "arguments": calls[0]["arguments"]}
            resent = [{"id": calls[0]["id"], "type": "function", "function": function}]
            async with client.chat.completions.stream(
                model="m",
                messages=[QUESTION, assistant_with_calls(resent, "Looking it up."), sunny()],
                tools=[WEATHER],
                extra_headers={SESSION_HEADER: session},
            ) as stream:
                final = await stream.get_final_completion()
    assert final.choices[0].message.content == "The client says: sunny, 21 °C."
    assert final.choices[0].finish_reason == "stop"
    assert [m["role"] for m in chat_turns(provider)[-1].messages if m["role"] != "system"] == [
        "user",
        "assistant",
        "tool",
    ]


async def test_the_sdk_stream_helper_reads_a_tool_call(redis_url, key_prefix):
    async with FakeLLMServer(handler=weather_model()) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            async with api.async_client().chat.completions.stream(
                model="m", messages=[QUESTION], tools=[WEATHER]
            ) as stream:
                final = await stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert [(c.id, c.function.name) for c in choice.message.tool_calls] == [("call_weather", "get_weather")]
    assert json.loads(choice.message.tool_calls[0].function.arguments) == {"city": "Oslo"}


@pytest.mark.parametrize("stream", [False, True])
async def test_a_result_for_no_pending_call_is_400_naming_tool_call_id(redis_url, key_prefix, stream):
    async with FakeLLMServer(handler=weather_model()) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            client = api.async_client()
            raw = await client.chat.completions.with_raw_response.create(
                model="m", messages=[QUESTION], tools=[WEATHER]
            )
            session = raw.headers[SESSION_HEADER]
            calls = [call.model_dump() for call in raw.parse().choices[0].message.tool_calls]
            with pytest.raises(openai.BadRequestError) as refused:
                await client.chat.completions.create(
                    model="m",
                    messages=[QUESTION, assistant_with_calls(calls), sunny("call_nobody_made")],
                    tools=[WEATHER],
                    stream=stream,
                    extra_headers={SESSION_HEADER: session},
                )
    assert refused.value.status_code == 400
    assert refused.value.body["param"] == "tool_call_id"
    assert "call_nobody_made" in refused.value.body["message"]
    assert len(chat_turns(provider)) == 1


async def test_tool_choice_none_offers_no_tools(redis_url, key_prefix):
    async with FakeLLMServer(handler=weather_model()) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            answer = await api.async_client().chat.completions.create(
                model="m", messages=[QUESTION], tools=[WEATHER], tool_choice="none"
            )
            offered = chat_turns(provider)[-1].body.get("tools") or []
    assert answer.choices[0].message.content == "No tools were offered."
    assert "get_weather" not in [tool["function"]["name"] for tool in offered]


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tools": [WEATHER, {"type": "web_search"}]}, "tools[1].type"),
        ({"tools": [{"type": "function", "function": {"name": "no spaces allowed"}}]}, "tools"),
        ({"tools": [WEATHER, WEATHER]}, "tools"),
        ({"tools": [WEATHER], "tool_choice": "required"}, "tool_choice"),
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}, "tool_choice"),
        ({"messages": [QUESTION, {"role": "tool", "content": "sunny"}]}, "messages[1].tool_call_id"),
        ({"messages": [QUESTION, sunny()]}, "messages[1].role"),
    ],
)
async def test_tools_that_cannot_be_taken_are_400_naming_the_field(redis_url, key_prefix, fields, param):
    async with FakeLLMServer(handler=weather_model()) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            body = {"model": "m", "messages": [QUESTION], **fields}
            with pytest.raises(openai.BadRequestError) as refused:
                await api.async_client().post("/chat/completions", body=body, cast_to=object)
    assert refused.value.body["param"] == param
    assert chat_turns(provider) == []


@pytest.mark.parametrize("stream", [False, True])
async def test_a_tool_named_like_one_of_the_bots_own_is_400_naming_tools(redis_url, key_prefix, stream):
    clash = {"type": "function", "function": {"name": "session_search", "parameters": {"type": "object"}}}
    async with FakeLLMServer(handler=weather_model()) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            with pytest.raises(openai.BadRequestError) as refused:
                await api.async_client().chat.completions.create(
                    model="m", messages=[QUESTION], tools=[WEATHER, clash], stream=stream
                )
    assert refused.value.body["param"] == "tools" and "session_search" in refused.value.body["message"]
    assert chat_turns(provider) == []


def test_a_requests_new_turn_is_its_trailing_tool_results_and_user_message():
    calls = [{"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]
    ends_with_results = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [QUESTION, assistant_with_calls(calls), sunny("a"), sunny("b")]}
    )
    turn = new_turn(ends_with_results)
    assert [r.tool_call_id for r in turn.results] == ["a", "b"] and turn.text(ends_with_results) == ""
    then_asks = ChatCompletionRequest.model_validate(
        {
            "model": "m",
            "messages": [QUESTION, assistant_with_calls(calls), sunny("a"), {"role": "user", "content": "And?"}],
        }
    )
    turn = new_turn(then_asks)
    assert [r.content for r in turn.results] == ["sunny, 21 °C"] and turn.text(then_asks) == "And?"
    plain = ChatCompletionRequest.model_validate({"model": "m", "messages": [QUESTION]})
    assert new_turn(plain).results == () and new_turn(plain).text(plain) == QUESTION["content"]
