"""Where a model's window comes from, and what a provider's context-length refusal teaches about it.

Everything compaction does is sized from the window, and a wrong guess is the most common way it
fails in the field: people run local and proxied models whose names no catalog knows. So the
window is taken, in order, from the configuration, from what the provider itself reports, from
the catalog, and only then from a default; a summarizer's default never exceeds the chat model's
window (the summarizer reads what the chat model's context held).

A provider that refuses a request as too long knows better than any of those. Its refusal is
kept in a :class:`WindowBook` per endpoint and model, shared by every process of a deployment, and
only ever lowers the window: the work is then redone within it, and the same refusal is not met
twice. A refusal that names no number halves the window, at most :data:`MAX_HALVINGS` times below
where it started; past that only the operator can say the real figure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from agent.llm.errors import ContextTooLong
from agent.models import (
    CONTEXT_WINDOWS,
    DEFAULT_CONTEXT_LENGTH,
    LARGE_ALIAS_CONTEXT_LENGTH,
    longest_key_match,
    split_large_alias,
)

#: Refusals without a number halve the window at most this many times below its starting point.
MAX_HALVINGS = 3
#: No model worth compacting for has a smaller window; a parsed number below it is not a window.
SMALLEST_WINDOW = 1_024


@dataclass(frozen=True)
class ModelWindow:
    """A model's window in tokens and, in words for a start line or ``foldgate doctor``, where it came from."""

    tokens: int
    source: str

    def lowered_to(self, learned: int | None) -> ModelWindow:
        """This window, or the smaller one a refusal taught (which then says what it replaced)."""
        if learned is None or learned >= self.tokens:
            return self
        return ModelWindow(learned, f"learned from a refusal (was {self.tokens:,}, {self.source})")

    def describe(self) -> str:
        return f"{self.tokens:,} tokens ({self.source})"


def catalog_window(model: str) -> int | None:
    """The catalog's window for ``model`` (longest matching name fragment), or None for a name it does not know."""
    base, large = split_large_alias(model)
    if large:
        return LARGE_ALIAS_CONTEXT_LENGTH
    key = longest_key_match(base, CONTEXT_WINDOWS)
    return CONTEXT_WINDOWS[key] if key is not None else None


def configured_window(model: str, overrides: Mapping[str, int] | None) -> int | None:
    """The configured window of the longest key of ``overrides`` that ``model`` contains, or None."""
    key = longest_key_match(model, overrides) if overrides else None
    return None if key is None or overrides is None else int(overrides[key])


def resolve_window(
    model: str,
    *,
    configured: int | None,
    configured_key: str,
    reported: tuple[int, str] | None = None,
    default_cap: ModelWindow | None = None,
) -> ModelWindow:
    """The window of ``model``: configured, else reported by the provider, else the catalog's, else the default.

    ``configured_key`` names the setting in the source words; ``reported`` is the provider's own figure and
    how it said it; ``default_cap`` is the chat model's window when this is its summarizer, so a guess for
    the summarizer never exceeds what it will be asked to read.
    """
    if configured:
        return ModelWindow(configured, f"configured: {configured_key}")
    if reported is not None:
        return ModelWindow(reported[0], f"reported by the provider: {reported[1]}")
    catalog = catalog_window(model)
    if catalog is not None:
        return ModelWindow(catalog, "foldgate's model catalog")
    if default_cap is not None and default_cap.tokens < DEFAULT_CONTEXT_LENGTH:
        return ModelWindow(
            default_cap.tokens, f"unknown model: assumed no larger than the chat model's window — set {configured_key}"
        )
    return ModelWindow(DEFAULT_CONTEXT_LENGTH, f"unknown model: a default — set {configured_key}")


class WindowBook(Protocol):
    """Windows that refusals taught, per endpoint and model, shared wherever the book is kept."""

    def learned(self, endpoint: str, model: str) -> int | None:
        """The smallest window learned for ``model`` at ``endpoint``, or None (never waits on anything)."""
        ...

    async def learn(self, endpoint: str, model: str, tokens: int) -> int:
        """Keep ``tokens`` unless a smaller window is known already; returns the window now kept."""
        ...


class MemoryWindowBook:
    """A :class:`WindowBook` of one process (offline commands, tests); the gateway keeps its book in Redis."""

    def __init__(self) -> None:
        self.windows: dict[tuple[str, str], int] = {}

    def learned(self, endpoint: str, model: str) -> int | None:
        return self.windows.get((endpoint, model))

    async def learn(self, endpoint: str, model: str, tokens: int) -> int:
        kept = min(tokens, self.windows.get((endpoint, model), tokens))
        self.windows[(endpoint, model)] = kept
        return kept


class WindowUnknown(Exception):
    """Refusals named no window and halving is used up: the operator must set the window."""


def taught_window(refusal: ContextTooLong, *, assumed: int, started: int, setting: str) -> int:
    """The window a refusal teaches, below ``assumed`` (the window the refused request was planned for).

    The provider's own figure when it names one; otherwise half of ``assumed``, unless that would take
    the window more than :data:`MAX_HALVINGS` halvings below ``started`` (where it began before any
    refusal), which raises :class:`WindowUnknown` naming ``setting``.
    """
    # A cap on the prompt alone (GPT-5's "configured limit") is taken as the window: planning the answer's room
    # inside it as well costs a little of the prompt, and the refusal never comes back.
    named = getattr(refusal, "window", None) or getattr(refusal, "input_limit", None)
    if isinstance(named, int) and SMALLEST_WINDOW <= named < assumed:
        return named
    halved = assumed // 2
    if halved < max(started >> MAX_HALVINGS, SMALLEST_WINDOW):
        raise WindowUnknown(
            f"the provider keeps refusing requests as too long without saying its window (assumed {assumed:,} "
            f"tokens, halved {MAX_HALVINGS} times) — set {setting} to the model's real window"
        )
    return halved


class WindowTeacher:
    """What one model at one endpoint learns from refusals: the book it writes to, and the setting to name."""

    def __init__(self, book: WindowBook, endpoint: str, model: str, *, start: ModelWindow, setting: str) -> None:
        self.book = book
        self.endpoint = endpoint
        self.model = model
        self.start = start
        self.setting = setting

    @property
    def window(self) -> ModelWindow:
        """The window to plan for now: where it started, lowered by what refusals taught anywhere."""
        return self.start.lowered_to(self.book.learned(self.endpoint, self.model))

    async def refused(self, refusal: ContextTooLong, assumed: int) -> int:
        """Learn from ``refusal`` of a request planned for ``assumed`` tokens; returns the window to plan for now.

        Raises :class:`WindowUnknown` when no smaller window can be taught.
        """
        known = self.window.tokens
        if known < assumed:  # another turn or process learned it already: plan for that
            return known
        taught = taught_window(refusal, assumed=assumed, started=self.start.tokens, setting=self.setting)
        return await self.book.learn(self.endpoint, self.model, taught)
