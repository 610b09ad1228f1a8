"""A fake Anthropic messages API whose prompt cache follows the documented rules, on loopback.

The general fake (:mod:`tests.fakes.llm_server`) only approximates caching; this one is
faithful enough to measure what breakpoints are worth:

- the prompt is a sequence of blocks — tools, then system blocks, then every message's
  content blocks — and a cache entry is an exact prefix of it, per model;
- only a block carrying ``cache_control`` is a breakpoint, and a request may carry at
  most :data:`MAX_BREAKPOINTS` (more is a 400, as Anthropic answers);
- at each breakpoint the cache is looked up at that block boundary and up to
  :data:`LOOKBACK_BLOCKS` boundaries before it; the longest live entry is read;
- a prefix shorter than ``min_cache_tokens`` is never cached;
- what lies between the read prefix and the last breakpoint is written (entries at every
  breakpoint), with the lifetime the marker asks for (5 minutes, or ``ttl: "1h"``); a
  read refreshes the entry's lifetime;
- usage reports ``input_tokens`` (after the last breakpoint, or everything uncached),
  ``cache_read_input_tokens`` and ``cache_creation_input_tokens`` like the real API.

Requests arrive over HTTP through :class:`~tests.fakes.llm_server.FakeLLMServer` (streamed or
not, with its faults and refusals); only the accounting is this module's, through the
``_usage`` hook — a request the server drops without answering is not billed. Time comes
from ``clock`` (seconds), so a benchmark can play hours of conversation with a virtual
clock. Every request's accounting is kept in :attr:`AnthropicCacheServer.ledger`.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.tokens import count_text
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Refused, Usage, anthropic_error

MAX_BREAKPOINTS = 4
LOOKBACK_BLOCKS = 20
TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}
#: Tokens an image block counts for (the fake does not look at pixels).
IMAGE_TOKENS = 1_000


@dataclass
class CacheEntry:
    tokens: int
    ttl: float
    expires_at: float


@dataclass(frozen=True)
class Accounting:
    """One request's usage as the server billed it."""

    model: str
    prompt_tokens: int
    cache_read: int
    cache_write: int
    breakpoints: int
    at: float

    @property
    def uncached(self) -> int:
        return self.prompt_tokens - self.cache_read - self.cache_write


def _block_text(block: Any) -> str:
    if isinstance(block, str):
        return block
    if not isinstance(block, dict):
        return ""
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text") or "")
    if kind == "tool_use":
        return f"{block.get('name')} {json.dumps(block.get('input'), sort_keys=True)}"
    if kind == "tool_result":
        content = block.get("content")
        if isinstance(content, list):
            return "\n".join(_block_text(part) for part in content)
        return str(content or "")
    if "input_schema" in block:  # a tool definition
        return json.dumps({k: v for k, v in block.items() if k != "cache_control"}, sort_keys=True)
    return ""


class AnthropicCacheServer(FakeLLMServer):
    """See the module docstring. Answers come from the inherited queue/handler/default."""

    def __init__(
        self, *, clock: Callable[[], float] = time.monotonic, min_cache_tokens: int = 1024, **kwargs: Any
    ) -> None:
        super().__init__(min_cache_tokens=min_cache_tokens, **kwargs)
        self.clock = clock
        self.entries: dict[tuple[str, str], CacheEntry] = {}
        self.ledger: list[Accounting] = []
        self._token_cache: dict[str, int] = {}

    # -- the cache model ----------------------------------------------------------------

    def _tokens(self, block: Any, role: str | None) -> int:
        if isinstance(block, dict) and block.get("type") == "image":
            return IMAGE_TOKENS
        text = _block_text(block)
        found = self._token_cache.get(text)
        if found is None:
            found = self._token_cache[text] = count_text(text)
        return found + (3 if role else 0)

    def blocks(self, body: dict[str, Any]) -> list[tuple[str, int, dict[str, Any] | None]]:
        """``(serialised block, tokens, cache_control or None)`` in prompt order."""
        out: list[tuple[str, int, dict[str, Any] | None]] = []
        for tool in body.get("tools") or ():
            out.append(
                (
                    "tool" + json.dumps({k: v for k, v in tool.items() if k != "cache_control"}, sort_keys=True),
                    self._tokens(tool, None),
                    tool.get("cache_control"),
                )
            )
        system = body.get("system")
        for block in [{"type": "text", "text": system}] if isinstance(system, str) else list(system or []):
            clean = {k: v for k, v in block.items() if k != "cache_control"}
            out.append(
                ("system" + json.dumps(clean, sort_keys=True), self._tokens(block, None), block.get("cache_control"))
            )
        for message in body.get("messages") or ():
            content = message.get("content")
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
            for index, block in enumerate(blocks):
                clean = {k: v for k, v in block.items() if k != "cache_control"} if isinstance(block, dict) else block
                out.append(
                    (
                        message["role"] + json.dumps(clean, sort_keys=True),
                        self._tokens(block, message["role"] if index == 0 else None),
                        block.get("cache_control") if isinstance(block, dict) else None,
                    )
                )
        return out

    def _live(self, key: tuple[str, str], now: float) -> CacheEntry | None:
        entry = self.entries.get(key)
        if entry is None:
            return None
        if entry.expires_at <= now:
            del self.entries[key]
            return None
        return entry

    def account(self, body: dict[str, Any]) -> Accounting:
        """Look the request up in the cache, write what is new, and return its usage (raises ValueError past 4
        breakpoints)."""
        model = str(body.get("model") or "")
        now = self.clock()
        blocks = self.blocks(body)
        breakpoints = [i for i, (_, _, marker) in enumerate(blocks) if marker is not None]
        if len(breakpoints) > MAX_BREAKPOINTS:
            raise ValueError(
                f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {len(breakpoints)}."
            )
        hasher = hashlib.sha256()
        digests: list[str] = []
        totals: list[int] = []
        running = 0
        for text, tokens, _ in blocks:
            hasher.update(text.encode())
            running += tokens
            digests.append(hasher.hexdigest())
            totals.append(running)
        read_at = -1
        for point in breakpoints:
            for position in range(point, max(-1, point - LOOKBACK_BLOCKS - 1), -1):
                entry = self._live((model, digests[position]), now)
                if entry is not None:
                    entry.expires_at = now + entry.ttl  # a hit refreshes the lifetime
                    read_at = max(read_at, position)
                    break
        read = totals[read_at] if read_at >= 0 else 0
        write = 0
        for point in breakpoints:
            if point <= read_at or totals[point] < self.min_cache_tokens:
                continue
            marker = blocks[point][2] or {}
            ttl = TTL_SECONDS.get(str(marker.get("ttl") or "5m"), TTL_SECONDS["5m"])
            key = (model, digests[point])
            if self._live(key, now) is None:
                self.entries[key] = CacheEntry(totals[point], ttl, now + ttl)
            write = totals[point] - read
        accounting = Accounting(model, running, read, max(0, write), len(breakpoints), now)
        self.ledger.append(accounting)
        return accounting

    def clear(self) -> None:
        self.entries.clear()
        self.ledger.clear()

    # -- HTTP ---------------------------------------------------------------------------

    def _usage(self, request: RecordedRequest) -> Usage:
        """Anthropic requests are billed by :meth:`account`; the OpenAI dialect keeps the general simulation."""
        if request.dialect != "anthropic":
            return super()._usage(request)
        try:
            accounting = self.account(request.body)
        except ValueError as error:
            raise Refused(400, anthropic_error(str(error))) from error
        return Usage(accounting.prompt_tokens, accounting.cache_read, accounting.cache_write)
