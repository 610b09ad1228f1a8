"""The pluggable context engine: the interface and its compaction stats.

An engine decides when the context must shrink, shrinks it, may offer the model tools
(e.g. a plugin's ``lcm_grep``), and learns the real prompt size from every response.
The gateway and the agent loop only talk to this interface, so a plugin engine drops in
through ``context.engine`` without either of them changing.

Finding an engine by its ``context.engine`` name is :mod:`agent.engine_registry`'s.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from agent import json_codec
from agent.messages import Message
from agent.usage import Usage

#: Builds an engine; called with keyword arguments ``model``, ``context_length`` and, when
#: available, ``settings`` (CompressionSettings), ``summarizer`` and ``summarizer_context_length``.
EngineFactory = Callable[..., "ContextEngine"]


@dataclass(frozen=True)
class CompactionStats:
    """What the last :meth:`ContextEngine.compress` did.

    ``outcome`` is ``compacted``, ``skipped`` (nothing to do) or ``aborted`` (transcript kept
    unchanged, e.g. the summarizer failed below the critical level). ``summarizer`` names
    what wrote the notes: the model, ``"deterministic"`` (none configured), ``"fallback"``
    (the model failed), or ``"none"``. ``replaced_ids`` are the ids of input messages that
    are not in the output under the same id (folded into the summary, stubbed, or dropped
    as orphans): the store archives exactly those.
    """

    outcome: str
    reason: str = ""
    tokens_before: int = 0
    tokens_after: int = 0
    messages_before: int = 0
    messages_after: int = 0
    summary_tokens: int = 0
    tail_mode: str = ""
    summarizer: str = "none"
    calls: int = 0
    compacted_messages: int = 0
    stubbed_messages: int = 0
    replaced_ids: tuple[str, ...] = field(default_factory=tuple)
    error: str | None = None
    forced: bool = False

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["replaced_ids"] = list(self.replaced_ids)
        return data


class ContextEngine(ABC):
    """Decides when and how a session's context shrinks; records the provider's real usage."""

    #: Engine name as configured in ``context.engine``.
    name: str = "engine"
    #: Whether the messages the agent sends are the whole prompt, so that compacting them shrinks it. An engine
    #: whose provider keeps the conversation itself (a codex thread) says False: the agent's window check skips it.
    rewrites_transcript: bool = True

    def __init__(self, model: str, context_length: int) -> None:
        self.model = model
        self.context_length = context_length
        self.threshold = 0.5
        self.compression_count = 0
        self.last_prompt_tokens: int | None = None
        self.last_usage: Usage | None = None
        self.session_usage = Usage()
        self.last_compaction: CompactionStats | None = None
        self.session_id: str | None = None

    @property
    def threshold_tokens(self) -> int:
        """Prompt size at which compaction fires."""
        return int(self.context_length * self.threshold)

    @abstractmethod
    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        """Whether the context should be compacted now (``prompt_tokens`` defaults to the last reported size)."""

    @abstractmethod
    async def compress(
        self,
        messages: list[Message],
        current_tokens: int | None = None,
        focus_topic: str | None = None,
        force: bool = False,
    ) -> list[Message]:
        """The compacted message list (valid OpenAI format); the input list is never mutated."""

    def should_idle_compact(self, idle_seconds: float, prompt_tokens: int | None = None) -> bool:
        """Whether to compact before a turn that resumes after ``idle_seconds`` of silence; off by default."""
        return False

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        """OpenAI function-tool schemas this engine offers the model."""
        return []

    async def handle_tool_call(self, name: str, args: dict[str, Any]) -> str:
        """Run one of :meth:`get_tool_schemas`' tools; the result is a JSON string."""
        return json_codec.dumps_text({"error": f"{self.name} engine has no tool {name!r}"})

    def update_from_response(self, usage: Mapping[str, Any] | Usage) -> Usage:
        """Record one response's usage (OpenAI or Anthropic field names) and return it normalised."""
        normalised = Usage.from_mapping(usage)
        self.last_usage = normalised
        self.session_usage = self.session_usage + normalised
        if normalised.prompt_tokens:
            self.last_prompt_tokens = normalised.prompt_tokens
        return normalised

    def on_session_start(self, session_id: str) -> None:
        self.session_id = session_id

    def on_session_end(self, session_id: str) -> None:
        """The session is closing; engines flush or release per-session resources here."""

    def on_session_reset(self) -> None:
        """``/new``: a fresh conversation, so nothing learned about the old one applies."""
        self.compression_count = 0
        self.last_prompt_tokens = None
        self.last_usage = None
        self.session_usage = Usage()
        self.last_compaction = None

    def update_model(self, model: str, context_length: int) -> None:
        self.model = model
        self.context_length = context_length

    def export_state(self) -> dict[str, Any]:
        """JSON-safe state the gateway persists in the session meta."""
        return {
            "compression_count": self.compression_count,
            "last_prompt_tokens": self.last_prompt_tokens,
            "session_usage": self.session_usage.as_dict(),
        }

    def load_state(self, state: Mapping[str, Any] | None) -> None:
        """Restore :meth:`export_state` output (missing keys keep their defaults)."""
        state = state or {}
        self.compression_count = int(state.get("compression_count") or 0)
        last = state.get("last_prompt_tokens")
        self.last_prompt_tokens = int(last) if last is not None else None
        self.session_usage = Usage.from_mapping(state.get("session_usage") or None)
