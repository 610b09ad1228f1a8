"""What a provider call returns, independent of the API dialect that produced it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent.messages import Message
from agent.usage import Usage


@dataclass(frozen=True)
class MadeImage:
    """An image a model returned with its answer, decoded from the provider's ``data:`` URL."""

    data: bytes
    mime: str


@dataclass(frozen=True)
class Completion:
    """One model answer in OpenAI terms.

    ``tool_calls`` are OpenAI-format dicts (``{"id", "type": "function", "function": {"name",
    "arguments"}}``) whatever the dialect; ``finish_reason`` is ``stop``, ``length``,
    ``tool_calls`` or ``content_filter``; ``raw`` is the provider's decoded JSON body.
    """

    text: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str = "stop"
    usage: Usage = field(default_factory=Usage)
    raw: dict[str, Any] = field(default_factory=dict)
    #: Images the model made with its answer (an image model behind OpenRouter), decoded, in order.
    images: tuple[MadeImage, ...] = ()

    @property
    def truncated(self) -> bool:
        """The model stopped because it ran out of ``max_tokens``."""
        return self.finish_reason == "length"

    @property
    def native_compactions(self) -> int:
        """How often the provider compacted the conversation itself while answering; only
        routes whose server keeps the context (a codex thread, Responses native compaction) do."""
        return 0

    def as_message(self) -> Message:
        """The answer as an assistant message to append to the history."""
        message: Message = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            message["tool_calls"] = [dict(call) for call in self.tool_calls]
        return message
