"""A refusal's status comes from its kind, told by the worker beside the notice: reworded notices still answer
503 for a provider away and 429 for a budget used up, and a budget's ``Retry-After`` is the time until it resets.
"""

from __future__ import annotations

import openai
import pytest

from gateway.access import budgets
from gateway.api.sessions import SESSION_HEADER
from gateway.worker import failures
from tests.fakes.api_gateway import api_gateway, api_settings
from tests.fakes.llm_server import FakeLLMServer, Reply


async def test_a_reworded_outage_notice_is_still_503(redis_url, key_prefix, monkeypatch):
    monkeypatch.setattr(failures, "waiting_notice", lambda error: "Hold on, the model is napping.")
    async with FakeLLMServer(default=Reply.error(503, "upstream overloaded", kind="server_error")) as provider:
        settings = api_settings(redis_url, key_prefix, provider.openai_base_url, gateway={"outage_retry_seconds": 60})
        settings.model.max_retries = 0
        async with api_gateway(settings) as api:
            with pytest.raises(openai.InternalServerError) as refused:
                await api.async_client().chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hello?"}]
                )
    assert refused.value.status_code == 503
    assert refused.value.body["code"] == "provider_unavailable"
    assert float(refused.value.response.headers["retry-after"]) > 0


async def test_a_reworded_budget_notice_is_still_429_until_the_reset(redis_url, key_prefix, monkeypatch):
    monkeypatch.setattr(budgets, "over_budget", lambda who, limit, usd, tokens, ends: "No more today, sorry.")
    async with FakeLLMServer(default=Reply.answer("fine")) as provider:
        limits = {"budgets": {"per_user": {"tokens": 100, "period": "day"}}}
        settings = api_settings(redis_url, key_prefix, provider.openai_base_url, access=limits)
        async with api_gateway(settings) as api:
            client = api.async_client()
            first = await client.chat.completions.with_raw_response.create(
                model="m", messages=[{"role": "user", "content": "one"}]
            )
            with pytest.raises(openai.RateLimitError) as refused:
                await client.chat.completions.create(
                    model="m",
                    messages=[{"role": "user", "content": "two"}],
                    extra_headers={SESSION_HEADER: first.headers[SESSION_HEADER]},
                )
    assert refused.value.body["code"] == "budget_exceeded"
    assert refused.value.body["message"] == "No more today, sorry."
    assert 0 < float(refused.value.response.headers["retry-after"]) <= 86_400 + 3600  # until the day's budget resets
