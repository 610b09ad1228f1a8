"""OpenAI chat-completions dialect (OpenAI, OpenRouter, custom endpoints): bodies, answers, streams (no I/O here).

A streamed answer is a sequence of ``chat.completion.chunk`` events ending in ``[DONE]``:
text arrives as ``delta.content``, each tool call as ``delta.tool_calls[i]`` whose first
fragment names it and whose ``function.arguments`` arrive in pieces; the chunk with
``finish_reason`` ends the answer, and with ``stream_options.include_usage`` one more
chunk without choices carries the usage. OpenRouter sends SSE comments while it waits
(the SSE parser drops them) and reports a failure mid-stream as a chunk with ``error``.

An image model behind OpenRouter is asked for ``modalities: ["image", "text"]`` and answers
with ``message.images`` (streamed: ``delta.images``), each an ``image_url`` part holding a
``data:`` URL; they become the completion's :class:`~agent.llm.types.MadeImage` list.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from agent import json_codec
from agent.llm.errors import BadResponse, ProviderError, StreamInterrupted, classify_failure, empty_answer
from agent.llm.stream import StreamEvent, TextDelta, ToolCallStarted, event_object
from agent.llm.types import Completion, MadeImage
from agent.models import RequestRules
from agent.tokens import content_text
from agent.usage import Usage

log = logging.getLogger(__name__)

PATH = "/chat/completions"
#: What an image model is asked to answer with (OpenRouter's ``modalities``).
IMAGE_MODALITIES = ["image", "text"]


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
    """The JSON body of ``POST {base_url}/chat/completions`` (messages already stripped by ``to_api``)."""
    body: dict[str, Any] = {
        "model": model,
        "messages": _text_only_tool_results(api_messages),
        rules.token_limit_field: max_tokens,
    }
    if tools:
        body["tools"] = list(tools)
    if temperature is not None and rules.temperature:
        body["temperature"] = temperature
    if rules.image_output:
        body["modalities"] = list(IMAGE_MODALITIES)
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


#: Stands in for a part of a tool result this API cannot carry there (it takes only text in tool results).
IMAGE_IN_TOOL_RESULT = "[an image the tool returned; this API takes only text in tool results]"
#: Stands in for an image of a tool result that the user message after the results carries.
IMAGE_FOLLOWS = "[image: shown in the message after the tool results]"
#: Opens the user message that carries the tool results' images.
TOOL_IMAGES_HEADING = "[images the tool results above returned, in order]"


def _text_only_tool_results(api_messages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The messages with every tool result as text: chat completions take only text in a tool message, so the
    images of a run of tool results go in one user message right after the run (the model still sees them)."""
    if not any(m.get("role") == "tool" and isinstance(m.get("content"), list) for m in api_messages):
        return list(api_messages)
    out: list[Mapping[str, Any]] = []
    held: list[dict[str, Any]] = []
    for message in api_messages:
        if message.get("role") == "tool":
            if isinstance(message.get("content"), list):
                message = _text_only_tool_result(message, held)
            out.append(message)
            continue
        if held:
            out.append(_images_message(held))
            held = []
        out.append(message)
    if held:
        out.append(_images_message(held))
    return out


def _text_only_tool_result(message: Mapping[str, Any], images: list[dict[str, Any]]) -> dict[str, Any]:
    """A tool message whose content parts are all text; its image parts are moved to ``images``."""
    parts = []
    for part in message["content"]:
        if isinstance(part, Mapping) and part.get("type") == "text":
            parts.append(dict(part))
        elif isinstance(part, str):
            parts.append({"type": "text", "text": part})
        elif isinstance(part, Mapping) and part.get("type") == "image_url":
            images.append({"type": "image_url", "image_url": dict(part.get("image_url") or {})})
            parts.append({"type": "text", "text": IMAGE_FOLLOWS})
        else:
            parts.append({"type": "text", "text": IMAGE_IN_TOOL_RESULT})
    return {**message, "content": parts}


def _images_message(images: list[dict[str, Any]]) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": TOOL_IMAGES_HEADING}, *images]}


def _normalise_call(call: Any) -> dict[str, Any]:
    if not isinstance(call, Mapping) or not isinstance(call.get("function"), Mapping):
        raise BadResponse(f"tool call has no function: {call!r}"[:300])
    function = call["function"]
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        arguments = json_codec.dumps_text(arguments if arguments is not None else {})
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
    images = made_images(message.get("images"))
    if not text.strip() and not calls and not images:
        raise empty_answer(str(choices[0].get("finish_reason") or "stop"))
    usage = data.get("usage")
    return Completion(
        text=text,
        tool_calls=calls,
        finish_reason=str(choices[0].get("finish_reason") or "stop"),
        usage=Usage.from_mapping(usage if isinstance(usage, Mapping) else None),
        raw=dict(data),
        images=images,
    )


