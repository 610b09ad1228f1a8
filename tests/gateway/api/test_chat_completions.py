"""The OpenAI-compatible API driven by OpenAI's own SDK: answers whole and streamed, sessions, keys, and the
requests it refuses."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from gateway.api.sessions import SESSION_HEADER
from tests.fakes.api_gateway import api_gateway, api_settings
from tests.fakes.gateway import is_summary_request
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply

ANSWER = "The login timeout fix is in PR 4711, merged after the overnight run went green."


def answered_by_topic(request: RecordedRequest) -> Reply:
    """Each answer names the question it answers, so a transcript shows which turn is which."""
    return Reply.answer(f"About {request.last_user_text}: noted.")


def chat_turns(provider: FakeLLMServer) -> list[RecordedRequest]:
    return [request for request in provider.requests if request.messages and not is_summary_request(request)]


def said(request: RecordedRequest) -> list[tuple[str, str]]:
    """The user and assistant texts a provider request carries, in order."""
    return [(m["role"], str(m.get("content"))) for m in request.messages if m["role"] in ("user", "assistant")]


async def test_a_plain_turn_with_the_sync_client(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer(ANSWER)) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            client = api.client()
            raw = await asyncio.to_thread(
                client.chat.completions.with_raw_response.create,
                model="anything",
                messages=[{"role": "user", "content": "Which PR holds the login fix?"}],
            )
            answer = raw.parse()
            assert raw.headers[SESSION_HEADER].startswith("s_")
            assert answer.object == "chat.completion" and answer.model == "test-model"
            assert answer.choices[0].message.role == "assistant"
            assert answer.choices[0].message.content == ANSWER
            assert answer.choices[0].finish_reason == "stop"
            assert answer.usage.completion_tokens > 0
            assert answer.usage.total_tokens == answer.usage.prompt_tokens + answer.usage.completion_tokens
            assert chat_turns(provider)[-1].last_user_text == "Which PR holds the login fix?"


async def test_a_streamed_turn_assembles_to_the_reply_and_ends_with_usage(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer(ANSWER, chunk_size=6, event_delay=0.02)) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            raw = await api.async_client().chat.completions.with_raw_response.create(
                model="test-model",
                messages=[{"role": "user", "content": "Which PR?"}],
                stream=True,
                stream_options={"include_usage": True},
            )
            assert raw.headers[SESSION_HEADER].startswith("s_")
            chunks = [chunk async for chunk in raw.parse()]
    assert chunks[0].choices[0].delta.role == "assistant"
    content = [chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices]
    assert "".join(content) == ANSWER
    assert len([piece for piece in content if piece]) >= 2  # it came in pieces, as it was written
    finishes = [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices]
    assert finishes[-1] == "stop" and finishes.count("stop") == 1
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0


async def test_the_session_header_continues_one_session_from_foldgates_transcript(redis_url, key_prefix):
    async with FakeLLMServer(handler=answered_by_topic) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            client = api.async_client()
            first = await client.chat.completions.with_raw_response.create(
                model="m", messages=[{"role": "user", "content": "apples"}]
            )
            session = first.headers[SESSION_HEADER]
            for topic in ("pears", "plums"):  # the client sends only its newest message
                later = await client.chat.completions.with_raw_response.create(
                    model="m", messages=[{"role": "user", "content": topic}], extra_headers={SESSION_HEADER: session}
                )
                assert later.headers[SESSION_HEADER] == session
            last = chat_turns(provider)[-1]
    assert said(last) == [
        ("user", "apples"),
        ("assistant", "About apples: noted."),
        ("user", "pears"),
        ("assistant", "About pears: noted."),
        ("user", "plums"),
    ]


async def test_two_keys_with_the_same_header_are_two_sessions(redis_url, key_prefix):
    async with FakeLLMServer(handler=answered_by_topic) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            header = {SESSION_HEADER: "shared-name"}
            for key, topic in (("alice", "alice's secret"), ("bob", "bob's question")):
                await api.async_client(key).chat.completions.create(
                    model="m", messages=[{"role": "user", "content": topic}], extra_headers=header
                )
            bobs = chat_turns(provider)[-1]
    assert said(bobs) == [("user", "bob's question")]


async def test_a_session_header_that_is_no_session_id_is_refused_by_name(redis_url, key_prefix):
    async with FakeLLMServer() as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            with pytest.raises(openai.BadRequestError) as refused:
                await api.async_client().chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}], extra_headers={SESSION_HEADER: "a b"}
                )
    assert refused.value.body["param"] == SESSION_HEADER


async def test_a_wrong_or_missing_key_is_401(redis_url, key_prefix):
    async with FakeLLMServer() as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            with pytest.raises(openai.AuthenticationError) as refused:
                await api.async_client("not-a-key-of-this-gateway-at-all").chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}]
                )
            assert refused.value.status_code == 401
            assert refused.value.body["code"] == "invalid_api_key"
            assert refused.value.body["type"] == "invalid_request_error"
            with pytest.raises(openai.AuthenticationError):
                await api.async_client("wrong-key-0123456789abcdefgh").models.list()
            async with httpx.AsyncClient() as plain:  # no key at all (the SDK insists on one)
                missing = await plain.post(f"{api.base_url}/chat/completions", json={"model": "m", "messages": []})
            assert missing.status_code == 401 and missing.json()["error"]["code"] == "invalid_api_key"
    assert chat_turns(provider) == []


@pytest.mark.parametrize(
    ("request_body", "param"),
    [
        ({"model": "m", "messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
        ({"model": "m", "messages": []}, "messages"),
        ({"model": "m"}, "messages"),
        ({"model": "m", "messages": [{"role": "user", "content": 7}]}, "messages[0].content"),
        ({"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 2}, "n"),
        ({"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}, "tools"),
        ({"model": "m", "messages": [{"role": "assistant", "content": "hi"}]}, "messages[0].role"),
        (
            {
                "model": "m",
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}],
                    }
                ],
            },
            "messages[0].content[0]",
        ),
    ],
)
async def test_a_malformed_or_unsupported_request_is_400_naming_the_field(redis_url, key_prefix, request_body, param):
    async with FakeLLMServer() as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            with pytest.raises(openai.BadRequestError) as refused:
                await api.async_client().post("/chat/completions", body=request_body, cast_to=object)
    assert refused.value.status_code == 400
    assert refused.value.body["param"] == param
    assert refused.value.body["type"] == "invalid_request_error"
    assert chat_turns(provider) == []


async def test_text_parts_are_read_as_the_message(redis_url, key_prefix):
    async with FakeLLMServer(handler=answered_by_topic) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            answer = await api.async_client().chat.completions.create(
                model="m",
                messages=[
                    {"role": "user", "content": [{"type": "text", "text": "figs"}, {"type": "text", "text": "dates"}]}
                ],
            )
    assert answer.choices[0].message.content == "About figs\ndates: noted."


async def test_models_lists_the_bot(redis_url, key_prefix):
    async with FakeLLMServer() as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            models = await asyncio.to_thread(api.client().models.list)
    assert [model.id for model in models.data] == ["test-model"]
    assert models.data[0].object == "model"
