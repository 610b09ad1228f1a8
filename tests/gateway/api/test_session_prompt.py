"""A client's system message is its session's system prompt: sent first in every provider request of the session
instead of the bot's, kept through compaction and restarts, and replaced by a later request's different one."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from gateway.api.sessions import SESSION_HEADER, system_prompt_of
from gateway.config import Settings
from gateway.store import SessionStore, StaleLock
from tests.fakes.api_gateway import api_gateway, api_settings
from tests.fakes.gateway import is_summary_request
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply

BOT_PROMPT = "You are the ops bot of the billing team."
PIRATE = "Answer as a pirate would, in one sentence."
POET = "Answer in rhyme."


def numbered() -> Any:
    count = itertools.count(1)

    def answer(request: RecordedRequest) -> Reply:
        if is_summary_request(request):
            return Reply.answer("Notes: numbered questions about the rollout, each answered.")
        return Reply.answer(f"About {request.last_user_text}: answer {next(count)}.")

    return answer


def chat_turns(provider: FakeLLMServer) -> list[RecordedRequest]:
    return [request for request in provider.requests if request.messages and not is_summary_request(request)]


def systems(request: RecordedRequest) -> list[str]:
    return [str(message.get("content")) for message in request.messages if message["role"] == "system"]


def settings_with_prompt(redis_url: str, key_prefix: str, base_url: str, **options: Any) -> Settings:
    settings = api_settings(redis_url, key_prefix, base_url, **options)
    settings.model.system_prompt = BOT_PROMPT
    return settings


def test_the_prompt_is_the_requests_system_and_developer_messages():
    assert system_prompt_of([{"role": "user", "content": "hi"}]) is None
    messages = [
        {"role": "system", "content": f" {PIRATE} "},
        {"role": "developer", "content": [{"type": "text", "text": POET}]},
        {"role": "user", "content": "hi"},
    ]
    assert system_prompt_of(messages) == f"{PIRATE}\n\n{POET}"


async def test_a_system_message_is_the_sessions_prompt_and_survives_compaction(redis, redis_url, key_prefix):
    async with FakeLLMServer(handler=numbered()) as provider:
        settings = settings_with_prompt(redis_url, key_prefix, provider.openai_base_url, context_length=2048)
        async with api_gateway(settings) as api:
            client = api.async_client()
            history: list[dict[str, Any]] = [{"role": "system", "content": PIRATE}]
            sessions = set()
            for index in range(30):
                history.append({"role": "user", "content": f"Question {index}: what can fail in rollout step {index}?"})
                raw = await client.chat.completions.with_raw_response.create(model="m", messages=history)
                sessions.add(raw.headers[SESSION_HEADER])
                history.append({"role": "assistant", "content": raw.parse().choices[0].message.content})
    assert len(sessions) == 1
    assert any(is_summary_request(request) for request in provider.requests)
    for request in chat_turns(provider):
        assert request.messages[0]["role"] == "system"
        assert systems(request) == [PIRATE]  # the session's prompt alone: not the bot's, not twice
    store = SessionStore(redis, key_prefix)
    chat = f"api:alice/{sessions.pop()}"
    assert (await store.meta(chat, await store.current_session(chat))).system_prompt == PIRATE


async def test_the_newest_system_message_wins_and_outlives_a_restart(redis_url, key_prefix):
    header = {SESSION_HEADER: "poetry"}
    async with FakeLLMServer(handler=numbered()) as provider:
        settings = settings_with_prompt(redis_url, key_prefix, provider.openai_base_url)
        async with api_gateway(settings) as api:
            client = api.async_client()
            for prompt, text in ((None, "zero"), (PIRATE, "one"), (POET, "two"), (None, "three")):
                system = [{"role": "system", "content": prompt}] if prompt else []
                await client.chat.completions.create(
                    model="m", messages=[*system, {"role": "user", "content": text}], extra_headers=header
                )
        async with api_gateway(settings) as api:
            await api.async_client().chat.completions.create(
                model="m", messages=[{"role": "user", "content": "four"}], extra_headers=header
            )
    prompts = {request.last_user_text: systems(request) for request in chat_turns(provider)}
    assert prompts == {
        "zero": [BOT_PROMPT],  # no system message yet: the bot's own
        "one": [PIRATE],
        "two": [POET],
        "three": [POET],  # a request without one keeps the session's
        "four": [POET],  # stored with the session, so a restart keeps it
    }


async def test_a_forked_session_takes_the_prompt_not_a_copy_of_it_in_its_history(redis_url, key_prefix):
    async with FakeLLMServer(handler=numbered()) as provider:
        async with api_gateway(settings_with_prompt(redis_url, key_prefix, provider.openai_base_url)) as api:
            client = api.async_client()
            history: list[dict[str, Any]] = [{"role": "system", "content": PIRATE}]
            for text in ("figs", "dates"):
                history.append({"role": "user", "content": text})
                answer = await client.chat.completions.create(model="m", messages=history)
                history.append({"role": "assistant", "content": answer.choices[0].message.content})
            await client.chat.completions.create(model="m", messages=history[:-1])  # regenerate: a new session
    forked = chat_turns(provider)[-1]
    assert systems(forked) == [PIRATE] and forked.messages[0]["role"] == "system"
    assert [m["content"] for m in forked.messages if m["role"] == "user"] == ["figs", "dates"]


async def test_the_prompt_is_fenced_and_a_rotating_compaction_carries_it(store: SessionStore):
    chat = "api:alice/s_prompt"
    sid = await store.current_session(chat)
    lock = await store.acquire_lock(chat, 30)
    assert lock is not None
    await store.append(chat, sid, [{"role": "user", "content": "hi"}], lock=lock)
    await store.update_meta(chat, sid, lock=lock, system_prompt=PIRATE)
    commit = await store.commit_compaction(
        chat, sid, [{"role": "user", "content": "a summary"}], lock=lock, in_place=False, compaction_id="c1"
    )
    successor = await store.current_session(chat)
    assert successor != sid and commit is not None
    assert (await store.meta(chat, successor)).system_prompt == PIRATE
    await store.release_lock(lock)
    with pytest.raises(StaleLock):  # a lock given back sets no prompt
        await store.update_meta(chat, successor, lock=lock, system_prompt=POET)
    assert (await store.meta(chat, successor)).system_prompt == PIRATE
