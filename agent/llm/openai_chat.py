"""OpenAI chat-completions dialect: request bodies and response parsing (no I/O here)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from agent.llm.errors import BadResponse
from agent.llm.types import Completion
from agent.llm.usage import Usage
from agent.tokens import content_text

PATH = "/chat/completions"


def build_request(
    api_messages: Sequence[Mapping[str, Any]],
    *,
    model: str,
    max_tokens: int,
    tools: Sequence[Mapping[str, Any]] | None,
    temperature: float | None,
    token_limit_field: str = "max_tokens",
) -> dict[str, Any]:
    """The JSON body of ``POST {base_url}/chat/completions`` (messages already stripped by ``to_api``)."""
    body: dict[str, Any] = {"model": model, "messages": list(api_messages), token_limit_field: max_tokens}
    if tools:
        body["tools"] = list(tools)
    if temperature is not None:
        body["temperature"] = temperature
    return body


def _normalise_call(call: Any) -> dict[str, Any]:
    if not isinstance(call, Mapping) or not isinstance(call.get("function"), Mapping):
        raise BadResponse(f"tool call has no function: {call!r}"[:300])
    function = call["function"]
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)
    return {
        "id": str(call.get("id") or ""),
        "type": "function",
        "function": {"name": str(function.get("name") or ""), "arguments": arguments},
    }


def parse_response(data: Any) -> Completion:
    """A :class:`Completion` from a decoded body; :class:`BadResponse` when the shape is unusable or empty."""
    if not isinstance(data, Mapping):
        raise BadResponse("response body is not a JSON object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise BadResponse("response has no choices")
    message = choices[0].get("message")
    if not isinstance(message, Mapping):
        raise BadResponse("first choice has no message")
    text = content_text(message.get("content"))
    calls = [_normalise_call(call) for call in message.get("tool_calls") or ()]
    if not text.strip() and not calls:
        raise BadResponse("response has no content and no tool calls")
    usage = data.get("usage")
    return Completion(
        text=text,
        tool_calls=calls,
        finish_reason=str(choices[0].get("finish_reason") or "stop"),
        usage=Usage.from_mapping(usage if isinstance(usage, Mapping) else None),
        raw=dict(data),
    )
