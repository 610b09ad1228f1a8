"""Anthropic messages dialect: OpenAI-format messages to ``/v1/messages`` bodies and back (no I/O here).

The differences that matter: the system prompt is a separate field; tool calls are
``tool_use`` blocks on the assistant turn and results are ``tool_result`` blocks on a
user turn; roles must alternate, so consecutive same-role turns are merged; the first
turn must be the user's; text blocks must not be empty. ``cache_control`` markers put
on content parts or on a message (see the prompt-caching module) are carried over.

A streamed answer is a sequence of named events: ``message_start`` (with the input usage,
cache reads and writes included), per content block ``content_block_start`` /
``content_block_delta`` (``text_delta``, or ``input_json_delta`` fragments of a tool's
input) / ``content_block_stop``, ``message_delta`` (stop reason, output usage) and
``message_stop``; ``ping`` keeps the connection alive and ``error`` reports a failure
(``overloaded_error`` mid-stream is the common one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agent import json_codec
from agent.llm.errors import BadResponse, ProviderError, StreamInterrupted, classify_failure, empty_answer
from agent.llm.stream import StreamEvent, TextDelta, ToolCallStarted, event_object
from agent.llm.types import Completion
from agent.models import RequestRules
from agent.tokens import content_text
from agent.usage import Usage

PATH = "/v1/messages"
DEFAULT_VERSION = "2023-06-01"

#: Anthropic stop reasons in OpenAI's vocabulary.
FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}

#: Stands in for an empty text where Anthropic requires a non-empty block.
EMPTY_TEXT = "(empty)"


def _image_block(part: Mapping[str, Any]) -> dict[str, Any]:
    url = str((part.get("image_url") or {}).get("url") or "")
    if url.startswith("data:") and ";base64," in url:
        header, data = url[5:].split(";base64,", 1)
        return {"type": "image", "source": {"type": "base64", "media_type": header, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _content_blocks(content: Any) -> list[dict[str, Any]]:
    """Text/image blocks for one message's content, keeping any ``cache_control`` on parts."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, str):
            if part:
                blocks.append({"type": "text", "text": part})
            continue
        if not isinstance(part, Mapping):
            continue
        kind = part.get("type")
        if kind == "image_url":
            block = _image_block(part)
        elif kind in ("text", None):
            text = part.get("text")
            if not text:
                continue
            block = {"type": "text", "text": str(text)}
        else:
            block = {key: value for key, value in part.items() if key != "cache_control"}
        if "cache_control" in part:
            block["cache_control"] = part["cache_control"]
        blocks.append(block)
    return blocks


def _tool_use_block(call: Mapping[str, Any]) -> dict[str, Any]:
    function = call.get("function") or {}
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            parsed = json_codec.loads(arguments) if arguments.strip() else {}
        except ValueError:
            parsed = {"arguments": arguments}
    else:
        parsed = arguments or {}
    if not isinstance(parsed, dict):
        parsed = {"value": parsed}
    return {"type": "tool_use", "id": call["id"], "name": function.get("name") or "", "input": parsed}


def _turn(message: Mapping[str, Any]) -> tuple[str, list[dict[str, Any]]] | None:
    """One OpenAI message as ``(anthropic role, blocks)``; None for an assistant turn with nothing in it."""
    role = message.get("role")
    if role == "tool":
        content = message.get("content")
        # A list (text and images) stays blocks: as text an image would arrive as a wall of base64.
        result: Any = _content_blocks(content) if isinstance(content, list) else content_text(content)
        blocks = [{"type": "tool_result", "tool_use_id": message["tool_call_id"], "content": result or EMPTY_TEXT}]
        role = "user"
    elif role == "assistant":
        blocks = _content_blocks(message.get("content"))
        blocks += [_tool_use_block(call) for call in message.get("tool_calls") or ()]
        if not blocks:
            return None
    else:
        blocks = _content_blocks(message.get("content")) or [{"type": "text", "text": EMPTY_TEXT}]
        role = "user"
    marker = message.get("cache_control")
    if marker is not None and blocks:
        blocks[-1] = {**blocks[-1], "cache_control": marker}
    return role, blocks