def made_images(parts: Any) -> tuple[MadeImage, ...]:
    """The images of an answer's ``images`` list (``image_url`` parts with ``data:`` URLs), decoded; a part that
    is no such image is logged (without its bytes) and skipped, so the answer's text still arrives."""
    images = []
    for part in parts if isinstance(parts, list) else ():
        url = ((part.get("image_url") or {}).get("url") if isinstance(part, Mapping) else None) or ""
        image = _decoded(url) if isinstance(url, str) else None
        if image is None:
            scheme = url.partition(":")[0][:20] if isinstance(url, str) else type(url).__name__
            log.warning("the model returned an image that is not a base64 data URL (%s…); it is skipped", scheme)
            continue
        images.append(image)
    return tuple(images)


def _decoded(url: str) -> MadeImage | None:
    """``data:image/png;base64,...`` as bytes and type; None for anything else."""
    head, comma, payload = url.partition(",")
    if not comma or not head.startswith("data:") or not head.endswith(";base64"):
        return None
    mime = head[len("data:") : -len(";base64")].split(";")[0].strip().lower()
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        return None
    return MadeImage(data, mime or "application/octet-stream") if data else None


def stream_error(error: Any) -> ProviderError:
    """The typed error for an ``error`` object a provider sent inside a stream (OpenRouter puts its status in
    ``code``)."""
    if not isinstance(error, Mapping):
        return classify_failure(f"the stream reported an error: {error!r}"[:500], status=None, detail=str(error))
    code = error.get("code")
    detail = str(error.get("message") or error)
    status = code if isinstance(code, int) and 400 <= code < 600 else None
    kind = str(error.get("type") or (code if isinstance(code, str) else ""))
    return classify_failure(
        f"the stream reported an error: {detail}"[:500],
        status=status,
        detail=detail,
        kind=kind,
        body=json_codec.dumps_text(error),
    )


class ChatStream:
    """Assembles one streamed chat completion (see :class:`agent.llm.stream.StreamAssembler`)."""

    def __init__(self) -> None:
        self.done = False
        self._text: list[str] = []
        self._calls: list[dict[str, Any]] = []
        self._images: list[Any] = []
        self._slots: dict[int, int] = {}  # the server's tool-call index -> position in _calls
        self._finish: str | None = None
        self._usage: Any = None
        self._model: Any = None

    def feed(self, event: str, data: str) -> list[StreamEvent]:
        if data == "[DONE]":
            self.done = True
            return []
        chunk = event_object(data)
        if chunk.get("error") is not None:
            raise stream_error(chunk["error"])
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        self._model = chunk.get("model") or self._model
        out: list[StreamEvent] = []
        for choice in chunk.get("choices") or ():
            if isinstance(choice, Mapping) and choice.get("index", 0) == 0:
                out += self._choice(choice)
        return out

    def _choice(self, choice: Mapping[str, Any]) -> list[StreamEvent]:
        """One chunk of the first choice (the only one asked for): text, tool-call pieces, images, the finish."""
        out: list[StreamEvent] = []
        delta = choice.get("delta") or {}
        text = delta.get("content")
        if isinstance(text, str) and text:
            self._text.append(text)
            out.append(TextDelta(text))
        for fragment in delta.get("tool_calls") or ():
            out += self._call_fragment(fragment)
        if isinstance(delta.get("images"), list):
            self._images += delta["images"]
        if choice.get("finish_reason"):
            self._finish = str(choice["finish_reason"])
        return out

    def _call_fragment(self, fragment: Any) -> list[StreamEvent]:
        """One piece of a tool call, added to the call it belongs to (see :meth:`_slot`)."""
        if not isinstance(fragment, Mapping):
            raise BadResponse(f"tool call fragment is not an object: {fragment!r}"[:300])
        function = fragment.get("function") or {}
        name, call_id = function.get("name"), fragment.get("id")
        call = self._calls[self._slot(fragment.get("index"), call_id, name)]
        if call_id:
            call["id"] = str(call_id)
        started: list[StreamEvent] = []
        if name and not call["name"]:
            call["name"] = str(name)
            started.append(ToolCallStarted(call["name"]))
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            call["arguments"].append(arguments)
        return started

    def _slot(self, index: Any, call_id: Any, name: Any) -> int:
        """Where in ``_calls`` a piece goes, placed by its ``index``; a new id at a known index starts a new call,
        and a piece without an index (some servers omit it) continues the last call unless it names a new one."""
        slot = self._slots.get(index) if isinstance(index, int) else (len(self._calls) - 1 if self._calls else None)
        if slot is not None:
            known = self._calls[slot]
            if (call_id and known["id"] and call_id != known["id"]) or (name and known["name"] and index is None):
                slot = None
        if slot is None:
            slot = len(self._calls)
            self._calls.append({"id": "", "name": "", "arguments": []})
            if isinstance(index, int):
                self._slots[index] = slot
        return slot

    def result(self) -> Completion:
        if self._finish is None:
            raise StreamInterrupted("the stream ended before the answer was complete (no finish_reason)")
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._text)}
        if self._calls:
            message["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": "".join(call["arguments"])},
                }
                for call in self._calls
            ]
        if self._images:
            message["images"] = self._images
        data = {
            "model": self._model,
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish}],
            "usage": self._usage,
        }
        return parse_response(data)
