"""Token usage reported by a provider, normalised across API dialects.

OpenAI-style responses report ``prompt_tokens``/``completion_tokens``/``total_tokens``
with cached tokens under ``prompt_tokens_details.cached_tokens``; Anthropic reports
``input_tokens``/``output_tokens`` where the input EXCLUDES what was read from or
written to the prompt cache. OpenRouter uses OpenAI's shape and adds the cache writes it
passes through from Anthropic as ``prompt_tokens_details.cache_write_tokens``. :class:`Usage`
always means the whole prompt by ``prompt_tokens``, because that is what fills the context window.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


def _int(value: Any) -> int:
    if type(value) is int:  # what providers send; the rest is coerced or read as 0
        return value if value > 0 else 0
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


@dataclass(frozen=True)
class Usage:
    """One response's token usage; ``prompt_tokens`` is the full prompt size, cache included."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    @classmethod
    def from_mapping(cls, usage: Mapping[str, Any] | Usage | None) -> Usage:
        """Read either dialect (or a :class:`Usage`, or our own field names) into one shape."""
        if usage is None:
            return cls()
        if isinstance(usage, Usage):
            return usage
        if "input_tokens" in usage or "output_tokens" in usage:
            return cls._from_anthropic(usage)
        prompt = _int(usage.get("prompt_tokens"))
        completion = _int(usage.get("completion_tokens"))
        details = usage.get("prompt_tokens_details") or {}
        completion_details = usage.get("completion_tokens_details") or {}
        if not isinstance(details, Mapping):
            details = {}
        cache_read = _int(details.get("cached_tokens"))
        cache_write = _int(details.get("cache_write_tokens"))
        reasoning = _int(completion_details.get("reasoning_tokens")) if isinstance(completion_details, Mapping) else 0
        return cls(
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=_int(usage.get("total_tokens")) or prompt + completion,
            cache_read_tokens=cache_read or _int(usage.get("cache_read_tokens")),
            cache_write_tokens=cache_write or _int(usage.get("cache_write_tokens")),
            reasoning_tokens=reasoning or _int(usage.get("reasoning_tokens")),
        )

    @classmethod
    def _from_anthropic(cls, usage: Mapping[str, Any]) -> Usage:
        uncached = _int(usage.get("input_tokens"))
        cache_read = _int(usage.get("cache_read_input_tokens"))
        cache_write = _int(usage.get("cache_creation_input_tokens"))
        completion = _int(usage.get("output_tokens"))
        prompt = uncached + cache_read + cache_write
        return cls(
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=prompt + completion,
            cache_read_tokens=cache_read,
            cache_write_tokens=cache_write,
        )

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.total_tokens + other.total_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )

    def astuple(self) -> tuple[int, ...]:
        return (
            self.prompt_tokens,
            self.completion_tokens,
            self.total_tokens,
            self.cache_read_tokens,
            self.cache_write_tokens,
            self.reasoning_tokens,
        )

    def as_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "reasoning_tokens": self.reasoning_tokens,
        }
