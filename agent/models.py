"""Model catalog: how many tokens each model's window holds, and the local ``-900k`` aliases.

The window decides everything compaction does (thresholds, tail and summary budgets),
so it must be right for the models people actually run. One table, matched by
substring so provider prefixes (``anthropic/claude-sonnet-4``, ``openai/gpt-4o``) and
dated snapshots (``claude-3-5-sonnet-20241022``) resolve too; the longest matching key
wins, the same rule as ``compression.model_thresholds``. Unknown names get a
conservative default, and configuration can override any entry.
"""

from __future__ import annotations

from collections.abc import Mapping

#: Window used for a model the catalog does not know (small enough to be safe on most routes).
DEFAULT_CONTEXT_LENGTH = 128_000

#: Input window of the ``-900k`` aliases (what the Codex backend accepts for those families).
LARGE_ALIAS_CONTEXT_LENGTH = 911_000
#: Suffix that marks a local large-window alias; stripped before the id is sent.
LARGE_ALIAS_SUFFIX = "-900k"
#: Base names that have a ``-900k`` alias; every other name refuses the suffix.
LARGE_ALIAS_BASES = frozenset({"gpt-5.6-sol", "gpt-5.6-terra", "gpt-5.6-luna", "gpt-5.4"})

#: name fragment (lower case) -> context window in tokens. Longest matching fragment wins.
CONTEXT_WINDOWS: dict[str, int] = {
    # Anthropic
    "claude": 200_000,
    "claude-3-haiku": 200_000,
    "claude-3-5": 200_000,
    "claude-3-7": 200_000,
    "claude-sonnet-4": 200_000,
    "claude-opus-4": 200_000,
    "claude-haiku-4": 200_000,
    # OpenAI
    "gpt-3.5-turbo": 16_385,
    "gpt-4": 8_192,
    "gpt-4-turbo": 128_000,
    "gpt-4o": 128_000,
    "gpt-4o-mini": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-4.1-mini": 1_047_576,
    "gpt-4.1-nano": 1_047_576,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "gpt-5": 400_000,
    "gpt-5-mini": 400_000,
    "gpt-5-nano": 400_000,
    "gpt-5.1": 400_000,
    "gpt-5.2": 400_000,
    "gpt-5.4": 272_000,
    "gpt-5.4-mini": 272_000,
    "gpt-5.5": 272_000,
    "gpt-5.6": 272_000,
    # Zhipu GLM
    "glm": 128_000,
    "glm-4.5": 128_000,
    "glm-4.6": 200_000,
    "glm-5": 200_000,
    "glm-5.2": 200_000,
    "glm-5.2-1m": 1_000_000,
    # Google
    "gemini": 1_048_576,
    "gemini-1.5-pro": 2_097_152,
    # Others commonly served through OpenAI-compatible routes
    "deepseek": 128_000,
    "qwen": 131_072,
    "llama-3": 128_000,
    "mistral-large": 128_000,
    "kimi-k2": 256_000,
    "grok-4": 256_000,
}


class UnknownAlias(ValueError):
    """A ``-900k`` suffix on a model that has no large-window alias."""


def longest_key_match(name: str, table: Mapping[str, object]) -> str | None:
    """The longest key of ``table`` contained in ``name`` (case-insensitive), or None."""
    lowered = name.lower()
    best: str | None = None
    for key in table:
        if key.lower() in lowered and (best is None or len(key) > len(best)):
            best = key
    return best


def split_large_alias(model: str) -> tuple[str, bool]:
    """``(base id to send, is_large_alias)``; refuses ``-900k`` on models without that variant."""
    if not model.lower().endswith(LARGE_ALIAS_SUFFIX):
        return model, False
    base = model[: -len(LARGE_ALIAS_SUFFIX)]
    bare = base.rsplit("/", 1)[-1].lower()
    if bare not in LARGE_ALIAS_BASES:
        allowed = ", ".join(sorted(f"{name}{LARGE_ALIAS_SUFFIX}" for name in LARGE_ALIAS_BASES))
        raise UnknownAlias(f"{model!r} has no {LARGE_ALIAS_SUFFIX} variant; available: {allowed}")
    return base, True


def api_model_id(model: str) -> str:
    """The id a provider receives: local aliases lose their suffix."""
    return split_large_alias(model)[0]


def context_length_for(model: str | None, overrides: Mapping[str, int] | None = None) -> int:
    """The model's context window in tokens: configured overrides first, then the catalog, then the default."""
    if not model:
        return DEFAULT_CONTEXT_LENGTH
    if overrides:
        key = longest_key_match(model, overrides)
        if key is not None:
            return int(overrides[key])
    base, large = split_large_alias(model)
    if large:
        return LARGE_ALIAS_CONTEXT_LENGTH
    key = longest_key_match(base, CONTEXT_WINDOWS)
    return CONTEXT_WINDOWS[key] if key is not None else DEFAULT_CONTEXT_LENGTH
