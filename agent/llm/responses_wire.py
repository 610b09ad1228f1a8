"""The Responses API's wire format: chat messages to ``/responses`` input items, answers back (no I/O here).

Like :mod:`agent.llm.anthropic` and :mod:`agent.llm.openai_chat`, one module holds both
directions, because the replay contract spans them: :func:`parse_response` keeps the
opaque ``compaction`` / ``reasoning`` items (with their encrypted content) under
:data:`REPLAY_KEY`, tagged with their issuer and model, and :func:`convert_messages` sends
them back only to that issuer — and what came before the newest compaction item not at
all, because the item carries it.

A streamed answer is a sequence of typed events: ``response.output_text.delta`` (text),
``response.output_item.added`` (a function call begins), ``response.completed`` /
``response.incomplete`` (the final ``response`` object), ``response.failed`` / ``error``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from agent import json_codec
from agent.llm.errors import BadResponse, ProviderError, StreamInterrupted, classify_failure, empty_answer
from agent.llm.responses_routes import native_compaction_model
from agent.llm.stream import StreamEvent, TextDelta, ToolCallStarted, event_object
from agent.llm.types import Completion
from agent.messages import Message
from agent.tokens import content_text
from agent.usage import Usage

PATH = "/responses"
#: Assistant-message key holding the opaque output items to replay (``{"issuer", "items"}``).
REPLAY_KEY: Final = "_responses_items"
#: Output item types that are opaque state to carry forward (only with their encrypted content).
OPAQUE_ITEM_TYPES = frozenset({"compaction", "reasoning"})


# --------------------------------------------------------------------------- request body


def _user_content(content: Any) -> str | list[dict[str, Any]]:
    if isinstance(content, str) or content is None:
        return content or ""
    parts: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, str):
            parts.append({"type": "input_text", "text": part})
        elif isinstance(part, Mapping) and part.get("type") == "image_url":
            image = part.get("image_url") or {}
            parts.append(
                {
                    "type": "input_image",
                    "image_url": str(image.get("url") or ""),
                    "detail": str(image.get("detail") or "auto"),
                }
            )
        elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
            parts.append({"type": "input_text", "text": part["text"]})
    return parts


def _tool_output(content: Any) -> str | list[dict[str, Any]]:
    """A tool result's output: its text, or text and image parts when it carries images (an image as text
    would arrive as a wall of base64)."""
    if isinstance(content, list) and any(isinstance(p, Mapping) and p.get("type") == "image_url" for p in content):
        parts = _user_content(content)
        return parts if isinstance(parts, list) else [{"type": "input_text", "text": parts}]
    return content_text(content)


def _replayable(message: Mapping[str, Any], issuer: str, model: str | None) -> list[dict[str, Any]]:
    """The opaque items stored on an assistant message that may go to ``model`` at this issuer.

    Encrypted content only decrypts where it was made, so another issuer's items are never
    sent. A compaction item goes only to a model that compacts natively (a model without it
    gets the full transcript instead, which the local store still has); a reasoning item
    only to the model that produced it.
    """
    stored = message.get(REPLAY_KEY)
    if not isinstance(stored, Mapping) or stored.get("issuer") != issuer:
        return []
    items = []
    for item in stored.get("items") or ():
        if not isinstance(item, Mapping):
            continue
        if model is not None and item.get("type") == "compaction" and not native_compaction_model(model):
            continue
        if model is not None and item.get("type") == "reasoning" and stored.get("model") not in (None, model):
            continue
        items.append(dict(item))
    return items


def convert_messages(
    messages: Sequence[Mapping[str, Any]], issuer: str, model: str | None = None
) -> tuple[str, list[dict[str, Any]]]:
    """``(instructions, input items)`` for OpenAI chat messages (``_`` keys still present, for replay)."""
    instructions: list[str] = []
    items: list[dict[str, Any]] = []
    for message in messages:
        if message.get("role") == "system":
            text = content_text(message.get("content"))
            if text:
                instructions.append(text)
        else:
            items += _input_items(message, issuer, model)
    latest = max((i for i, item in enumerate(items) if item.get("type") == "compaction"), default=None)
    if latest is not None:
        items = items[latest:]  # the newest compaction item carries everything before it
    return "\n\n".join(instructions), items


def _input_items(message: Mapping[str, Any], issuer: str, model: str | None) -> list[dict[str, Any]]:
    """The input items of one user, assistant or tool message (a message of any other role has none)."""
    role = message.get("role")
    if role == "user":
        return [{"type": "message", "role": "user", "content": _user_content(message.get("content"))}]
    if role == "assistant":
        return _assistant_items(message, issuer, model)
    if role == "tool":
        return [
            {
                "type": "function_call_output",
                "call_id": message["tool_call_id"],
                "output": _tool_output(message.get("content")),
            }
        ]
    return []


def _assistant_items(message: Mapping[str, Any], issuer: str, model: str | None) -> list[dict[str, Any]]:
    """An earlier answer: its replayable opaque items, its text, then its tool calls."""
    items = _replayable(message, issuer, model)
    text = content_text(message.get("content"))
    if text:  # an earlier answer goes back as a plain assistant message (stateless: no output item ids)
        items.append({"type": "message", "role": "assistant", "content": text})
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        items.append(
            {
                "type": "function_call",
                "call_id": call["id"],
                "name": function.get("name") or "",
                "arguments": _arguments_text(function.get("arguments")),
            }
        )
    return items


def _arguments_text(arguments: Any) -> str:
    """A tool call's arguments as the JSON text both directions carry (a server may hand over an object)."""
    return arguments if isinstance(arguments, str) else json_codec.dumps_text(arguments or {})


