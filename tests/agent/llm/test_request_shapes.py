"""Every request body foldgate sends fits the official SDKs' request types (``tests.fakes.sdk_shapes``).

The matrix: each route (OpenAI, OpenRouter, a custom endpoint, Anthropic, Responses on
OpenAI and on the ChatGPT Codex backend) × each model family (gpt-4o, gpt-5, o3, Claude
before and after 4.7, an unknown model) × tools on and off × a temperature asked for or
not × prompt caching on and off × streaming on and off, over a conversation with a system
prompt, tool calls and their results, and images. A key the SDK types do not know, a
missing required one or a wrong value fails the test.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from agent.llm import ChatClient
from agent.llm.responses import ResponsesClient
from agent.prompt_caching import plan_prompt_caching
from tests.fakes.sdk_shapes import (
    validate_anthropic_messages,
    validate_chat_completions,
    validate_openrouter_chat,
    validate_responses,
)

PNG = (
    "data:image/png;base64,"
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "session_search",
            "description": "Search this chat's sessions and archive.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
                "required": ["query"],
            },
        },
    }
]

CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "You are foldgate's assistant.", "_id": "m-0"},
    {"role": "user", "content": "Which PR fixed the login timeout?", "_id": "m-1", "_tok": 9},
    {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "session_search", "arguments": '{"query": "login timeout"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": '{"hits": [{"message_id": "m-7", "snippet": "PR #412"}]}'},
    {"role": "assistant", "content": "PR #412."},
    {
        "role": "user",
        "content": [{"type": "text", "text": "And this screenshot?"}, {"type": "image_url", "image_url": {"url": PNG}}],
    },
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_2", "type": "function", "function": {"name": "screenshot", "arguments": "{}"}}],
    },
    {
        "role": "tool",
        "tool_call_id": "call_2",
        "content": [{"type": "text", "text": "captured"}, {"type": "image_url", "image_url": {"url": PNG}}],
    },
    {"role": "user", "content": "Thanks — summarise."},
]

MODELS = ["gpt-4o", "gpt-5", "o3", "claude-sonnet-4-5", "claude-opus-4-7", "mystery-model-7b"]

#: route -> (provider, base URL, dialect, validator)
CHAT_ROUTES = {
    "openai": ("openai", "https://api.openai.com/v1", "openai", validate_chat_completions),
    "openrouter": ("openrouter", "https://openrouter.ai/api/v1", "openai", validate_openrouter_chat),
    "custom": ("custom", "http://127.0.0.1:8000/v1", "openai", validate_chat_completions),
    "anthropic": ("anthropic", "https://api.anthropic.com", "anthropic", validate_anthropic_messages),
}


def outgoing(model: str, provider: str, base_url: str, caching: bool) -> list[dict[str, Any]]:
    plan = plan_prompt_caching(model, provider, enabled=caching, cache_ttl="1h" if caching else "5m", base_url=base_url)
    hook = plan.request_hook()
    return hook([dict(m) for m in CONVERSATION]) if hook else [dict(m) for m in CONVERSATION]


CHAT_CASES = list(itertools.product(CHAT_ROUTES, MODELS, [True, False], [0.2, None], [True, False], [True, False]))


@pytest.mark.parametrize(("route", "model", "tools", "temperature", "caching", "stream"), CHAT_CASES)
def test_chat_and_messages_bodies_fit_the_sdk_types(route, model, tools, temperature, caching, stream):
    provider, base_url, dialect, validate = CHAT_ROUTES[route]
    client = ChatClient(base_url, dialect=dialect, route=provider, stream=stream)
    body = client.build_body(
        outgoing(model, provider, base_url, caching),
        model=model,
        max_tokens=512,
        tools=TOOLS if tools else None,
        temperature=temperature,
    )
    validate(body)
    assert body.get("stream", False) is stream


def test_prompt_caching_really_marks_the_bodies_it_validates():
    for route in ("openrouter", "anthropic"):
        provider, base_url, dialect, _ = CHAT_ROUTES[route]
        client = ChatClient(base_url, dialect=dialect, route=provider)
        body = client.build_body(
            outgoing("claude-sonnet-4-5", provider, base_url, True), model="claude-sonnet-4-5", max_tokens=10
        )
        assert '"cache_control"' in str(body).replace("'", '"')


RESPONSES_ROUTES = {
    "openai": ("https://api.openai.com/v1", True),
    "openai-codex": ("https://chatgpt.com/backend-api/codex", False),
}
RESPONSES_CASES = list(
    itertools.product(RESPONSES_ROUTES, ["gpt-5.6", "gpt-5", "gpt-4o"], [True, False], [0.2, None], [True, False])
)


@pytest.mark.parametrize(("route", "model", "tools", "temperature", "stream"), RESPONSES_CASES)
def test_responses_bodies_fit_the_sdk_types(route, model, tools, temperature, stream):
    base_url, token_limit = RESPONSES_ROUTES[route]
    client = ResponsesClient(
        base_url,
        route=route,
        native_compaction=True,
        stream=stream or route == "openai-codex",
        send_token_limit=token_limit,
    )
    body = client.build_body(
        CONVERSATION,
        model=model,
        max_tokens=512,
        tools=TOOLS if tools else None,
        temperature=temperature,
        local_trigger_tokens=100_000,
    )
    validate_responses(body)
    assert ("context_management" in body) is (model == "gpt-5.6")


def test_a_replayed_compaction_item_fits_too():
    client = ResponsesClient("https://api.openai.com/v1", route="openai", native_compaction=True)
    replayed = {
        "role": "assistant",
        "content": "done",
        "_responses_items": {
            "issuer": client.issuer,
            "model": "gpt-5.6",
            "items": [{"type": "compaction", "id": "cmp_1", "encrypted_content": "opaque"}],
        },
    }
    body = client.build_body(
        [*CONVERSATION, replayed, {"role": "user", "content": "more"}], model="gpt-5.6", max_tokens=100
    )
    assert body["input"][0]["type"] == "compaction"
    validate_responses(body)


@pytest.mark.parametrize("body_of", ["chat", "anthropic", "responses"])
def test_the_check_can_fail(body_of):
    """A key the SDK types do not know is caught on each route (the validators are not vacuous)."""
    if body_of == "responses":
        body = ResponsesClient("https://api.openai.com/v1").build_body(CONVERSATION, model="gpt-5", max_tokens=5)
        body["input"][0]["colour"] = "blue"
        with pytest.raises(AssertionError):
            validate_responses(body)
        return
    provider, base_url, dialect, validate = CHAT_ROUTES["openai" if body_of == "chat" else "anthropic"]
    body = ChatClient(base_url, dialect=dialect, route=provider).build_body(CONVERSATION, model="gpt-5", max_tokens=5)
    body["messages"][-1]["colour"] = "blue"
    with pytest.raises(AssertionError):
        validate(body)
