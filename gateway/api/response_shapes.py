"""The ``response`` object of the Responses API, as OpenAI's clients parse it (``openai.types.responses.Response``).

A reply is one output message of one ``output_text`` part. The fields the clients require but foldgate does
not use (tools, sampling) are there with the values that say so: no tools, ``tool_choice`` ``auto``.
Usage is counted with foldgate's tokenizer: the request's instructions and input, and the reply.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agent.tokens import count_messages, count_text
from gateway.api.requests import ChatMessage

Status = Literal["in_progress", "completed"]


def response_id() -> str:
    return f"resp_{uuid.uuid4().hex}"


def message_id() -> str:
    return f"msg_{uuid.uuid4().hex}"


def response_usage(messages: Sequence[ChatMessage], reply: str) -> dict[str, Any]:
    """Tokens in, tokens out, and the details the clients expect (nothing cached or reasoned is counted)."""
    taken = count_messages([message.model_dump(exclude_none=True) for message in messages])
    given = count_text(reply)
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


@dataclass(frozen=True)
class ResponseHead:
    """What a response says about itself from its start: ids, time, model, and what the request asked for."""

    model: str
    instructions: str | None
    previous_response_id: str | None
    conversation: str | None
    store: bool
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
            "tool_choice": "auto",
            "tools": [],
            "top_p": None,
            "truncation": "disabled",
            "usage": usage,
        }

    def completed(self, text: str, usage: dict[str, Any]) -> dict[str, Any]:
        return self.body("completed", [output_message(self.item_id, text)], usage)
