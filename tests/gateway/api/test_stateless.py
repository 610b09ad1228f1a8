"""A stateless client (no session header, the whole conversation resent every call) driven by OpenAI's own SDK:
it stays one session, the provider gets foldgate's transcript, and a regenerated or edited turn forks a new
session while the one it came from stays as it was."""

from __future__ import annotations

import itertools
from typing import Any

import openai
from redis.asyncio import Redis

from gateway.api.sessions import SESSION_HEADER
from gateway.store import SessionStore
from tests.fakes.api_gateway import api_gateway, api_settings
from tests.fakes.gateway import is_summary_request
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply

NOTES = "Notes so far: the client asked numbered questions about the rollout and each was answered."


class Numbered:
    """Each answer names its question and is numbered, so a regenerated answer differs from the first one."""

    def __init__(self) -> None:
        self.count = itertools.count(1)

    def __call__(self, request: RecordedRequest) -> Reply:
        if is_summary_request(request):
            return Reply.answer(NOTES)
        return Reply.answer(f"About {request.last_user_text}: answer {next(self.count)}.")


def chat_turns(provider: FakeLLMServer) -> list[RecordedRequest]:
    return [request for request in provider.requests if request.messages and not is_summary_request(request)]


def said(request: RecordedRequest) -> list[tuple[str, str]]:
    """The user and assistant texts a provider request carries, in order."""
    return [(m["role"], str(m.get("content"))) for m in request.messages if m["role"] in ("user", "assistant")]


def as_said(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["role"], str(m["content"])) for m in messages if m["role"] in ("user", "assistant")]


async def ask(client: openai.AsyncOpenAI, messages: list[dict[str, Any]]) -> tuple[str, str]:
    """The session the request went to, and the reply's text (no header is sent)."""
    raw = await client.chat.completions.with_raw_response.create(model="m", messages=messages)
    return raw.headers[SESSION_HEADER], str(raw.parse().choices[0].message.content)


async def converse(client: openai.AsyncOpenAI, questions: list[str]) -> tuple[set[str], list[dict[str, Any]]]:
    """Ask each question resending the whole conversation, as a stateless client does: the sessions the answers
    named, and the conversation as the client holds it."""
    history: list[dict[str, Any]] = []
    sessions = set()
    for question in questions:
        history.append({"role": "user", "content": question})
        session, reply = await ask(client, history)
        sessions.add(session)
        history.append({"role": "assistant", "content": reply})
    return sessions, history


async def stored_count(redis: Redis, key_prefix: str, key: str, session: str) -> int:
    """How many messages the API session's current store session holds."""
    store = SessionStore(redis, key_prefix)
    chat = f"api:{key}/{session}"
    return (await store.meta(chat, await store.current_session(chat))).count


def question(index: int) -> str:
    return f"Question {index}: how does rollout step {index} of the billing migration go, and what can fail there?"


async def test_a_stateless_client_is_one_session_and_the_provider_gets_the_compacted_transcript(redis_url, key_prefix):
    questions = [question(index) for index in range(30)]
    async with FakeLLMServer(handler=Numbered()) as provider:
        settings = api_settings(redis_url, key_prefix, provider.openai_base_url, context_length=2048)
        async with api_gateway(settings) as api:
            sessions, history = await converse(api.async_client(), questions)
    assert len(sessions) == 1
    assert any(is_summary_request(request) for request in provider.requests)  # the session was compacted
    turns = chat_turns(provider)
    assert len(turns) == 30
    for request in turns:  # each question once, in its turn's place: the resent history is never appended
        users = [text for role, text in said(request) if role == "user"]
        assert len(users) == len(set(users))
        assert users[-1] == request.last_user_text
    assert turns[-1].last_user_text == questions[-1]
    assert len(said(turns[-1])) < len(as_said(history)) - 1  # shorter than what the client resent


async def test_a_regenerated_answer_forks_a_new_session_and_leaves_the_old_one_as_it_was(redis, redis_url, key_prefix):
    async with FakeLLMServer(handler=Numbered()) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            client = api.async_client()
            (first,), history = await converse(client, ["figs", "dates", "plums"])
            kept = await stored_count(redis, key_prefix, "alice", first)
            regenerated, again = await ask(client, history[:-1])  # the last answer again
            assert regenerated != first and again != history[-1]["content"]
            assert said(chat_turns(provider)[-1]) == as_said(history[:-1])  # seeded with the client's history
            assert await stored_count(redis, key_prefix, "alice", first) == kept
            # the old conversation goes on in its own session, which never saw the regenerated answer
            later, _ = await ask(client, [*history, {"role": "user", "content": "pears"}])
            assert later == first
            assert said(chat_turns(provider)[-1]) == [*as_said(history), ("user", "pears")]
            # and the regenerated one in the new session
            fork = [*history[:-1], {"role": "assistant", "content": again}, {"role": "user", "content": "kiwis"}]
            assert (await ask(client, fork))[0] == regenerated


async def test_an_edited_turn_forks_from_there(redis, redis_url, key_prefix):
    async with FakeLLMServer(handler=Numbered()) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            client = api.async_client()
            (first,), history = await converse(client, ["one", "two", "three", "four", "five"])
            kept = await stored_count(redis, key_prefix, "alice", first)
            edited = [*history[:4], {"role": "user", "content": "three, put another way"}]
            forked, _ = await ask(client, edited)
            assert forked != first
            assert said(chat_turns(provider)[-1]) == as_said(edited)
            assert await stored_count(redis, key_prefix, "alice", first) == kept
            later, _ = await ask(client, [*history, {"role": "user", "content": "six"}])
    assert later == first


async def test_two_keys_sending_the_same_history_never_share_a_session(redis_url, key_prefix):
    async with FakeLLMServer(handler=Numbered()) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            (alices,), history = await converse(api.async_client("alice"), ["apples", "pears"])
            bobs, _ = await ask(api.async_client("bob"), [*history, {"role": "user", "content": "bob's question"}])
            assert bobs != alices
            later, _ = await ask(api.async_client("alice"), [*history, {"role": "user", "content": "plums"}])
            assert later == alices
            assert said(chat_turns(provider)[-1]) == [*as_said(history), ("user", "plums")]


async def test_a_header_session_is_recorded_so_its_client_may_drop_the_header(redis_url, key_prefix):
    async with FakeLLMServer(handler=Numbered()) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            client = api.async_client()
            header = {SESSION_HEADER: "named-session"}
            asked = [{"role": "user", "content": "apples"}]
            answer = await client.chat.completions.create(model="m", messages=asked, extra_headers=header)
            history = [*asked, {"role": "assistant", "content": answer.choices[0].message.content}]
            session, _ = await ask(client, [*history, {"role": "user", "content": "pears"}])
    assert session == "named-session"
    assert said(chat_turns(provider)[-1]) == [*as_said(history), ("user", "pears")]


async def test_a_streamed_stateless_conversation_is_one_session_too(redis_url, key_prefix):
    async with FakeLLMServer(handler=Numbered()) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            client = api.async_client()
            history: list[dict[str, Any]] = []
            sessions = set()
            for text in ("figs", "dates", "plums"):
                history.append({"role": "user", "content": text})
                raw = await client.chat.completions.with_raw_response.create(model="m", messages=history, stream=True)
                sessions.add(raw.headers[SESSION_HEADER])
                pieces = [chunk.choices[0].delta.content or "" async for chunk in raw.parse() if chunk.choices]
                history.append({"role": "assistant", "content": "".join(pieces)})
    assert len(sessions) == 1
    assert said(chat_turns(provider)[-1]) == as_said(history[:-1])
