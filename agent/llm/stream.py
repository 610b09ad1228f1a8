"""What a streamed answer hands on while it arrives, and how a route's stream is assembled.

A provider client that streams calls its ``on_event`` sink with :class:`TextDelta` as
text arrives and :class:`ToolCallStarted` when the model begins a tool call; when it
has to retry a request whose stream already produced events, it first sends
:class:`StreamReset`, so a preview built from the deltas is thrown away rather than
shown twice. The final answer is always the assembled :class:`agent.llm.types.Completion`
the call returns — never the concatenated deltas of a stream that was cut short.

Each route module has a :class:`StreamAssembler`: it is fed the server-sent events one by
one (parsed by ``httpx-sse``), returns the events to hand on, and, once the provider said
the answer is complete, builds the completion; :meth:`StreamAssembler.result` of a stream
that ended early raises :class:`agent.llm.errors.StreamInterrupted`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from agent import json_codec
from agent.llm.errors import BadResponse
from agent.llm.types import Completion


@dataclass(frozen=True)
class TextDelta:
    """More of the answer's text."""

    text: str


@dataclass(frozen=True)
class ToolCallStarted:
    """The model began a call of tool ``name`` (its arguments are still arriving)."""

    name: str


@dataclass(frozen=True)
class StreamReset:
    """Everything streamed since the request began is void: the request is being tried again."""

    reason: str


StreamEvent = TextDelta | ToolCallStarted | StreamReset
#: Receives a call's stream events in order; awaited, so a slow consumer slows the stream, never loses it.
EventSink = Callable[[StreamEvent], Awaitable[None]]


class StreamAssembler(Protocol):
    """One streamed answer being put together (one instance per request attempt)."""

    #: True once the provider marked the answer complete (no more events are needed).
    done: bool

    def feed(self, event: str, data: str) -> list[StreamEvent]:
        """Take one server-sent event (its ``event:`` name and ``data:``); the events to hand on."""
        ...

    def result(self) -> Completion:
        """The whole answer; raises ``StreamInterrupted`` when the stream ended before it was complete."""
        ...


def event_object(data: str) -> Mapping[str, Any]:
    """One event's ``data:`` as the JSON object every route sends; :class:`BadResponse` otherwise."""
    try:
        payload = json_codec.loads(data)
    except ValueError as error:
        raise BadResponse(f"malformed stream event: {data[:200]!r}") from error
    if not isinstance(payload, Mapping):
        raise BadResponse(f"stream event is not an object: {data[:200]!r}")
    return payload
