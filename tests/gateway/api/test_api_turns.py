"""The API around a turn: a client that leaves mid-stream, a person sending too fast, a provider away, a body
too large, several bots, and the counts on ``/metrics``."""

from __future__ import annotations

import httpx
import openai
import pytest

from gateway.api.sessions import SESSION_HEADER
from tests.fakes.api_gateway import KEYS, api_gateway, api_settings
from tests.fakes.gateway import is_summary_request
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.fakes.waiting import wait_for
from tests.fakes.web import free_port

LONG = "One two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen."


def chat_turns(provider: FakeLLMServer) -> list[RecordedRequest]:
    return [request for request in provider.requests if request.messages and not is_summary_request(request)]


def said(request: RecordedRequest) -> list[tuple[str, str]]:
    return [(m["role"], str(m.get("content"))) for m in request.messages if m["role"] in ("user", "assistant")]


async def test_a_client_leaving_mid_stream_does_not_stop_the_turn(redis_url, key_prefix):
    slow = Reply.answer(LONG, chunk_size=5, event_delay=0.05)
    async with FakeLLMServer(handler=lambda r: slow if r.last_user_text == "first" else Reply.answer("ok")) as provider:
        async with api_gateway(api_settings(redis_url, key_prefix, provider.openai_base_url)) as api:
            client = api.async_client()
            raw = await client.chat.completions.with_raw_response.create(
                model="m", messages=[{"role": "user", "content": "first"}], stream=True
            )
            session = raw.headers[SESSION_HEADER]
            stream = raw.parse()
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    break  # the first piece of text, then the client goes away
            await stream.close()
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "second"}], extra_headers={SESSION_HEADER: session}
            )
            last = chat_turns(provider)[-1]
    assert said(last) == [("user", "first"), ("assistant", LONG), ("user", "second")]
    assert len([r for r in chat_turns(provider) if r.last_user_text == "first"]) == 1


async def test_a_person_over_the_rate_limit_gets_429_with_retry_after(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("fine")) as provider:
        settings = api_settings(redis_url, key_prefix, provider.openai_base_url, access={"messages_per_minute": 1})
        async with api_gateway(settings) as api:
            client = api.async_client()
            first = await client.chat.completions.with_raw_response.create(
                model="m", messages=[{"role": "user", "content": "one"}]
            )
            assert first.parse().choices[0].message.content == "fine"
            again = {SESSION_HEADER: first.headers[SESSION_HEADER]}
            refusals = []
            for text in ("two", "three"):  # every one refused at once, not only the first of the minute
                with pytest.raises(openai.RateLimitError) as refused:
                    await client.chat.completions.create(
                        model="m", messages=[{"role": "user", "content": text}], extra_headers=again
                    )
                refusals.append(refused.value)
            store = api.fleet.front_gateway.store
            chat = f"api:alice/{again[SESSION_HEADER]}"

            async def kept() -> list[str]:
                sid = await store.stored_session(chat)
                said = [str(m.get("content")) for m in await store.active(chat, sid)] if sid else []
                return said if "three" in said else []

            stored = await wait_for(kept, what="the refused messages in the session")
    for refusal in refusals:
        assert refusal.status_code == 429 and refusal.body["code"] == "rate_limit_exceeded"
        assert 1 <= int(refusal.response.headers["retry-after"]) <= 60
    assert stored == ["one", "fine", "two", "three"]  # kept, not answered
    assert [r.last_user_text for r in chat_turns(provider)] == ["one"]


async def test_a_key_over_its_budget_gets_429_every_time(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("fine")) as provider:
        budgets = {"budgets": {"per_user": {"tokens": 100, "period": "day"}}}
        settings = api_settings(redis_url, key_prefix, provider.openai_base_url, access=budgets)
        async with api_gateway(settings) as api:
            client = api.async_client()
            first = await client.chat.completions.with_raw_response.create(
                model="m", messages=[{"role": "user", "content": "one"}]
            )
            assert first.parse().choices[0].message.content.endswith("fine")  # the turn that spends the budget
            session = {SESSION_HEADER: first.headers[SESSION_HEADER]}
            refusals = []
            for text in ("two", "three"):  # told once in the session, then refused without a word: 429 both times
                with pytest.raises(openai.RateLimitError) as refused:
                    await client.chat.completions.create(
                        model="m", messages=[{"role": "user", "content": text}], extra_headers=session
                    )
                refusals.append(refused.value)
    assert [refusal.body["code"] for refusal in refusals] == ["budget_exceeded", "not_answered"]
    assert "budget is used up" in refusals[0].body["message"]
    assert all(refusal.body["type"] == "insufficient_quota" for refusal in refusals)
    assert all(refusal.response.headers["retry-after"] for refusal in refusals)
    assert [r.last_user_text for r in chat_turns(provider)] == ["one"]