def _system_field(system_messages: Sequence[Mapping[str, Any]]) -> str | list[dict[str, Any]] | None:
    blocks: list[dict[str, Any]] = []
    for message in system_messages:
        message_blocks = _content_blocks(message.get("content"))
        if message.get("cache_control") is not None and message_blocks:
            message_blocks[-1] = {**message_blocks[-1], "cache_control": message["cache_control"]}
        blocks += message_blocks
    if not blocks:
        return None
    if any("cache_control" in block for block in blocks):
        return blocks
    return "\n\n".join(block.get("text", "") for block in blocks)


def convert_messages(
    api_messages: Sequence[Mapping[str, Any]],
) -> tuple[str | list[dict[str, Any]] | None, list[dict[str, Any]]]:
    """``(system, messages)`` for the messages API from OpenAI-format messages."""
    system = _system_field([m for m in api_messages if m.get("role") == "system"])
    turns: list[dict[str, Any]] = []
    for message in api_messages:
        if message.get("role") == "system":
            continue
        converted = _turn(message)
        if converted is None:
            continue
        role, blocks = converted
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    if turns and turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": [{"type": "text", "text": EMPTY_TEXT}]})
    return system, turns


def convert_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI function-tool schemas as Anthropic tool definitions."""
    converted = []
    for tool in tools:
        function = tool.get("function") if tool.get("type") == "function" else tool
        function = function or {}
        converted.append(
            {
                "name": function.get("name"),
                "description": function.get("description") or "",
                "input_schema": function.get("parameters") or {"type": "object", "properties": {}},
            }
        )
    return converted


def build_request(
    api_messages: Sequence[Mapping[str, Any]],
    *,
    model: str,
    max_tokens: int,
    tools: Sequence[Mapping[str, Any]] | None,
    temperature: float | None,
    rules: RequestRules,
    stream: bool = False,
) -> dict[str, Any]:
    """The JSON body of ``POST {base_url}/v1/messages``.

    No sampling parameter is sent whatever ``temperature`` and ``rules`` say: the Messages API's
    current request type has none, and Claude 4.7 and later refuse them with a 400.
    """
    system, turns = convert_messages(api_messages)
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "messages": turns}
    if system is not None:
        body["system"] = system
    if tools:
        body["tools"] = convert_tools(tools)
    if stream:
        body["stream"] = True
    return body


def parse_response(data: Any) -> Completion:
    """A :class:`Completion` (OpenAI-shaped) from a messages-API body."""
    if not isinstance(data, Mapping) or not isinstance(data.get("content"), list):
        raise BadResponse("response has no content list")
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in data["content"]:
        if not isinstance(block, Mapping):
            raise BadResponse("content block is not an object")
        if block.get("type") == "text":
            texts.append(str(block.get("text") or ""))
        elif block.get("type") == "tool_use":
            calls.append(
                {
                    "id": str(block.get("id") or ""),
                    "type": "function",
                    "function": {
                        "name": str(block.get("name") or ""),
                        "arguments": json_codec.dumps_text(block.get("input") or {}),
                    },
                }
            )
    text = "".join(texts)
    stop = str(data.get("stop_reason") or "end_turn")
    if not text.strip() and not calls:
        raise empty_answer(FINISH_REASONS.get(stop, stop))
    usage = data.get("usage")
    return Completion(
        text=text,
        tool_calls=calls,
        finish_reason=FINISH_REASONS.get(stop, stop),
        usage=Usage.from_mapping(usage if isinstance(usage, Mapping) else None),
        raw=dict(data),
    )


def stream_error(error: Any) -> ProviderError:
    """The typed error for an ``error`` event (``overloaded_error`` mid-stream is the common one)."""
    kind = str(error.get("type") or "") if isinstance(error, Mapping) else ""
    detail = str(error.get("message") or error) if isinstance(error, Mapping) else str(error)
    failure = classify_failure(
        f"the stream reported {kind or 'an error'}: {detail}"[:500], status=None, detail=detail, kind=kind
    )
    if kind == "overloaded_error":
        failure.status = 529
    return failure


class MessagesStream:
    """Assembles one streamed Messages answer into the non-streamed body, then parses that."""

    def __init__(self) -> None:
        self.done = False
        self._message: dict[str, Any] = {}
        self._usage: dict[str, Any] = {}
        self._blocks: dict[int, dict[str, Any]] = {}
        self._parts: dict[int, list[str]] = {}

    def feed(self, event: str, data: str) -> list[StreamEvent]:
        payload = event_object(data)
        kind = payload.get("type") or event
        handler = _HANDLERS.get(kind) if isinstance(kind, str) else None
        return handler(self, payload) if handler is not None else []  # ping and unknown events change nothing

    def _start(self, payload: Mapping[str, Any]) -> list[StreamEvent]:
        message = payload.get("message") or {}
        self._message = {key: value for key, value in message.items() if key != "content"}
        self._usage.update(message.get("usage") or {})
        return []

    def _block_start(self, payload: Mapping[str, Any]) -> list[StreamEvent]:
        block = dict(payload.get("content_block") or {})
        index = int(payload.get("index", len(self._blocks)))
        self._blocks[index] = block
        self._parts[index] = []
        if block.get("type") == "tool_use":
            return [ToolCallStarted(str(block.get("name") or ""))]
        return []

    def _message_delta(self, payload: Mapping[str, Any]) -> list[StreamEvent]:
        """The stop reason and the output usage: fields left null here do not erase what ``message_start`` said."""
        delta = payload.get("delta") or {}
        self._message.update({key: value for key, value in delta.items() if value is not None})
        self._usage.update({key: value for key, value in (payload.get("usage") or {}).items() if value is not None})
        return []

    def _stop(self, payload: Mapping[str, Any]) -> list[StreamEvent]:
        self.done = True
        return []

    def _error(self, payload: Mapping[str, Any]) -> list[StreamEvent]:
        raise stream_error(payload.get("error"))

    def _delta(self, payload: Mapping[str, Any]) -> list[StreamEvent]:
        index = int(payload.get("index", 0))
        if index not in self._blocks:
            raise BadResponse(f"delta for content block {index}, which never started")
        delta = payload.get("delta") or {}
        kind = delta.get("type")
        if kind == "text_delta":
            text = str(delta.get("text") or "")
            self._parts[index].append(text)
            return [TextDelta(text)] if text else []
        if kind == "input_json_delta":
            self._parts[index].append(str(delta.get("partial_json") or ""))
        return []  # thinking and signature deltas are not part of the reply

    def result(self) -> Completion:
        if not self.done:
            raise StreamInterrupted("the stream ended before message_stop")
        content: list[dict[str, Any]] = []
        for index in sorted(self._blocks):
            block, joined = self._blocks[index], "".join(self._parts[index])
            if block.get("type") == "text":
                content.append({"type": "text", "text": (block.get("text") or "") + joined})
            elif block.get("type") == "tool_use":
                try:
                    tool_input = json_codec.loads(joined) if joined.strip() else (block.get("input") or {})
                except ValueError as error:
                    raise BadResponse(f"tool input of {block.get('name')!r} is not JSON: {joined[:200]!r}") from error
                content.append(
                    {"type": "tool_use", "id": block.get("id"), "name": block.get("name"), "input": tool_input}
                )
        return parse_response({**self._message, "content": content, "usage": self._usage})


#: What each named event of the stream does to the answer being assembled.
_HANDLERS: dict[str, Callable[[MessagesStream, Mapping[str, Any]], list[StreamEvent]]] = {
    "message_start": MessagesStream._start,
    "content_block_start": MessagesStream._block_start,
    "content_block_delta": MessagesStream._delta,
    "message_delta": MessagesStream._message_delta,
    "message_stop": MessagesStream._stop,
    "error": MessagesStream._error,
}
