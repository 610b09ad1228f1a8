"""The ``response`` object of the Responses API, as OpenAI's clients parse it (``openai.types.responses.Response``).

A reply is one output message of one ``output_text`` part, followed by a ``function_call`` item for each call of
the client's own tools it ends with (a reply that is only calls has no message). The request's tools and
``tool_choice`` are repeated; the fields the clients require but foldgate does not use (sampling) are there with
the values that say so. Usage is counted with foldgate's tokenizer: the request's instructions and input, and
the reply with its calls.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agent import json_codec
from agent.tokens import count_messages, count_text
from gateway.api.requests import ChatMessage

Status = Literal["in_progress", "completed"]


def response_id() -> str:
    return f"resp_{uuid.uuid4().hex}"


def message_id() -> str:
    return f"msg_{uuid.uuid4().hex}"


def call_id() -> str:
    return f"fc_{uuid.uuid4().hex}"


def response_usage(
    messages: Sequence[ChatMessage], reply: str, calls: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """Tokens in, tokens out, and the details the clients expect (nothing cached or reasoned is counted)."""
    taken = count_messages([message.model_dump(exclude_none=True) for message in messages])
    given = count_text(reply) + (count_text(json_codec.dumps_text(list(calls))) if calls else 0)
    return {
        "input_tokens": taken,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": given,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": taken + given,
    }


def output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": []}


def output_message(item_id: str, text: str | None, status: Status = "completed") -> dict[str, Any]:
    """The reply as an output item; ``text`` None: the item as it starts, with no content yet."""
    content = [] if text is None else [output_text(text)]
    return {"type": "message", "id": item_id, "role": "assistant", "status": status, "content": content}


def function_call(call: Mapping[str, Any]) -> dict[str, Any]:
    """A call of the client's tool (the chat shape the turn tells it in) as a completed output item, with an id
    of its own beside the ``call_id`` the client's result names."""
    function = call.get("function") or {}
    return {
        "type": "function_call",
        "id": call_id(),
        "call_id": str(call.get("id") or ""),
        "name": str(function.get("name") or ""),
        "arguments": str(function.get("arguments") or ""),
        "status": "completed",
    }


def output_items(item_id: str, text: str, calls: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The reply's output: its message (left out when the reply is only calls), then its calls."""
    message = [output_message(item_id, text)] if text or not calls else []
    return message + [function_call(call) for call in calls]


def response_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A tool of the request as the response repeats it (the clients require ``strict`` to be there)."""
    return {"strict": None, **tool}


@dataclass(frozen=True)
class ResponseHead:
    """What a response says about itself from its start: ids, time, model, and what the request asked for."""

    model: str
    instructions: str | None
    previous_response_id: str | None
    conversation: str | None
    store: bool
    #: The request's tools, as the response repeats them, and its tool_choice.
    tools: tuple[dict[str, Any], ...] = ()
    tool_choice: str = "auto"
    id: str = field(default_factory=response_id)
    item_id: str = field(default_factory=message_id)
    created_at: int = field(default_factory=lambda: int(time.time()))

    def body(self, status: Status, output: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> dict[str, Any]:
        """The ``response`` object in ``status`` with ``output`` (and ``usage`` once it is known)."""
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "completed_at": int(time.time()) if status == "completed" else None,
            "error": None,
            "incomplete_details": None,
            "instructions": self.instructions,
            "max_output_tokens": None,
            "metadata": {},
            "model": self.model,
            "output": output,
            "parallel_tool_calls": False,
            "previous_response_id": self.previous_response_id,
            "conversation": {"id": self.conversation} if self.conversation else None,
            "store": self.store,
            "temperature": None,
            "text": {"format": {"type": "text"}},
            "tool_choice": self.tool_choice,
            "tools": [response_tool(tool) for tool in self.tools],
            "top_p": None,
            "truncation": "disabled",
            "usage": usage,
        }

    def completed(self, text: str, usage: dict[str, Any], calls: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
        return self.body("completed", output_items(self.item_id, text, calls), usage)