async def test_a_blocked_key_is_403_and_its_message_kept(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("fine")) as provider:
        settings = api_settings(redis_url, key_prefix, provider.openai_base_url, access={"blocked": ["api:bob"]})
        async with api_gateway(settings) as api:
            with pytest.raises(openai.PermissionDeniedError) as refused:
                await api.async_client("bob").chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "let me in"}]
                )
            session = refused.value.response.headers[SESSION_HEADER]
            answer = await api.async_client().chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hello"}]
            )
            store = api.fleet.front_gateway.store
            chat = f"api:bob/{session}"

            async def kept() -> bool:
                sid = await store.stored_session(chat)
                return bool(sid) and any(m.get("content") == "let me in" for m in await store.active(chat, sid))

            await wait_for(kept, what="bob's message in his session")
    assert refused.value.status_code == 403 and refused.value.body["code"] == "permission_denied"
    assert answer.choices[0].message.content == "fine"
    assert [r.last_user_text for r in chat_turns(provider)] == ["hello"]


async def test_a_provider_away_is_503_with_retry_after(redis_url, key_prefix):
    failure = Reply.error(503, "upstream overloaded", kind="server_error")
    async with FakeLLMServer(default=failure) as provider:
        settings = api_settings(redis_url, key_prefix, provider.openai_base_url, gateway={"outage_retry_seconds": 60})
        settings.model.max_retries = 0
        async with api_gateway(settings) as api:
            with pytest.raises(openai.InternalServerError) as refused:
                await api.async_client().chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hello?"}]
                )
    assert refused.value.status_code == 503
    assert refused.value.response.headers["retry-after"] == "30"
    assert refused.value.body["code"] == "provider_unavailable"


async def test_a_body_over_the_limit_is_413(redis_url, key_prefix):
    async with FakeLLMServer() as provider:
        settings = api_settings(
            redis_url, key_prefix, provider.openai_base_url, media={"max_bytes": 1024, "max_total_bytes": 4096}
        )
        async with api_gateway(settings) as api:
            with pytest.raises(openai.APIStatusError) as refused:
                await api.async_client().chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "x" * 200_000}]
                )
    assert refused.value.status_code == 413
    assert refused.value.body["code"] == "request_too_large"


async def test_with_several_bots_the_model_names_the_bot(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("hi")) as provider:
        settings = api_settings(
            redis_url,
            key_prefix,
            provider.openai_base_url,
            bots=[{"name": "one"}, {"name": "two", "platforms": {"local": {"enabled": False}}}],
        )
        async with api_gateway(settings) as api:
            client = api.async_client()
            assert [model.id for model in (await client.models.list()).data] == ["one", "two"]
            answer = await client.chat.completions.create(model="two", messages=[{"role": "user", "content": "a"}])
            assert answer.model == "two" and answer.choices[0].message.content == "hi"
            with pytest.raises(openai.NotFoundError) as refused:
                await client.chat.completions.create(model="three", messages=[{"role": "user", "content": "a"}])
    assert refused.value.body["param"] == "model" and refused.value.body["code"] == "model_not_found"


async def test_requests_are_counted_on_metrics(redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("counted")) as provider:
        settings = api_settings(redis_url, key_prefix, provider.openai_base_url, gateway={"metrics_port": free_port()})
        async with api_gateway(settings) as api:
            await api.async_client().chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
            with pytest.raises(openai.AuthenticationError):
                await api.async_client("no-such-key-0123456789abcdef").models.list()
            metrics_url = api.servers.addresses["operator view"].removesuffix("/admin") + "/metrics"
            async with httpx.AsyncClient() as plain:
                scraped = (await plain.get(metrics_url)).text
    assert 'foldgate_api_requests_total{endpoint="/v1/chat/completions",status="200"} 1.0' in scraped
    assert 'foldgate_api_requests_total{endpoint="/v1/models",status="401"} 1.0' in scraped
    assert KEYS["alice"] not in scraped
