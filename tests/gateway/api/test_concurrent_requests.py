"""Requests sent at once on one session: each waits for its own answer, so each is its own turn, in the order
the requests were handed in, and none is answered by another's reply."""

from __future__ import annotations

import asyncio

from gateway.api.sessions import SESSION_HEADER
from tests.fakes.api_gateway import ApiGateway, api_gateway, api_settings
from tests.fakes.gateway import is_summary_request
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.fakes.waiting import wait_for

SESSION = "s_together"


def answered_slowly(request: RecordedRequest) -> Reply:
    """Each answer names its question, and takes long enough for the next requests to queue behind it."""
    return Reply.slow(0.3, Reply.answer(f"About {request.last_user_text}."))


def chat_turns(provider: FakeLLMServer) -> list[RecordedRequest]:
    return [request for request in provider.requests if request.messages and not is_summary_request(request)]


async def ask(api: ApiGateway, text: str) -> str:
    answer = await api.async_client().chat.completions.create(
        model="m", messages=[{"role": "user", "content": text}], extra_headers={SESSION_HEADER: SESSION}
    )
    return str(answer.choices[0].message.content)


async def waiting_entries(api: ApiGateway) -> int:
    gateway = api.fleet.front_gateway
    assert gateway is not None
    return len(await gateway.runner.inbox.waiting(f"api:alice/{SESSION}", 100))


async def session_texts(api: ApiGateway) -> list[str]:
    gateway = api.fleet.front_gateway
    assert gateway is not None
    chat = f"api:alice/{SESSION}"
    sid = await gateway.store.stored_session(chat)
    assert sid
    return [str(m.get("content")) for m in await gateway.store.active(chat, sid) if m.get("role") != "system"]


async def asked_in_order(api: ApiGateway, questions: list[str]) -> list[str]:
    """The answers of ``questions`` sent at once, each handed in after the one before it (so the session's order
    is known) while the first one's turn still runs (so the later ones wait behind it together)."""
    tasks: list[asyncio.Task[str]] = []
    for count, question in enumerate(questions, start=1):
        tasks.append(asyncio.create_task(ask(api, question)))

        async def handed_in(count: int = count) -> bool:
            return await waiting_entries(api) >= count or any(task.done() for task in tasks)

        await wait_for(handed_in, what=f"request {count} in the session's inbox")
    return list(await asyncio.gather(*tasks))


async def test_two_requests_at_once_on_one_session_are_both_answered(redis_url, key_prefix):
    async with FakeLLMServer(handler=answered_slowly) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            first, second = await asyncio.gather(ask(api, "apples"), ask(api, "pears"))
            texts = await session_texts(api)
    assert (first, second) == ("About apples.", "About pears.")
    assert sorted(r.last_user_text for r in chat_turns(provider)) == ["apples", "pears"]
    assert sorted(texts) == sorted(["apples", "About apples.", "pears", "About pears."])


async def test_five_requests_waiting_together_are_five_turns_in_order(redis_url, key_prefix):
    questions = ["one", "two", "three", "four", "five"]
    async with FakeLLMServer(handler=answered_slowly) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            answers = await asked_in_order(api, questions)
            texts = await session_texts(api)
    assert answers == [f"About {q}." for q in questions]
    assert [r.last_user_text for r in chat_turns(provider)] == questions
    assert texts == [text for q in questions for text in (q, f"About {q}.")]
