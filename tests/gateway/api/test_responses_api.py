"""The Responses API on the API's sessions, driven by OpenAI's own SDK: a chain of responses is one session, an
earlier response forks a new one and leaves the old as it was, a conversation is shared by its clients, streams
assemble in the SDK, kept responses are retrieved, and what is not found is a 404 in OpenAI's shape."""

from __future__ import annotations

import base64
import io
import itertools
from typing import Any

import openai
import pytest
from openai.types.responses import Response
from PIL import Image
from redis.asyncio import Redis

from agent.messages import is_summary
from gateway.api.sessions import SESSION_HEADER
from gateway.session_source import conversation_messages
from gateway.store import SessionStore
from tests.fakes.api_gateway import api_gateway, api_settings
from tests.fakes.gateway import is_summary_request
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply

PIRATE = "Answer as a pirate would, in one sentence."


class Numbered:
    """Each answer names its question and is numbered, so every answer differs."""

    def __init__(self) -> None:
        self.count = itertools.count(1)

    def __call__(self, request: RecordedRequest) -> Reply:
        if is_summary_request(request):
            return Reply.answer("Notes: numbered questions, each answered.")
        return Reply.answer(f"About {request.last_user_text}: answer {next(self.count)}.")


def chat_turns(provider: FakeLLMServer) -> list[RecordedRequest]:
    return [request for request in provider.requests if request.messages and not is_summary_request(request)]


def said(request: RecordedRequest) -> list[tuple[str, str]]:
    """The user and assistant texts a provider request carries, in order."""
    return [(m["role"], str(m.get("content"))) for m in request.messages if m["role"] in ("user", "assistant")]


async def respond(client: openai.AsyncOpenAI, **asked: Any) -> tuple[str, Response]:
    """The session the request went to, and the response (checked against the SDK's own model)."""
    raw = await client.responses.with_raw_response.create(model="m", **asked)
    Response.model_validate(raw.http_response.json())  # every field the SDK's model requires is there
    return raw.headers[SESSION_HEADER], raw.parse()


async def stored_count(redis: Redis, key_prefix: str, key: str, session: str) -> int:
    store = SessionStore(redis, key_prefix)
    chat = f"api:{key}/{session}"
    return (await store.meta(chat, await store.current_session(chat))).count


async def chain(client: openai.AsyncOpenAI, questions: list[str]) -> tuple[set[str], list[Response]]:
    """Ask each question continuing from the previous response: the sessions named, and the responses."""
    sessions, responses = set(), []
    for question in questions:
        previous = responses[-1].id if responses else None
        session, response = await respond(client, input=question, previous_response_id=previous)
        sessions.add(session)
        responses.append(response)
    return sessions, responses


def question(index: int) -> str:
    return f"Question {index}: how does rollout step {index} of the billing migration go, and what can fail there?"


async def test_a_chain_of_responses_is_one_session_and_the_provider_gets_its_transcript(redis_url, key_prefix):
    questions = [question(index) for index in range(50)]
    async with FakeLLMServer(handler=Numbered()) as provider:
        settings = api_settings(redis_url, key_prefix, provider.openai_base_url, context_length=2048)
        async with api_gateway(settings) as api:
            sessions, responses = await chain(api.async_client(), questions)
    assert len(sessions) == 1
    last = responses[-1]
    assert last.status == "completed" and last.object == "response" and last.id.startswith("resp_")
    assert last.output[0].type == "message" and last.output[0].id.startswith("msg_")
    assert last.usage is not None and last.usage.total_tokens > 0
    assert any(is_summary_request(request) for request in provider.requests)  # the session was compacted
    turns = chat_turns(provider)
    assert [turn.last_user_text for turn in turns] == questions
    for turn, response in zip(turns[1:], responses):  # each turn's transcript ends with the answer before it
        assert said(turn)[-2] == ("assistant", response.output_text)


