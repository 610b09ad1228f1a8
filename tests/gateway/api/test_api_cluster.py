"""Every process of a cluster serves the API, and any of them answers any session: a session lives in Redis, and
the reply reaches the process holding the HTTP request through the session's live events, whichever process ran
the turn. The client is OpenAI's own SDK; the second process is a real OS process on the same Redis and prefix."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import subprocess
from collections.abc import AsyncIterator
from typing import Any

import openai
from redis.asyncio import Redis

from gateway.api.sessions import SESSION_HEADER
from gateway.store import SessionStore
from gateway.store.inbox import Inbox
from tests.fakes.api_gateway import KEYS, ApiGateway, api_gateway, api_settings
from tests.fakes.api_process import servers_key, start_api_process
from tests.fakes.gateway import is_summary_request
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.fakes.waiting import wait_for
from tests.fakes.workers import _count, start_worker, stop

ANSWER = "The login timeout fix is in PR 4711, merged after the overnight run went green."
TOPICS = ["apples", "pears", "plums", "figs", "cherries"]
#: Generous for a process that imports the whole gateway on a busy machine; only a hang ever reaches it.
START_PATIENCE = 60.0


def answered_by_topic(request: RecordedRequest) -> Reply:
    """Each answer names the question it answers, so a transcript shows which turn is which."""
    return Reply.answer(f"About {request.last_user_text}: noted.")


def chat_turns(provider: FakeLLMServer) -> list[RecordedRequest]:
    return [request for request in provider.requests if request.messages and not is_summary_request(request)]


def said(request: RecordedRequest) -> list[tuple[str, str]]:
    """The user and assistant texts a provider request carries, in order."""
    return [(m["role"], str(m.get("content"))) for m in request.messages if m["role"] in ("user", "assistant")]


def conversation(topics: list[str]) -> list[tuple[str, str]]:
    return [pair for topic in topics for pair in (("user", topic), ("assistant", f"About {topic}: noted."))]


def client_at(base_url: str, closed_with: ApiGateway, key: str = "alice") -> openai.AsyncOpenAI:
    """A client of another process's API, closed with the gateway ``closed_with`` (never left to the collector)."""
    client = openai.AsyncOpenAI(base_url=base_url, api_key=KEYS[key], max_retries=0)
    closed_with.clients.append(client)
    return client


async def stored(redis: Redis, prefix: str, session: str, key: str = "alice") -> list[tuple[str, str]]:
    """The user and assistant texts of the API session's transcript, in order, as Redis holds them."""
    store = SessionStore(redis, prefix)
    chat = f"api:{key}/{session}"
    sid = await store.stored_session(chat)
    assert sid, f"nothing stored for {chat}"
    return [(str(m["role"]), str(m.get("content"))) for m in await store.active(chat, sid) if m["role"] != "system"]


async def _announced(redis: Redis, prefix: str, process: subprocess.Popen) -> str | None:
    """The API base URL the process announced once it serves; raises if it ended before it did."""
    if process.poll() is not None:
        raise AssertionError(f"the API process ended before serving (exit {process.returncode})")
    return await redis.lindex(servers_key(prefix), 0)


@contextlib.asynccontextmanager
async def api_process(redis: Redis, redis_url: str, prefix: str, provider: FakeLLMServer) -> AsyncIterator[str]:
    """Another gateway process serving the API on the same Redis and prefix; yields its API's base URL."""
    process = start_api_process(redis_url, prefix, provider.openai_base_url)
    try:
        yield await wait_for(
            lambda: _announced(redis, prefix, process), timeout=START_PATIENCE, what="the API process serving"
        )
    finally:
        # In a thread: the process may be finishing a turn whose provider is served by this loop.
        await asyncio.to_thread(stop, process)


@contextlib.asynccontextmanager
async def worker_process(redis: Redis, redis_url: str, prefix: str, provider: FakeLLMServer) -> AsyncIterator[None]:
    """A gateway worker process (no API server of its own) on the same Redis and prefix, once it takes chats."""
    worker = start_worker(redis_url, prefix, provider.openai_base_url)
    try:
        await wait_for(lambda: _count(redis, f"{prefix}:workers", 1), timeout=START_PATIENCE, what="the worker up")
        yield
    finally:
        await asyncio.to_thread(stop, worker)


