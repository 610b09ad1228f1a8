"""Model catalog: each model's window, the local ``-900k`` aliases, and the request rules per family.

The window decides everything compaction does (thresholds, tail and summary budgets),
so it must be right for the models people actually run. One table, matched by
substring so provider prefixes (``anthropic/claude-sonnet-4``, ``openai/gpt-4o``) and
dated snapshots (``claude-3-5-sonnet-20241022``) resolve too; the longest matching key
wins, the same rule as ``compression.model_thresholds``. Unknown names get a
conservative default, and configuration can override any entry.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar
from urllib.parse import urlsplit

log = logging.getLogger(__name__)
T = TypeVar("T")

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


#: name fragment (lower case) -> whether the model takes images. Longest matching fragment wins; a model
#: no fragment matches is taken to see (most current models do, and a wrong "yes" costs one refused
#: request, where a wrong "no" hides every photo); configuration can say otherwise per model.
VISION: dict[str, bool] = {
    # OpenAI
    "gpt-3.5": False,
    "gpt-4": False,  # the original gpt-4 (8K) reads text only
    "gpt-4-turbo": True,
    "gpt-4-vision": True,
    "gpt-4o": True,
    "gpt-4.1": True,
    "gpt-4.5": True,
    "gpt-5": True,
    "o1": True,
    "o1-mini": False,
    "o1-preview": False,
    "o3": True,
    "o3-mini": False,
    "o4-mini": True,
    # Anthropic: Claude 3 and later see; the older families do not
    "claude": True,
    "claude-2": False,
    "claude-instant": False,
    # Others
    "gemini": True,
    "grok-4": True,
    "deepseek": False,
    "kimi-k2": False,
    "qwen": False,
    "qwen-vl": True,
    "qwen2-vl": True,
    "qwen2.5-vl": True,
    "qwen3-vl": True,
    "glm": False,
    "glm-4.5v": True,
    "glm-4.6v": True,
    "llama-3": False,
    "vision": True,
    "b-vision": True,  # llama-3.2-11b-vision, -90b-vision: longer than "llama-3", so it wins
    "mistral-large": False,
    "pixtral": True,
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
    configured = _configured(model, overrides)
    if configured is not None:
        return int(configured)
    base, large = split_large_alias(model)
    if large:
        return LARGE_ALIAS_CONTEXT_LENGTH
    key = longest_key_match(base, CONTEXT_WINDOWS)
    return CONTEXT_WINDOWS[key] if key is not None else DEFAULT_CONTEXT_LENGTH


def vision_for(model: str | None, overrides: Mapping[str, bool] | None = None) -> bool:
    """Whether ``model`` takes images: configured overrides first, then :data:`VISION`, else yes."""
    if not model:
        return True
    configured = _configured(model, overrides)
    if configured is not None:
        return bool(configured)
    key = longest_key_match(bare_model_id(model), VISION)
    return VISION[key] if key is not None else True


def _configured(model: str, overrides: Mapping[str, T] | None) -> T | None:
    """The configured value of the longest key of ``overrides`` that ``model`` contains, or None."""
    key = longest_key_match(model, overrides) if overrides else None
    return None if key is None or overrides is None else overrides[key]


# --------------------------------------------------------------------------- request rules

#: Where a request goes, for the rules below: the provider's own API, OpenRouter, or any other endpoint.
RouteName = Literal["openai", "anthropic", "openrouter", "openai-codex", "custom", "local"]

#: OpenAI's reasoning families: they refuse ``max_tokens`` (wanting ``max_completion_tokens``) and any temperature
#: but 1.
_OPENAI_REASONING = re.compile(r"^(?:o[1-9](?:-|$)|gpt-5(?:$|[.\-]))")
#: Routes that take ``modalities: ["image", "text"]`` (OpenAI's own API takes only text and audio there).
IMAGE_OUTPUT_ROUTES = frozenset({"openrouter", "custom"})
#: Models that answer with images as well as text (OpenRouter lists them with "image" among their outputs).
_IMAGE_MODELS = re.compile(r"-image(?:-|$)")
#: Model families known to take ``temperature`` and the classic token limit field.
_STANDARD_FAMILIES = re.compile(
    r"^(?:gpt-4|gpt-3\.5|chatgpt-4o|claude|glm|gemini|gemma|deepseek|qwen|llama|mistral|mixtral|codestral|"
    r"kimi|moonshot|grok|command|phi|yi-|minimax|foldgate)"
)


@dataclass(frozen=True)
class RequestRules:
    """What one model accepts on one route, decided in one place so every client sends the same.

    ``token_limit_field``: the chat-completions field for the answer's length;
    ``temperature``: whether a temperature may be sent at all; ``known``: whether a row of
    the table matched (an unknown model gets the conservative default: no temperature,
    the route's usual token field).
    """

    family: str
    token_limit_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    temperature: bool = True
    known: bool = True
    #: An image model (``gemini-2.5-flash-image``, ``gpt-5-image``): asked for images with its text.
    image_output: bool = False

    def describe(self) -> str:
        sampling = "temperature allowed" if self.temperature else "no temperature"
        return f"{self.family}: {self.token_limit_field}, {sampling}"


def bare_model_id(model: str) -> str:
    """The model id without provider prefix or local alias suffix, lower case (``openai/gpt-5-900k`` → ``gpt-5``)."""
    bare = model.rsplit("/", 1)[-1].lower()
    return bare[: -len(LARGE_ALIAS_SUFFIX)] if bare.endswith(LARGE_ALIAS_SUFFIX) else bare


def _claude_refuses_sampling(bare: str) -> bool:
    """Claude 4.7 and later refuse ``temperature`` (400 "temperature is deprecated for this model")."""
    rest = bare[len("claude") :]
    match = re.search(r"(?<![0-9])([1-9])[.-]([0-9])(?![0-9])", rest)
    if match:
        major, minor = int(match.group(1)), int(match.group(2))
    else:
        whole = re.search(r"(?<![0-9])([1-9])(?![0-9])", rest)
        if not whole:
            return False
        major, minor = int(whole.group(1)), 0
    return (major, minor) >= (4, 7)


@functools.lru_cache(maxsize=1024)
def request_rules(model: str, route: str) -> RequestRules:
    """The rules for ``model`` on ``route`` (a provider name; anything unknown is ``custom``).

    Cached, so every request asks and a model the table does not know is logged once, with the
    rule it gets.
    """
    bare = bare_model_id(model)
    rules = _decide_rules(bare, route)
    if route in IMAGE_OUTPUT_ROUTES and _IMAGE_MODELS.search(bare):
        rules = dataclasses.replace(rules, image_output=True)
    if not rules.known:
        log.info(
            "model %s is not in foldgate's request rules; sending it the conservative default (%s)",
            model,
            rules.describe(),
        )
    return rules


def _decide_rules(bare: str, route: str) -> RequestRules:
    if _OPENAI_REASONING.match(bare):
        family = "OpenAI reasoning (o-series, gpt-5)"
        # OpenRouter documents max_tokens for every model and translates it; everywhere else these refuse it.
        field: Literal["max_tokens", "max_completion_tokens"] = (
            "max_tokens" if route == "openrouter" else "max_completion_tokens"
        )
        return RequestRules(family, field, temperature=False)
    native_openai = route in ("openai", "openai-codex")
    field = "max_completion_tokens" if native_openai else "max_tokens"  # OpenAI deprecated max_tokens on its own API
    if route == "anthropic":
        # The Messages API's request type carries no sampling parameters any more (whatever the model).
        return RequestRules("Anthropic Messages", "max_tokens", temperature=False, known=bare.startswith("claude"))
    if bare.startswith("claude") and _claude_refuses_sampling(bare):
        return RequestRules("Claude 4.7 and later", field, temperature=False)
    standard = _STANDARD_FAMILIES.match(bare)
    if standard:
        return RequestRules(standard.group(0).rstrip("-"), field, temperature=True)
    return RequestRules("unknown model", field, temperature=False, known=False)


#: Provider hosts whose own request rules apply even when reached through an explicit base URL.
_ROUTE_HOSTS = {"api.openai.com": "openai", "openrouter.ai": "openrouter", "api.anthropic.com": "anthropic"}


def route_of_url(base_url: str) -> str:
    """The route whose rules apply to ``base_url``: a provider's own host, else ``custom``."""
    host = (urlsplit(base_url).hostname or "").lower()
    return _ROUTE_HOSTS.get(host, "custom")
