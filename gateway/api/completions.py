"""The answers' shapes: a ``chat.completion`` object, and the ``chat.completion.chunk`` frames of a stream.

A reply's previews are the whole text so far; a stream sends only what is new (:class:`Deltas`). A preview
that does not extend what was sent (the reply was rewritten, e.g. a tool's status line replaced by the answer)
stops the deltas until the final text, of which only what extends the sent text follows: nothing is sent
twice, so what a client assembles is a prefix of the reply, and the reply itself whenever it grew as written.

A reply that ends with calls of the client's own tools ends with them as OpenAI's does: ``message.tool_calls``
(its content null when there is no text) and ``finish_reason`` ``tool_calls``; streamed, each call as
``delta.tool_calls`` frames (its index, id, type and name, then its arguments).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent import json_codec
from agent.tokens import count_text
from gateway.store import SessionStore


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


#: What a request's usage is counted from once its turn is done: the prompt tokens the provider reported for the
#: turn's last request (the session's compacted transcript, not what the client resent).
PromptTokens = Callable[[], Awaitable[int]]


def usage(prompt: int, reply: str, calls: Sequence[Mapping[str, Any]] = ()) -> dict[str, int]:
    """The turn's usage: ``prompt`` as the provider counted it, the reply (with its calls) by foldgate's tokenizer."""
    completion = count_text(reply) + (count_text(json_codec.dumps_text(list(calls))) if calls else 0)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


async def prompt_tokens(store: SessionStore, chat: str) -> int:
    """The prompt of the chat's last model request, as its session's meta records it (the provider's report, else
    foldgate's count of the session): two reads, whatever the size of the history a stateless client resends."""
    sid = await store.stored_session(chat)
    if sid is None:
        return 0
    meta = await store.meta(chat, sid)
    return meta.last_prompt_tokens or meta.tokens


def finish_reason(calls: Sequence[Mapping[str, Any]]) -> str:
    return "tool_calls" if calls else "stop"


def completion(
    cid: str, model: str, reply: str, token_usage: dict[str, int], calls: Sequence[Mapping[str, Any]] = ()
) -> dict[str, object]:
    """The whole answer of a request that did not ask for a stream."""
    message: dict[str, object] = {"role": "assistant", "content": reply}
    if calls:
        message["content"] = reply or None
        message["tool_calls"] = [_call(call) for call in calls]
    return {
        "id": cid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason(calls),
                "logprobs": None,
            }
        ],
        "usage": token_usage,
    }


def _call(call: Mapping[str, Any]) -> dict[str, object]:
    """One call as OpenAI's answer has it: id, type, and the function's name and JSON arguments."""
    function = call.get("function") or {}
    arguments = function.get("arguments")
    return {
        "id": str(call.get("id") or ""),
        "type": "function",
        "function": {
            "name": str(function.get("name") or ""),
            "arguments": arguments if isinstance(arguments, str) else json_codec.dumps_text(arguments or {}),
        },
    }


def call_deltas(calls: Sequence[Mapping[str, Any]]) -> list[dict[str, object]]:
    """The ``delta`` of each frame that streams ``calls``: a call's index, id, type and name, then its arguments."""
    deltas: list[dict[str, object]] = []
    for index, call in enumerate(calls):
        whole = _call(call)
        function: Any = whole["function"]
        named = {"name": function["name"], "arguments": ""}
        deltas.append({"tool_calls": [{"index": index, "id": whole["id"], "type": "function", "function": named}]})
        deltas.append({"tool_calls": [{"index": index, "function": {"arguments": function["arguments"]}}]})
    return deltas


def chunk(
    cid: str, model: str, delta: Mapping[str, object], *, finish: str | None = None, created: int | None = None
) -> dict[str, object]:
    """One frame of a stream: ``delta`` of the one choice, ``finish`` on the last."""
    return {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": created if created is not None else int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
    }


def usage_chunk(cid: str, model: str, token_usage: dict[str, int]) -> dict[str, object]:
    """The frame after the last one when ``stream_options.include_usage`` asks for it: no choices, the usage."""
    return {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [],
        "usage": token_usage,
    }


@dataclass
class Deltas:
    """What of each whole-text frame is new to the client."""

    sent: str = ""
    #: A preview did not extend what was sent: previews are passed over until the final text.
    diverged: bool = False

    def new_text(self, text: str, *, final: bool) -> str:
        """The suffix of ``text`` not sent yet ("" when there is none, or nothing may be sent now)."""
        if (self.diverged and not final) or not text.startswith(self.sent):
            self.diverged = True
            return ""
        new = text[len(self.sent) :]
        self.sent = text
        return new