async def test_a_fork_is_seeded_with_what_was_said_up_to_its_response_archive_included(redis, redis_url, key_prefix):
    questions = [question(index) for index in range(24)]
    async with FakeLLMServer(handler=Numbered()) as provider:
        settings = api_settings(redis_url, key_prefix, provider.openai_base_url, context_length=2048)
        async with api_gateway(settings) as api:
            client = api.async_client()
            (first,), responses = await chain(client, questions)
            assert any(is_summary_request(request) for request in provider.requests)
            forked, _ = await respond(client, input="And step 5 again?", previous_response_id=responses[4].id)
    assert forked != first
    store = SessionStore(redis, key_prefix)
    chat = f"api:alice/{forked}"
    seeded = [m for m in await conversation_messages(store, chat, await store.current_session(chat))]
    originals = [(m["role"], m["content"]) for m in seeded if not is_summary(m) and "_orig_id" not in m]
    expected = [pair for q, r in zip(questions[:5], responses) for pair in (("user", q), ("assistant", r.output_text))]
    assert originals[: len(expected) + 1] == [*expected, ("user", "And step 5 again?")]


async def test_an_earlier_response_forks_and_the_old_session_stays_as_it_was(redis, redis_url, key_prefix):
    async with FakeLLMServer(handler=Numbered()) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            client = api.async_client()
            first, one = await respond(client, input="figs")
            _, two = await respond(client, input="dates", previous_response_id=one.id)
            _, three = await respond(client, input="plums", previous_response_id=two.id)
            kept = await stored_count(redis, key_prefix, "alice", first)
            forked, branch = await respond(client, input="kiwis", previous_response_id=one.id)
            assert forked != first
            assert said(chat_turns(provider)[-1]) == [
                ("user", "figs"),
                ("assistant", one.output_text),
                ("user", "kiwis"),
            ]
            assert await stored_count(redis, key_prefix, "alice", first) == kept
            # both go on: the old session from its latest response, the fork from its own
            again, _ = await respond(client, input="pears", previous_response_id=three.id)
            assert again == first
            assert said(chat_turns(provider)[-1])[-2:] == [("assistant", three.output_text), ("user", "pears")]
            later, _ = await respond(client, input="limes", previous_response_id=branch.id)
            assert later == forked


async def test_one_conversation_used_by_two_clients_is_one_session(redis_url, key_prefix):
    async with FakeLLMServer(handler=Numbered()) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            first, apples = await respond(api.async_client(), input="apples", conversation="conv-shared")
            second, _ = await respond(api.async_client(), input="pears", conversation={"id": "conv-shared"})
    assert first == second == "conv-shared"
    assert apples.conversation is not None and apples.conversation.id == "conv-shared"
    assert said(chat_turns(provider)[-1]) == [("user", "apples"), ("assistant", apples.output_text), ("user", "pears")]


async def test_a_response_streams_through_the_sdks_helper_and_by_iteration(redis_url, key_prefix):
    async with FakeLLMServer(handler=Numbered()) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            client = api.async_client()
            async with client.responses.stream(model="m", input="figs") as stream:
                deltas = [event.delta async for event in stream if event.type == "response.output_text.delta"]
                final = await stream.get_final_response()
            assert final.output_text == "About figs: answer 1." == "".join(deltas)
            events = [event async for event in await client.responses.create(model="m", input="dates", stream=True)]
            kinds = [event.type for event in events]
            assert kinds[:4] == [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
            ]
            assert kinds[-4:] == [
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed",
            ]
            assert [event.sequence_number for event in events] == list(range(len(events)))
            completed = events[-1].response
            assert completed.output_text == "About dates: answer 2."
            # a streamed response is kept like any other: it continues its session
            _, after = await respond(client, input="plums", previous_response_id=completed.id)
            assert (await client.responses.retrieve(completed.id)).output_text == completed.output_text
    assert said(chat_turns(provider)[-1]) == [
        ("user", "dates"),
        ("assistant", completed.output_text),
        ("user", "plums"),
    ]
    assert after.previous_response_id == completed.id


