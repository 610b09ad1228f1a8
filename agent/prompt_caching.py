"""Anthropic prompt caching: where the ``cache_control`` breakpoints go, and when caching is on.

A provider-side cache is keyed by an exact prefix of the request (tools, then system,
then messages) and by the model and account. Anthropic caches a prefix only where the
request marks a breakpoint, and allows at most four per request. The strategy here is
``system_and_3``: one breakpoint on the system prompt, which never changes during a
conversation (compaction adds its note once, on the first compaction), and a rolling
window on the last three non-system messages, so each request reads what the previous
one wrote and writes only what is new.

Markers go on a deep copy; the caller's messages are never touched, so the stored
transcript stays marker-free and a later request can place its own window.

Compaction and the cache: the head of the conversation, the system prompt with it,
is kept verbatim by every compaction, so after a compaction the system breakpoint is
still a hit (except right after the first one, which appends its note once) and the
rolling window is warm again one request later. The summarizer's requests carry no
breakpoints: they are a pruned, re-rendered transcript under the summarizer's own
instructions, which shares no prefix with the conversation (and whose instructions are
shorter than the smallest cacheable prefix), so a marker there could only buy a 1.25×
write that nothing reads. ``foldgate bench caching`` measures both effects.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlparse

CacheTTL = Literal["5m", "1h"]

#: Anthropic refuses a request with more breakpoints than this.
MAX_BREAKPOINTS = 4
#: Non-system messages at the end of the request that carry a breakpoint.
ROLLING_WINDOW = MAX_BREAKPOINTS - 1

#: provider -> how the status line names the route, for routes that honour ``cache_control``.
CACHE_CONTROL_ROUTES: dict[str, str] = {"anthropic": "Anthropic", "openrouter": "OpenRouter"}
#: Hosts that identify a ``custom`` base URL as one of those routes.
_OPENROUTER_HOST = "openrouter.ai"


def cache_marker(ttl: str = "5m") -> dict[str, str]:
    """The ``cache_control`` value for ``ttl`` (``5m`` is the provider default, so it is left implicit)."""
    if ttl == "5m":
        return {"type": "ephemeral"}
    if ttl == "1h":
        return {"type": "ephemeral", "ttl": "1h"}
    raise ValueError(f"cache_ttl must be '5m' or '1h', got {ttl!r}")


def _strip_markers(message: dict[str, Any]) -> None:
    """Drop any breakpoint already present, so the four-breakpoint limit holds whatever came in."""
    message.pop("cache_control", None)
    content = message.get("content")
    if isinstance(content, list):
        for part in content:
            if isinstance(part, dict):
                part.pop("cache_control", None)


def _mark(message: dict[str, Any], marker: Mapping[str, str], native_anthropic: bool) -> bool:
    """Put ``marker`` on one copied message; False where the route cannot take one.

    A top-level marker on a tool message is understood by the native messages API (it
    lands on the ``tool_result`` block) but stalls requests through OpenRouter, so there
    the tool message goes unmarked; there a list's marker goes on its last text part, and
    a list without text goes unmarked.
    """
    role = message.get("role")
    content = message.get("content")
    if role == "tool":
        if not native_anthropic:
            return False
        message["cache_control"] = dict(marker)
        return True
    if not content:
        message["cache_control"] = dict(marker)
        return True
    if isinstance(content, str):
        message["content"] = [{"type": "text", "text": content, "cache_control": dict(marker)}]
        return True
    if native_anthropic:
        last = content[-1]
        if isinstance(last, dict):
            last["cache_control"] = dict(marker)
        else:
            content[-1] = {"type": "text", "text": str(last), "cache_control": dict(marker)}
        return True
    # Through OpenRouter a marker belongs on a text part (an image part cannot carry one there).
    for index in range(len(content) - 1, -1, -1):
        part = content[index]
        if isinstance(part, str):
            content[index] = {"type": "text", "text": part, "cache_control": dict(marker)}
            return True
        if isinstance(part, dict) and part.get("type", "text") == "text":
            part["cache_control"] = dict(marker)
            return True
    return False


def breakpoint_indexes(messages: Sequence[Mapping[str, Any]], native_anthropic: bool = True) -> list[int]:
    """Positions that get a breakpoint: the first system message, then the last three others.

    Off the native API a tool message cannot carry a marker, so the window counts only the
    messages that can: in a tool loop with parallel calls the last three messages are often all
    tool results, and skipping them would leave the whole conversation uncached.
    """
    system = [i for i, m in enumerate(messages) if m.get("role") == "system"][:1]
    others = [
        i for i, m in enumerate(messages) if m.get("role") != "system" and (native_anthropic or m.get("role") != "tool")
    ]
    return system + others[-ROLLING_WINDOW:]


def apply_anthropic_cache_control(
    messages: Sequence[Mapping[str, Any]],
    cache_ttl: str = "5m",
    native_anthropic: bool = False,
) -> list[dict[str, Any]]:
    """A deep copy of ``messages`` with at most four ``cache_control`` breakpoints (``system_and_3``).

    Placement: string content becomes one text part carrying the marker; list content gets
    it on its last part; None or empty content gets it on the message; a tool message gets
    it on the message only when ``native_anthropic`` (the messages API itself).
    """
    marker = cache_marker(cache_ttl)
    copied: list[dict[str, Any]] = copy.deepcopy([dict(m) for m in messages])
    for message in copied:
        _strip_markers(message)
    for index in breakpoint_indexes(copied, native_anthropic):
        _mark(copied[index], marker, native_anthropic)
    return copied


def count_breakpoints(messages: Sequence[Mapping[str, Any]]) -> int:
    """How many ``cache_control`` markers a message list carries (message-level and on parts)."""
    total = 0
    for message in messages:
        total += "cache_control" in message
        content = message.get("content")
        if isinstance(content, list):
            total += sum(1 for part in content if isinstance(part, Mapping) and "cache_control" in part)
    return total


# --------------------------------------------------------------------------- when caching is on


def is_claude(model: str) -> bool:
    """Claude by name (``claude-sonnet-4``, ``anthropic/claude-3.5-haiku``, dated snapshots)."""
    return "claude" in model.lower()


def cache_route(provider: str, base_url: str | None = None) -> str | None:
    """The display name of a route that honours ``cache_control``, or None.

    ``anthropic`` is the native messages API; ``openrouter`` passes markers through to
    Anthropic. A ``custom`` base URL counts only when it is OpenRouter's host.
    """
    if provider in CACHE_CONTROL_ROUTES:
        return CACHE_CONTROL_ROUTES[provider]
    if provider == "custom" and base_url:
        host = (urlparse(base_url).hostname or "").lower()
        if host == _OPENROUTER_HOST or host.endswith("." + _OPENROUTER_HOST):
            return CACHE_CONTROL_ROUTES["openrouter"]
    return None


#: Takes the messages a request sends, as any mapping (the agent's typed messages included); returns copies.
RequestHook = Callable[[Sequence[Mapping[str, Any]]], list[dict[str, Any]]]


@dataclass(frozen=True)
class CachingPlan:
    """Whether a session's requests get breakpoints, how, and the reason in words."""

    enabled: bool
    reason: str
    ttl: str = "5m"
    native_anthropic: bool = False

    @property
    def status_line(self) -> str:
        """The start-up line, e.g. ``💾 Prompt caching: ENABLED (Claude via OpenRouter, 5m TTL)``."""
        if self.enabled:
            return f"💾 Prompt caching: ENABLED ({self.reason}, {self.ttl} TTL)"
        return f"💾 Prompt caching: DISABLED ({self.reason})"

    def request_hook(self) -> RequestHook | None:
        """The agent's ``request_hook`` that places the breakpoints, or None when caching is off."""
        if not self.enabled:
            return None
        ttl, native = self.ttl, self.native_anthropic

        def place_breakpoints(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
            return apply_anthropic_cache_control(messages, cache_ttl=ttl, native_anthropic=native)

        return place_breakpoints


def plan_prompt_caching(
    model: str,
    provider: str,
    *,
    enabled: bool = True,
    cache_ttl: str = "5m",
    base_url: str | None = None,
) -> CachingPlan:
    """Whether to cache: on for a Claude model on a route that supports ``cache_control``, off otherwise (with why)."""
    cache_marker(cache_ttl)  # refuse a bad TTL early
    if not enabled:
        return CachingPlan(False, "turned off by prompt_caching.enabled", cache_ttl)
    if not is_claude(model):
        return CachingPlan(False, f"{model} is not a Claude model", cache_ttl)
    route = cache_route(provider, base_url)
    if route is None:
        return CachingPlan(False, f"provider {provider} does not pass cache_control through", cache_ttl)
    return CachingPlan(True, f"Claude via {route}", cache_ttl, native_anthropic=provider == "anthropic")