def convert_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Chat-completions function tools as Responses function tools (the function's fields one level up).

    ``strict`` is sent as false: left out, the Responses API treats a tool as strict and then
    requires every property and ``additionalProperties: false``, which optional arguments break.
    """
    converted = []
    for tool in tools:
        function = tool.get("function") if tool.get("type") == "function" else tool
        function = function or {}
        converted.append(
            {
                "type": "function",
                "name": function.get("name"),
                "description": function.get("description") or "",
                "parameters": function.get("parameters") or {"type": "object", "properties": {}},
                "strict": False,
            }
        )
    return converted


# --------------------------------------------------------------------------- response


@dataclass(frozen=True)
class ResponsesCompletion(Completion):
    """A completion that also carries the opaque items to replay with the assistant message."""

    replay: dict[str, Any] | None = None
    compacted: bool = False

    @property
    def native_compactions(self) -> int:
        return int(self.compacted)

    def as_message(self) -> Message:
        message = super().as_message()
        if self.replay and self.replay.get("items"):
            message[REPLAY_KEY] = self.replay
        return message


def _usage(data: Any) -> Usage:
    if not isinstance(data, Mapping):
        return Usage()
    details = data.get("input_tokens_details") or {}
    output_details = data.get("output_tokens_details") or {}
    return Usage.from_mapping(
        {
            "prompt_tokens": data.get("input_tokens"),
            "completion_tokens": data.get("output_tokens"),
            "total_tokens": data.get("total_tokens"),
            "prompt_tokens_details": {
                "cached_tokens": details.get("cached_tokens") if isinstance(details, Mapping) else 0
            },
            "completion_tokens_details": {
                "reasoning_tokens": output_details.get("reasoning_tokens") if isinstance(output_details, Mapping) else 0
            },
        }
    )


def parse_response(data: Any, issuer: str, model: str | None = None) -> ResponsesCompletion:
    """A completion from a Responses body; opaque items with encrypted content are kept for replay."""
    if not isinstance(data, Mapping) or not isinstance(data.get("output"), list):
        raise BadResponse("response has no output list")
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    opaque: list[dict[str, Any]] = []
    for item in data["output"]:
        if not isinstance(item, Mapping):
            raise BadResponse("output item is not an object")
        kind = item.get("type")
        if kind == "message":
            texts += _output_texts(item)
        elif kind == "function_call":
            calls.append(_tool_call(item))
        elif kind in OPAQUE_ITEM_TYPES and item.get("encrypted_content"):
            opaque.append(dict(item))
    text = "".join(texts)
    finish = _finish_reason(data, bool(calls))
    if not text.strip() and not calls:
        raise empty_answer(finish)
    return ResponsesCompletion(
        text=text,
        tool_calls=calls,
        finish_reason=finish,
        usage=_usage(data.get("usage")),
        raw=dict(data),
        replay={"issuer": issuer, "model": model or data.get("model"), "items": opaque} if opaque else None,
        compacted=any(item.get("type") == "compaction" for item in opaque),
    )


def _output_texts(item: Mapping[str, Any]) -> list[str]:
    """The text parts of an output message (a refusal or other part is not the answer's text)."""
    return [
        str(part.get("text") or "")
        for part in item.get("content") or ()
        if isinstance(part, Mapping) and part.get("type") in ("output_text", "text")
    ]


def _tool_call(item: Mapping[str, Any]) -> dict[str, Any]:
    """A ``function_call`` output item as a chat-completions tool call (its ``call_id`` is what results answer)."""
    return {
        "id": str(item.get("call_id") or item.get("id") or ""),
        "type": "function",
        "function": {"name": str(item.get("name") or ""), "arguments": _arguments_text(item.get("arguments"))},
    }


def _finish_reason(data: Mapping[str, Any], called: bool) -> str:
    """Why the answer ended, in chat-completions words: an incomplete response says why, a complete one ended on
    its own or to call tools."""
    incomplete = (data.get("incomplete_details") or {}) if data.get("status") == "incomplete" else {}
    finish = "length" if incomplete.get("reason") == "max_output_tokens" else ("tool_calls" if called else "stop")
    if incomplete.get("reason") == "content_filter":
        finish = "content_filter"
    return finish


def is_compaction_rejection(status: int, body: Any) -> bool:
    """A structured refusal of ``context_management`` (a 4xx naming the field), not a crash."""
    if status not in (400, 404, 422) or not isinstance(body, Mapping):
        return False
    error = body.get("error")
    if not isinstance(error, Mapping):
        return False
    if error.get("param") == "context_management":
        return True
    text = f"{error.get('code') or ''} {error.get('message') or ''}".lower()
    return "context_management" in text or ("compaction" in text and "unsupported" in text)


# --------------------------------------------------------------------------- stream


def _stream_failure(event: Mapping[str, Any]) -> ProviderError:
    """The typed error for ``response.failed`` / ``error``: by the error's code (a context-length one included)."""
    error = (event.get("response") or {}).get("error") or event.get("error") or event
    if not isinstance(error, Mapping):
        error = {"message": str(error)}
    detail = str(error.get("message") or json_codec.dumps_text(error)[:300])
    kind = str(error.get("code") or error.get("type") or "")
    return classify_failure(
        f"the response failed mid-stream: {kind} {detail}"[:500], status=None, detail=detail, kind=kind
    )


class ResponsesStream:
    """Assembles a streamed response: text deltas on the way, the final ``response`` object at the end."""

    def __init__(self, issuer: str, model: str | None) -> None:
        self.done = False
        self._issuer = issuer
        self._model = model
        self._final: Any = None

    def feed(self, event: str, data: str) -> list[StreamEvent]:
        if data == "[DONE]":
            return []
        payload = event_object(data)
        kind = payload.get("type") or event
        if kind == "response.output_text.delta":
            text = payload.get("delta")
            return [TextDelta(text)] if isinstance(text, str) and text else []
        if kind == "response.output_item.added":
            item = payload.get("item") or {}
            if isinstance(item, Mapping) and item.get("type") == "function_call":
                return [ToolCallStarted(str(item.get("name") or ""))]
        elif kind in ("response.completed", "response.incomplete"):
            self._final = payload.get("response")
            self.done = True
        elif kind in ("response.failed", "error"):
            raise _stream_failure(payload)
        return []

    def result(self) -> Completion:
        if not self.done:
            raise StreamInterrupted("the stream ended before the response completed")
        return parse_response(self._final, self._issuer, self._model)