async def test_a_kept_response_is_retrieved_and_the_rest_are_not_found(redis_url, key_prefix):
    async with FakeLLMServer(handler=Numbered()) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            client = api.async_client()
            session, kept = await respond(client, input="figs")
            raw = await client.responses.with_raw_response.retrieve(kept.id)
            assert raw.headers[SESSION_HEADER] == session
            assert raw.parse().model_dump() == kept.model_dump()
            _, unkept = await respond(client, input="dates", store=False)
            assert unkept.output_text and unkept.store is False
            for missing in (unkept.id, "resp_" + "0" * 32, "nonsense"):
                with pytest.raises(openai.NotFoundError):
                    await client.responses.retrieve(missing)
            with pytest.raises(openai.NotFoundError):  # another key's
                await api.async_client("bob").responses.retrieve(kept.id)
            for previous in (unkept.id, "resp_" + "1" * 32):
                with pytest.raises(openai.NotFoundError) as refused:
                    await respond(client, input="plums", previous_response_id=previous)
                assert refused.value.body["param"] == "previous_response_id"
            with pytest.raises(openai.NotFoundError):
                await respond(api.async_client("bob"), input="plums", previous_response_id=kept.id)


async def test_instructions_are_the_sessions_prompt(redis_url, key_prefix):
    async with FakeLLMServer(handler=Numbered()) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            client = api.async_client()
            _, first = await respond(client, input="figs", instructions=PIRATE)
            assert first.instructions == PIRATE
            _, second = await respond(client, input="dates", previous_response_id=first.id)
            _, forked = await respond(client, input="plums", previous_response_id=first.id)  # a fork keeps it too
    for request in chat_turns(provider):
        assert [m["content"] for m in request.messages if m["role"] == "system"] == [PIRATE]
    assert len(chat_turns(provider)) == 3


async def test_history_in_the_input_seeds_a_new_session_and_unsupported_items_are_refused(redis_url, key_prefix):
    async with FakeLLMServer(handler=Numbered()) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            client = api.async_client()
            history = [
                {"role": "user", "content": "figs"},
                {"role": "assistant", "content": [{"type": "output_text", "text": "Figs are sweet."}]},
                {"role": "user", "content": [{"type": "input_text", "text": "dates?"}]},
            ]
            _, answered = await respond(client, input=history)
            assert said(chat_turns(provider)[-1]) == [
                ("user", "figs"),
                ("assistant", "Figs are sweet."),
                ("user", "dates?"),
            ]
            with pytest.raises(openai.BadRequestError) as refused:
                await respond(client, input=[{"type": "item_reference", "id": "msg_1"}])
            assert refused.value.body["param"] == "input[0].type"
            with pytest.raises(openai.BadRequestError) as refused:
                await respond(client, input=history, previous_response_id=answered.id)
            assert refused.value.body["param"] == "input"


async def test_an_input_image_reaches_the_provider_with_the_message(redis_url, key_prefix):
    buffer = io.BytesIO()
    Image.new("RGB", (16, 16), (200, 30, 30)).save(buffer, format="PNG")
    url = f"data:image/png;base64,{base64.b64encode(buffer.getvalue()).decode()}"
    parts = [{"type": "input_text", "text": "What is in this picture?"}, {"type": "input_image", "image_url": url}]
    async with FakeLLMServer(default=Reply.answer("A red square.")) as provider:
        settings = api_settings(redis_url, key_prefix, provider.openai_base_url, media={"max_bytes": 4096})
        async with api_gateway(settings) as api:
            _, answer = await respond(api.async_client(), input=[{"role": "user", "content": parts}])
    assert answer.output_text == "A red square."
    sent = chat_turns(provider)[-1].messages[-1]
    assert "What is in this picture?" in str(sent["content"])
    assert "image_url" in [part["type"] for part in sent["content"]]


async def test_a_provider_away_is_503_whole_and_an_error_event_streamed(redis_url, key_prefix):
    failure = Reply.error(503, "upstream overloaded", kind="server_error")
    async with FakeLLMServer(default=failure) as provider:
        settings = api_settings(redis_url, key_prefix, provider.openai_base_url, gateway={"outage_retry_seconds": 60})
        settings.model.max_retries = 0
        async with api_gateway(settings) as api:
            client = api.async_client()
            with pytest.raises(openai.InternalServerError) as refused:
                await respond(client, input="hello?")
            assert refused.value.status_code == 503 and refused.value.body["code"] == "provider_unavailable"
            with pytest.raises(openai.APIError) as failed:
                async with client.responses.stream(model="m", input="still there?") as stream:
                    async for _event in stream:  # the error event is raised as the SDK reads it
                        pass
    assert failed.value.body["code"] == "provider_unavailable"
