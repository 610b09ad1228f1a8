"""Requests each model accepts: the rules table, and fakes that refuse what the real providers refuse.

The fake OpenAI server refuses ``max_tokens`` and a non-default ``temperature`` for the
o-series and gpt-5 families with OpenAI's own 400; the fake Anthropic server refuses
``temperature`` for Claude 4.7 and later. No route foldgate has — chat completions on
OpenAI's API or a custom endpoint, the Responses API, the summarizer, the configured
gateway — sends them such a request.
"""

from __future__ import annotations

import logging

import pytest

from agent.compaction.summarizer import LLMSummarizer, build_summarizer
from agent.llm import ChatClient
from agent.llm.errors import ProviderRejected
from agent.llm.responses import ResponsesClient
from agent.llm.retry import RetryPolicy
from agent.models import request_rules
from agent.settings import AuxiliaryModelSettings
from gateway.agents import AgentBuilder
from gateway.config import Settings
from tests.fakes.llm_server import FakeLLMServer
from tests.fakes.responses_server import FakeResponsesServer

HI = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
ONCE = RetryPolicy(max_retries=0)
REASONING = ["gpt-5", "gpt-5-mini", "gpt-5.4", "gpt-5.6-sol", "o3", "o4-mini", "openai/gpt-5.1"]


@pytest.mark.parametrize(
    ("model", "route", "field", "temperature"),
    [
        ("gpt-5", "openai", "max_completion_tokens", False),
        ("o3-mini", "custom", "max_completion_tokens", False),
        ("o4-mini", "openrouter", "max_tokens", False),  # OpenRouter documents max_tokens and translates it
        ("gpt-4o", "openai", "max_completion_tokens", True),  # OpenAI deprecated max_tokens on its own API
        ("gpt-4o", "custom", "max_tokens", True),
        ("claude-opus-4-7", "openrouter", "max_tokens", False),
        ("anthropic/claude-4.7-opus", "openrouter", "max_tokens", False),
        ("claude-sonnet-4-5-20250929", "openrouter", "max_tokens", True),
        ("claude-sonnet-4-5", "anthropic", "max_tokens", False),  # the Messages API takes no sampling parameter
        ("llama-3.3-70b", "custom", "max_tokens", True),
    ],
)
def test_the_rules_table(model, route, field, temperature):
    rules = request_rules(model, route)
    assert (rules.token_limit_field, rules.temperature, rules.known) == (field, temperature, True)


def test_an_unknown_model_gets_the_conservative_default_and_one_log_line(caplog):
    request_rules.cache_clear()
    with caplog.at_level(logging.INFO, logger="agent.models"):
        for _ in range(3):
            rules = request_rules("zephyr-unheard-of", "custom")
    assert not rules.known and not rules.temperature and rules.token_limit_field == "max_tokens"
    lines = [r.getMessage() for r in caplog.records if "zephyr-unheard-of" in r.getMessage()]
    assert len(lines) == 1 and "max_tokens, no temperature" in lines[0]


async def test_the_fake_really_refuses_max_tokens_for_gpt_5():
    """The control: a request shaped for another route is refused the way OpenAI refuses it."""
    async with FakeLLMServer(flavor="openai") as server:
        async with ChatClient(server.openai_base_url, route="openrouter", retry=ONCE) as client:
            with pytest.raises(ProviderRejected) as caught:
                await client.complete(HI, model="gpt-5", max_tokens=10)
    assert "max_completion_tokens" in str(caught.value)


@pytest.mark.parametrize("model", REASONING)
@pytest.mark.parametrize("stream", [False, True])
async def test_no_route_sends_gpt_5_a_request_it_refuses(model, stream):
    async with FakeLLMServer(flavor="openai") as chat, FakeResponsesServer() as responses:
        for route in ("openai", "custom"):
            async with ChatClient(chat.openai_base_url, route=route, stream=stream, retry=ONCE) as client:
                assert (await client.complete(HI, model=model, max_tokens=10, temperature=0.2)).text == "ok"
        summarizer = build_summarizer(
            AuxiliaryModelSettings(),
            main_model=model,
            main_base_url=chat.openai_base_url,
            main_route="openai",
            stream=stream,
        )
        assert summarizer is not None and summarizer.temperature == 0.2
        try:
            assert await summarizer.call_llm(messages=list(HI), max_tokens=10) == "ok"
        finally:
            await summarizer.client.aclose()
        async with ResponsesClient(responses.responses_base_url, route="openai", stream=stream, retry=ONCE) as client:
            assert (await client.complete(HI, model=model, max_tokens=10, temperature=0.2)).text == "ok"
    for request in chat.requests:
        assert "max_tokens" not in request.body and "temperature" not in request.body
        assert request.body["max_completion_tokens"] == 10
    assert "temperature" not in responses.requests[0].body


async def test_the_configured_gateway_sends_gpt_5_what_it_accepts(tmp_path):
    async with FakeLLMServer(flavor="openai") as server:
        settings = Settings(
            model={
                "provider": "openai",
                "name": "gpt-5",
                "api_key": "sk-test",
                "base_url": server.openai_base_url,
                "max_retries": 0,
            },
            gateway={"home": str(tmp_path)},
        )
        builder = AgentBuilder(settings)
        try:
            completion = await builder.chat_model.complete(HI, model="gpt-5", max_tokens=10)
            assert builder.summarizer is not None
            notes = await builder.summarizer.call_llm(messages=list(HI), max_tokens=10)
        finally:
            await builder.aclose()
    assert completion.text == "ok" and notes == "ok"
    assert all("max_tokens" not in r.body and "temperature" not in r.body for r in server.requests)
    assert all(r.body.get("stream") is True for r in server.requests)  # model.stream defaults to true


async def test_claude_4_7_gets_no_temperature_from_the_summarizer():
    async with FakeLLMServer() as server:
        client = ChatClient(server.anthropic_base_url, dialect="anthropic", route="anthropic", retry=ONCE)
        summarizer = LLMSummarizer(client, "claude-opus-4-7", 200_000, temperature=0.2)
        try:
            assert await summarizer.call_llm(messages=list(HI), max_tokens=10) == "ok"
        finally:
            await client.aclose()
    assert "temperature" not in server.requests[0].body


async def test_responses_tools_with_optional_arguments_are_accepted():
    tools = [
        {
            "type": "function",
            "function": {
                "name": "session_search",
                "description": "search",
                "parameters": {
                    "type": "object",
                    "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
                    "required": ["query"],
                },
            },
        }
    ]
    async with FakeResponsesServer() as server:
        async with ResponsesClient(server.responses_base_url, route="openai", retry=ONCE) as client:
            assert (await client.complete(HI, model="gpt-5.6", max_tokens=10, tools=tools)).text == "ok"
    assert server.requests[0].body["tools"][0]["strict"] is False
