"""The numbers compaction runs by: thresholds, tail budgets and the summary budget.

All of them derive from the MAIN model's window; the summarizer's window only decides
how many pieces a summary is made in, never when compaction fires.
"""

from __future__ import annotations

from collections.abc import Mapping

from agent.models import longest_key_match

#: Share of the compacted content the summary may use (the seed's ``_SUMMARY_RATIO``).
SUMMARY_RATIO = 0.20
#: Smallest summary budget, whatever the content size.
MIN_SUMMARY_TOKENS = 2_000
#: Largest summary budget, whatever the window.
SUMMARY_TOKENS_CAP = 12_000
#: Share of the window a summary may use at most.
SUMMARY_WINDOW_RATIO = 0.05

#: Windows below this size get the raise-only threshold floor on per-model overrides.
SMALL_CONTEXT_LIMIT = 512_000
SMALL_CONTEXT_FLOOR = 0.75

#: Lean tail: share of the window kept verbatim, and its bounds in tokens.
LEAN_TAIL_RATIO = 0.025
LEAN_TAIL_MIN = 10_000
LEAN_TAIL_MAX = 25_000

#: Context share at which a failed summarizer falls back instead of aborting (the hygiene level).
CRITICAL_RATIO = 0.85


def resolve_model_threshold(
    model: str | None,
    model_thresholds: Mapping[str, float] | None,
    default: float,
    context_length: int,
) -> float:
    """The compaction threshold for ``model``: its ``model_thresholds`` entry, else the global one.

    The longest key of ``model_thresholds`` found in the model name wins; no match gives
    ``default`` unchanged. A matched override below 0.75 is raised to 0.75 for windows
    under 512K tokens (small windows compacting at 25–40% would thrash); overrides above
    the floor, and the global default, are never changed.
    """
    if not model or not model_thresholds:
        return default
    key = longest_key_match(model, model_thresholds)
    if key is None:
        return default
    override = float(model_thresholds[key])
    if context_length < SMALL_CONTEXT_LIMIT and override < SMALL_CONTEXT_FLOOR:
        return SMALL_CONTEXT_FLOOR
    return override


def threshold_tokens(context_length: int, threshold: float) -> int:
    """Prompt size at which compaction fires: ``threshold × context_length``."""
    return int(context_length * threshold)


def max_summary_tokens(context_length: int) -> int:
    """Upper bound of any summary: ``min(context_length × 0.05, 12,000)``."""
    return int(min(context_length * SUMMARY_WINDOW_RATIO, SUMMARY_TOKENS_CAP))


def summary_budget(content_tokens: int, context_length: int) -> int:
    """Tokens one summary may use: 20% of what it replaces, at least 2,000, at most :func:`max_summary_tokens`."""
    return min(max(int(content_tokens * SUMMARY_RATIO), MIN_SUMMARY_TOKENS), max_summary_tokens(context_length))


def legacy_tail_budget(threshold_tokens_: int, target_ratio: float) -> int:
    """Legacy tail kept verbatim: ``threshold_tokens × target_ratio``."""
    return int(threshold_tokens_ * target_ratio)


def lean_tail_budget(context_length: int) -> int:
    """Lean tail: 2.5% of the window, within 10K–25K tokens."""
    return int(min(max(context_length * LEAN_TAIL_RATIO, LEAN_TAIL_MIN), LEAN_TAIL_MAX))
