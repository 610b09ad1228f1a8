"""The gateway's event bus and counters: who compacted what, and the figures /usage and metrics show.

Events are small pydantic models so a subscriber (a log, a metrics endpoint, a test)
gets a typed, serialisable record. Subscribers are called in order and must not raise;
one that does is logged and skipped so an observer can never break a turn.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Annotated, Literal

from pydantic import BaseModel, Field, TypeAdapter

from agent.tools.registry import CallOutcome

log = logging.getLogger(__name__)


#: Who started a compaction: the gateway's 85% pass, the agent's in-loop compressor, an idle gap,
#: ``/compress``, or the provider itself (a codex thread, the Responses API's native compaction).
Trigger = Literal["hygiene", "in_loop", "manual", "idle", "native"]


class CompressEvent(BaseModel):
    """``session:compress`` — a compaction was committed."""

    name: Literal["session:compress"] = "session:compress"
    platform: str
    chat: str
    session_id: str
    old_session_id: str  # "" when compacted in place
    in_place: bool
    compression_count: int
    trigger: Trigger
    tokens_before: int
    tokens_after: int
    summarizer: str
    ts: float = Field(default_factory=time.time)
    #: The summary message the compaction put into the live transcript ("" when it wrote none).
    summary_id: str = ""
    #: Ids of the messages it moved to the archive, in order.
    archived_ids: list[str] = Field(default_factory=list)


class TurnEvent(BaseModel):
    """``turn:done`` — one incoming message was answered (or recorded)."""

    name: Literal["turn:done"] = "turn:done"
    platform: str
    chat: str
    session_id: str
    prompt_tokens: int
    completion_tokens: int
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    latency_ms: float
    model: str = ""
    cost_usd: float = 0.0  # what the turn's tokens cost (0 for an unpriced model)
    saved_usd: float = 0.0  # what prompt caching saved against no caching
    ts: float = Field(default_factory=time.time)
    #: The context's size once the turn was committed (the provider's last report, else the stored
    #: count: what hygiene judges), and the model's window.
    context_tokens: int = 0
    context_window: int = 0
    #: Plain words when the provider failed the turn part-way ("" for a turn that went well).
    error: str = ""


#: Why a message could not be answered now: the provider went away (its outage began), stayed away
#: past ``gateway.outage_retry_seconds`` (the message is stored unanswered), or handling it kept failing.
FailureKind = Literal["provider_away", "provider_gave_up", "failed"]


class TurnErrorEvent(BaseModel):
    """``turn:error`` — a message could not be answered now (see :data:`FailureKind`)."""

    name: Literal["turn:error"] = "turn:error"
    platform: str
    chat: str
    session_id: str
    kind: FailureKind
    #: Plain words for the operator: never the provider's own text (it may echo a key).
    error: str
    ts: float = Field(default_factory=time.time)


#: The outcomes of a tool call that count as failed: not answered as asked (a refusal or a stop is the person's).
FAILED_CALLS = frozenset({"error", "timeout", "down"})


class ToolCallEvent(BaseModel):
    """``tool:call`` — the agent called a tool of an MCP server for a chat: the audit trail of every call."""

    name: Literal["tool:call"] = "tool:call"
    platform: str
    chat: str
    session_id: str
    user_id: str = ""  # who asked: the person whose message the turn answers
    server: str
    tool: str
    argument_bytes: int
    outcome: CallOutcome
    seconds: float
    ts: float = Field(default_factory=time.time)


#: Who wrote to a person's memory: the person (``/remember``, ``/forget``), the model's ``memory`` tool, a
#: compaction publishing what the folded part said about the people who wrote it, or an operator's page.
MemorySource = Literal["remember", "tool", "compaction", "operator"]
#: What a memory write did: an entry added, rewritten or removed, or every entry of a person forgotten.
MemoryAction = Literal["add", "replace", "remove", "forget"]


class MemoryWriteEvent(BaseModel):
    """``memory:write`` — an entry of a person's (or a group's) memory was added, rewritten or removed."""

    name: Literal["memory:write"] = "memory:write"
    platform: str
    chat: str
    #: Whose memory: ``<platform>:<user id>``, or ``""`` for a group's own.
    person: str
    source: MemorySource
    action: MemoryAction
    #: How many entries it changed (a ``/forget all`` can change many).
    entries: int = 1
    ts: float = Field(default_factory=time.time)


Event = CompressEvent | TurnEvent | TurnErrorEvent | ToolCallEvent | MemoryWriteEvent
#: Reads an event back from its JSON (the activity log stores them so).
EVENT_JSON: TypeAdapter[Event] = TypeAdapter(Annotated[Event, Field(discriminator="name")])
Subscriber = Callable[[Event], None | Awaitable[None]]


class EventBus:
    """Fan-out of gateway events, plus running counters for metrics."""

    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []
        self.counters: Counter[str] = Counter()

    def subscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.append(subscriber)

    async def emit(self, event: Event) -> None:
        self._count(event)
        for subscriber in list(self._subscribers):
            try:
                result = subscriber(event)
                if result is not None:
                    await result
            except Exception:  # an observer must never break a turn
                log.exception("event subscriber failed on %s", event.name)

    def _count(self, event: Event) -> None:
        if isinstance(event, CompressEvent):
            self.counters[f"compactions_{event.trigger}"] += 1
            self.counters["tokens_folded"] += max(0, event.tokens_before - event.tokens_after)
        elif isinstance(event, TurnErrorEvent):  # an outage counts once, when it begins
            self.counters["provider_errors" if event.kind == "provider_away" else "turns_failed"] += 1
        elif isinstance(event, ToolCallEvent):
            self.counters["tool_calls"] += 1
            self.counters["tool_calls_failed"] += event.outcome in FAILED_CALLS
        elif isinstance(event, MemoryWriteEvent):
            self.counters[f"memory_writes_{event.source}"] += event.entries
        else:
            self.counters["provider_errors"] += bool(event.error)
            self.counters["turns"] += 1
            self.counters["prompt_tokens"] += event.prompt_tokens
            self.counters["completion_tokens"] += event.completion_tokens
            self.counters["cache_read_tokens"] += event.cache_read_tokens
            self.counters["cache_write_tokens"] += event.cache_write_tokens
            self.counters["cost_usd"] += event.cost_usd
            self.counters["cache_saved_usd"] += event.saved_usd