async def test_two_api_processes_take_turns_on_one_session(redis, redis_url, key_prefix):
    session = "s_alternating"
    async with FakeLLMServer(handler=answered_by_topic) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as here:
            async with api_process(redis, redis_url, key_prefix, provider) as there:
                assert there != here.base_url
                clients = itertools.cycle([here.async_client(), client_at(there, here)])
                for topic in TOPICS:  # the client sends only its newest message, to each port in turn
                    raw = await next(clients).chat.completions.with_raw_response.create(
                        model="m",
                        messages=[{"role": "user", "content": topic}],
                        extra_headers={SESSION_HEADER: session},
                    )
                    assert raw.headers[SESSION_HEADER] == session
                    assert raw.parse().choices[0].message.content == f"About {topic}: noted."
                transcript = await stored(redis, key_prefix, session)
    assert transcript == conversation(TOPICS)
    assert [request.last_user_text for request in chat_turns(provider)] == TOPICS
    assert said(chat_turns(provider)[-1]) == conversation(TOPICS)[:-1]


async def waiting_in_inbox(redis: Redis, prefix: str, chat: str) -> int:
    """How many of the chat's messages wait in its inbox (or have their turn running)."""
    return len(await Inbox(redis, prefix).waiting(chat, 100))


async def test_a_turn_asked_on_an_api_only_process_is_run_by_a_worker_process(redis, redis_url, key_prefix):
    session, chat = "s_crossing", "api:alice/s_crossing"
    header = {SESSION_HEADER: session}
    async with FakeLLMServer(default=Reply.answer(ANSWER, chunk_size=6, event_delay=0.05)) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            gateway = api.fleet.front_gateway
            assert gateway is not None
            # This process goes on serving HTTP and taking messages in, but runs no turn any more.
            await gateway.runner.stop(grace_seconds=0)
            client = api.async_client()
            whole = asyncio.create_task(
                client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "Which PR?"}], extra_headers=header
                )
            )
            await wait_for(lambda: waiting_in_inbox(redis, key_prefix, chat), what="the question in the inbox")
            assert not whole.done() and chat_turns(provider) == []  # nobody here can answer it
            async with worker_process(redis, redis_url, key_prefix, provider):
                answer = await whole
                streamed = await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "And again?"}], extra_headers=header, stream=True
                )
                chunks = [chunk async for chunk in streamed]
            assert gateway.runner.busy_chats == 0
    assert answer.choices[0].message.content == ANSWER
    content = [chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices]
    assert "".join(content) == ANSWER
    assert len([piece for piece in content if piece]) >= 2  # previews crossed over as they were written
    assert [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices][-1] == "stop"
    assert [request.last_user_text for request in chat_turns(provider)] == ["Which PR?", "And again?"]


async def ask_without_header(client: openai.AsyncOpenAI, messages: list[dict[str, Any]]) -> tuple[str, str]:
    """The session the request went to and the reply's text; no session header is sent."""
    raw = await client.chat.completions.with_raw_response.create(model="m", messages=messages)
    return raw.headers[SESSION_HEADER], str(raw.parse().choices[0].message.content)


async def test_a_stateless_client_alternating_between_processes_stays_one_session(redis, redis_url, key_prefix):
    async with FakeLLMServer(handler=answered_by_topic) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as here:
            async with api_process(redis, redis_url, key_prefix, provider) as there:
                clients = itertools.cycle([client_at(there, here), here.async_client()])
                history: list[dict[str, Any]] = []
                sessions = set()
                for topic in TOPICS:  # the whole conversation resent every call, to each port in turn
                    history.append({"role": "user", "content": topic})
                    session, reply = await ask_without_header(next(clients), history)
                    sessions.add(session)
                    history.append({"role": "assistant", "content": reply})
                (session,) = sessions
                transcript = await stored(redis, key_prefix, session)
    assert transcript == conversation(TOPICS)
    assert said(chat_turns(provider)[-1]) == conversation(TOPICS)[:-1]
