"""Self-tests for tests/fakes/sdk_shapes.py: valid bodies pass, and every kind of wrong key or value fails.

The failing cases are the point: each proves one loophole of plain pydantic-over-TypedDict
validation is closed (unknown keys at depth, lazy ``Iterable`` items, literals, response
models in Anthropic's content union), and that the message names the offending path.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from anthropic.types import message_create_params as anthropic_params
from openai.types.chat import completion_create_params as chat_params
from pydantic import TypeAdapter

from tests.fakes.sdk_shapes import (
    validate_anthropic_messages,
    validate_chat_completions,
    validate_openrouter_chat,
    validate_responses,
)

Body = dict[str, Any]
Validator = Callable[[Body], None]
PARAMETERS = {
    "type": "object",
    "properties": {"q": {"type": "string"}},
    "required": ["q"],
    "additionalProperties": False,
}


def chat_body() -> Body:
    """A chat body with every message kind foldgate sends, a function tool and an image part."""
    return {
        "model": "gpt-4.1",
        "messages": [
            {"role": "system", "content": "be brief"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "auto"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": '{"q": "x"}'}},
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "found"},
            {"role": "assistant", "content": "done"},
        ],
        "tools": [{"type": "function", "function": {"name": "search", "description": "web", "parameters": PARAMETERS}}],
        "max_tokens": 100,
        "temperature": 0.2,
    }


def anthropic_body() -> Body:
    """A Messages body: cached system blocks, tool_use/tool_result, both image sources, a tool."""
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "system": [
            {"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
            {"type": "text", "text": "more", "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "searching"},
                    {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"q": "x"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": "found",
                        "cache_control": {"type": "ephemeral", "ttl": "5m"},
                    },
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "text", "text": "more"}]},
                ],
            },
        ],
        "tools": [{"name": "search", "description": "web", "input_schema": PARAMETERS}],
    }


def responses_body() -> Body:
    """A stateless Responses body with every input item kind foldgate replays."""
    return {
        "model": "gpt-5.6",
        "instructions": "be brief",
        "input": [
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "look"},
                    {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "auto"},
                ],
            },
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [{"type": "summary_text", "text": "thought"}],
                "encrypted_content": "gAAA",
            },
            {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAA"},
            {"type": "function_call", "call_id": "call_1", "name": "search", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "found"},
            {"type": "message", "role": "user", "content": "next"},
        ],
        "tools": [
            {"type": "function", "name": "search", "description": "web", "parameters": PARAMETERS, "strict": False}
        ],
        "store": False,
        "max_output_tokens": 256,
        "context_management": [{"type": "compaction", "compact_threshold": 192_000}],
    }


def openrouter_body() -> Body:
    """A chat body for a Claude model on OpenRouter, with markers on text parts and on messages."""
    body = chat_body()
    body["model"] = "anthropic/claude-sonnet-4.5"
    body["messages"][0]["content"] = [
        {"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
    ]
    body["messages"][1]["content"][0]["cache_control"] = {"type": "ephemeral"}
    body["messages"][2]["cache_control"] = {"type": "ephemeral", "ttl": "5m"}  # assistant turn with only tool calls
    return body


def edited(make: Callable[[], Body], edit: Callable[[Body], Any]) -> Body:
    body = make()
    edit(body)
    return body


def fails(validate: Validator, body: Body, *fragments: str) -> str:
    """Assert ``validate`` rejects ``body`` with a message naming every fragment; returns the message."""
    with pytest.raises(AssertionError) as caught:
        validate(body)
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in:\n{message}"
    return message


# --------------------------------------------------------------------------- the loopholes exist


def test_plain_adapter_ignores_unknown_keys_and_validates_iterables_lazily() -> None:
    """Why the module exists: without it, both of these bad bodies pass a plain TypeAdapter."""
    adapter = TypeAdapter(chat_params.CompletionCreateParamsNonStreaming)
    adapter.validate_python({"model": "m", "messages": [], "no_such_key": 1})
    adapter.validate_python({"model": "m", "messages": [{"role": "robot", "content": "hi"}]})


def test_the_sdk_classes_are_left_alone() -> None:
    validate_chat_completions(chat_body())
    for params in (chat_params.CompletionCreateParamsNonStreaming, anthropic_params.MessageCreateParamsNonStreaming):
        assert "__pydantic_config__" not in vars(params)


# --------------------------------------------------------------------------- valid bodies


def test_valid_chat_bodies() -> None:
    validate_chat_completions(chat_body())
    streaming = chat_body() | {"stream": True, "stream_options": {"include_usage": True}}
    validate_chat_completions(streaming)
    validate_chat_completions(chat_body() | {"max_completion_tokens": 100})  # the SDK allows both keys


def test_valid_anthropic_bodies() -> None:
    validate_anthropic_messages(anthropic_body())
    validate_anthropic_messages(anthropic_body() | {"system": "be brief", "stream": True})


def test_valid_responses_bodies() -> None:
    validate_responses(responses_body())
    validate_responses(responses_body() | {"stream": True, "input": "hi"})


def test_valid_openrouter_body_and_the_input_is_not_changed() -> None:
    body = openrouter_body()
    before = copy.deepcopy(body)
    validate_openrouter_chat(body)
    assert body == before
    validate_openrouter_chat(chat_body())


# --------------------------------------------------------------------------- bodies that must fail


def _set(path: tuple[Any, ...], value: Any) -> Callable[[Body], None]:
    def edit(body: Body) -> None:
        node = body
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return edit


def _drop(path: tuple[Any, ...]) -> Callable[[Body], None]:
    def edit(body: Body) -> None:
        node = body
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]

    return edit


CHAT_FAILURES = {
    "unknown top-level key": (_set(("provider",), {"order": ["x"]}), "provider: Extra inputs"),
    "unknown key on a message": (_set(("messages", 0, "name_"), "x"), "messages[0].name_: Extra inputs"),
    "unknown key on a content part": (
        _set(("messages", 1, "content", 0, "cache_control"), {"type": "ephemeral"}),
        "messages[1].content[0].cache_control: Extra inputs",
    ),
    "unknown key inside image_url": (
        _set(("messages", 1, "content", 1, "image_url", "size"), 3),
        "messages[1].content[1].image_url.size: Extra inputs",
    ),
    "unknown key on a tool call": (
        _set(("messages", 2, "tool_calls", 0, "index"), 0),
        "messages[2].tool_calls[0].index: Extra inputs",
    ),
    "unknown key in a tool call's function": (
        _set(("messages", 2, "tool_calls", 0, "function", "x"), 1),
        "messages[2].tool_calls[0].function.x: Extra inputs",
    ),
    "unknown key on a tool": (_set(("tools", 0, "strict"), True), "tools[0].strict: Extra inputs"),
    "unknown key in a tool's function": (
        _set(("tools", 0, "function", "input_schema"), {}),
        "tools[0].function.input_schema: Extra inputs",
    ),
    "unknown key in stream_options": (
        _set(("stream_options",), {"include_usage": True, "x": 1}),
        "stream_options.x: Extra inputs",
    ),
    "tool message without tool_call_id": (
        _drop(("messages", 3, "tool_call_id")),
        "messages[3].tool_call_id: Field required",
    ),
    "unknown role": (_set(("messages", 0, "role"), "robot"), "messages[0].role: got 'robot', expected one of"),
    "unknown content part type": (
        _set(("messages", 1, "content", 0, "type"), "input_text"),
        "messages[1].content[0].type: got 'input_text'",
    ),
    "unknown image detail": (
        _set(("messages", 1, "content", 1, "image_url", "detail"), "ultra"),
        "messages[1].content[1].image_url.detail",
    ),
    "tool call arguments not a string": (
        _set(("messages", 2, "tool_calls", 0, "function", "arguments"), {"q": "x"}),
        "messages[2].tool_calls[0].function.arguments",
    ),
    "a number as a string": (_set(("max_tokens",), "100"), "max_tokens: Input should be a valid integer"),
    "no model": (_drop(("model",)), "model: Field required"),
    "stream not a bool": (_set(("stream",), "yes"), "stream"),
}


@pytest.mark.parametrize(("edit", "fragment"), CHAT_FAILURES.values(), ids=CHAT_FAILURES.keys())
def test_chat_rejects(edit: Callable[[Body], None], fragment: str) -> None:
    fails(validate_chat_completions, edited(chat_body, edit), fragment)


ANTHROPIC_FAILURES = {
    "unknown top-level key": (_set(("max_completion_tokens",), 5), "max_completion_tokens: Extra inputs"),
    "no max_tokens": (_drop(("max_tokens",)), "max_tokens: Field required"),
    "unknown key on a text block": (
        _set(("messages", 0, "content", 0, "citations_"), []),
        "messages[0].content[0].citations_: Extra inputs",
    ),
    "unknown key on a system block": (_set(("system", 0, "x"), 1), "system[0].x: Extra inputs"),
    "cache_control type": (
        _set(("system", 0, "cache_control", "type"), "persistent"),
        "system[0].cache_control.type: Input should be 'ephemeral'",
    ),
    "cache_control ttl": (
        _set(("messages", 2, "content", 0, "cache_control", "ttl"), "2h"),
        "messages[2].content[0].cache_control.ttl",
    ),
    "unknown key in cache_control": (
        _set(("system", 1, "cache_control", "scope"), "global"),
        "system[1].cache_control.scope: Extra inputs",
    ),
    "tool_use without id": (_drop(("messages", 1, "content", 1, "id")), "messages[1].content[1].id: Field required"),
    "unknown key on tool_result": (
        _set(("messages", 2, "content", 0, "tool_call_id"), "x"),
        "messages[2].content[0].tool_call_id: Extra inputs",
    ),
    "block inside a tool_result": (
        _set(("messages", 2, "content", 1, "content", 0, "x"), 1),
        "messages[2].content[1].content[0].x: Extra inputs",
    ),
    "unknown image media type": (
        _set(("messages", 0, "content", 1, "source", "media_type"), "image/bmp"),
        "messages[0].content[1].source.media_type",
    ),
    "unknown key in an image source": (
        _set(("messages", 0, "content", 2, "source", "detail"), "auto"),
        "messages[0].content[2].source.detail: Extra inputs",
    ),
    "an OpenAI-style tool": (
        _set(("tools", 0), {"name": "search", "parameters": PARAMETERS}),
        "tools[0].parameters: Extra inputs",
        "tools[0].input_schema: Field required",
    ),
    "unknown role": (_set(("messages", 1, "role"), "tool"), "messages[1].role: got 'tool'"),
    "stream 1 for True": (_set(("stream",), 1), "stream: 1 is not True"),
}


@pytest.mark.parametrize(
    ("edit", "fragments"), [(e, f) for e, *f in ANTHROPIC_FAILURES.values()], ids=ANTHROPIC_FAILURES.keys()
)
def test_anthropic_rejects(edit: Callable[[Body], None], fragments: list[str]) -> None:
    fails(validate_anthropic_messages, edited(anthropic_body, edit), *fragments)


def test_anthropic_response_models_do_not_take_dicts() -> None:
    """The content union holds response models (extra keys allowed): a dict must still fit a request type."""
    message = fails(
        validate_anthropic_messages,
        edited(anthropic_body, _set(("messages", 0, "content", 0, "x"), 1)),
        "messages[0].content[0].x: Extra inputs are not permitted",
        "[as TextBlockParam]",
    )
    assert "instance" not in message


RESPONSES_FAILURES = {
    "unknown top-level key": (_set(("max_tokens",), 5), "max_tokens: Extra inputs"),
    "unknown key on an input part": (
        _set(("input", 0, "content", 0, "cache_control"), {"type": "ephemeral"}),
        "input[0].content[0].cache_control: Extra inputs",
    ),
    "chat-style text part": (_set(("input", 0, "content", 0, "type"), "text"), "input[0].content[0].type: got 'text'"),
    "input_image without detail": (
        _drop(("input", 0, "content", 1, "detail")),
        "input[0].content[1].detail: Field required",
    ),
    "function_call without call_id": (_drop(("input", 3, "call_id")), "input[3].call_id: Field required"),
    "unknown key on function_call_output": (
        _set(("input", 4, "tool_call_id"), "x"),
        "input[4].tool_call_id: Extra inputs",
    ),
    "unknown key in a reasoning summary": (
        _set(("input", 1, "summary", 0, "x"), 1),
        "input[1].summary[0].x: Extra inputs",
    ),
    "compaction without encrypted_content": (
        _drop(("input", 2, "encrypted_content")),
        "input[2].encrypted_content: Field required",
    ),
    "chat-style tool": (
        _set(("tools", 0), {"type": "function", "function": {"name": "search"}}),
        "tools[0].function: Extra inputs",
    ),
    "tool without strict": (_drop(("tools", 0, "strict")), "tools[0].strict: Field required"),
    "unknown key in context_management": (
        _set(("context_management", 0, "x"), 1),
        "context_management[0].x: Extra inputs",
    ),
    "bad compact_threshold": (
        _set(("context_management", 0, "compact_threshold"), "lots"),
        "context_management[0].compact_threshold",
    ),
    "store not a bool": (_set(("store",), "no"), "store: Input should be a valid boolean"),
    "unknown item type": (_set(("input", 3, "type"), "tool_call"), "input[3]"),
}


@pytest.mark.parametrize(("edit", "fragment"), RESPONSES_FAILURES.values(), ids=RESPONSES_FAILURES.keys())
def test_responses_rejects(edit: Callable[[Body], None], fragment: str) -> None:
    fails(validate_responses, edited(responses_body, edit), fragment)


OPENROUTER_FAILURES = {
    "marker type": (_set(("messages", 2, "cache_control", "type"), "persistent"), "messages[2].cache_control.type"),
    "marker ttl": (
        _set(("messages", 0, "content", 0, "cache_control", "ttl"), "2h"),
        "messages[0].content[0].cache_control.ttl",
    ),
    "unknown key in a marker": (
        _set(("messages", 1, "content", 0, "cache_control", "scope"), "x"),
        "messages[1].content[0].cache_control has unknown keys ['scope']",
    ),
    "marker not an object": (
        _set(("messages", 3, "cache_control"), "ephemeral"),
        "messages[3].cache_control must be an object",
    ),
    "marker on an image part": (
        _set(("messages", 1, "content", 1, "cache_control"), {"type": "ephemeral"}),
        "messages[1].content[1].cache_control: Extra inputs",
    ),
    "other OpenRouter extension": (_set(("provider",), {"order": ["anthropic"]}), "provider: Extra inputs"),
    "anything else the chat type rejects": (
        _set(("messages", 1, "content", 0, "x"), 1),
        "messages[1].content[0].x: Extra inputs",
    ),
}


@pytest.mark.parametrize(("edit", "fragment"), OPENROUTER_FAILURES.values(), ids=OPENROUTER_FAILURES.keys())
def test_openrouter_rejects(edit: Callable[[Body], None], fragment: str) -> None:
    fails(validate_openrouter_chat, edited(openrouter_body, edit), fragment)


def test_markers_are_an_openrouter_allowance_only() -> None:
    fails(validate_chat_completions, openrouter_body(), "cache_control: Extra inputs")


def test_messages_are_short_and_name_the_member() -> None:
    """Failed unions list only the members whose tag matched, not all 35 Responses item types."""
    message = fails(
        validate_responses, edited(responses_body, _drop(("input", 3, "call_id"))), "[as ResponseFunctionToolCallParam]"
    )
    assert len(message.splitlines()) <= 3, message


@pytest.mark.parametrize(
    "validate", [validate_chat_completions, validate_anthropic_messages, validate_responses, validate_openrouter_chat]
)
def test_a_body_must_be_an_object(validate: Validator) -> None:
    fails(validate, [], "must be a JSON object")  # type: ignore[arg-type]
