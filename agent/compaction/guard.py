"""Anti-thrash guard: summarizer cooldowns and ineffective-compaction strikes.

Two independent brakes, both judged from facts, both persisted (``to_state``) so a
restart cannot reset them:

- **Cooldown** after a summarizer failure: 60 s, doubling up to 30 min, never shorter
  than the provider's ``retry_after`` (itself taken up to 30 min). A success resets the step.
- **Strikes** from the provider's REAL reported usage: after a compaction, the next
  reported prompt size still at or above the threshold is a strike; two in a row stop
  compaction for a backoff period (10 min, doubling up to 2 h), after which one probe
  is allowed. An effective compaction resets strikes and the backoff step.

Times are wall-clock seconds (``time.time()``) because they must survive a restart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

COOLDOWN_START = 60.0
COOLDOWN_MAX = 30 * 60.0
STRIKES_TO_BACK_OFF = 2
BACKOFF_START = 10 * 60.0
BACKOFF_MAX = 2 * 60 * 60.0


@dataclass
class CompactionGuard:
    cooldown_until: float = 0.0
    next_cooldown: float = COOLDOWN_START
    failures: int = 0
    last_failure: str = ""
    strikes: int = 0
    awaiting_usage: bool = False
    backoff_until: float = 0.0
    next_backoff: float = BACKOFF_START

    def allows(self, now: float) -> bool:
        """Whether automatic compaction may run now."""
        return now >= self.cooldown_until and now >= self.backoff_until

    def summarizer_allowed(self, now: float) -> bool:
        """Whether the summarizer may be called now (it is resting after a failure otherwise)."""
        return now >= self.cooldown_until

    def blocked_reason(self, now: float) -> str | None:
        if now < self.cooldown_until:
            return f"summarizer cooldown for {self.cooldown_until - now:.0f}s after: {self.last_failure}"
        if now < self.backoff_until:
            return f"backing off for {self.backoff_until - now:.0f}s after {self.strikes} ineffective compactions"
        return None

    def on_summarizer_failure(self, now: float, reason: str, retry_after: float | None = None) -> float:
        """Start (or lengthen) the cooldown; returns its length in seconds."""
        wait = max(self.next_cooldown, min(retry_after or 0.0, COOLDOWN_MAX))  # a server's wish, within reason
        self.cooldown_until = now + wait
        self.next_cooldown = min(self.next_cooldown * 2, COOLDOWN_MAX)
        self.failures += 1
        self.last_failure = reason[:300]
        return wait

    def on_summarizer_success(self) -> None:
        self.next_cooldown = COOLDOWN_START
        self.failures = 0
        self.last_failure = ""

    def on_compacted(self) -> None:
        """A compaction was committed: the next reported usage says whether it helped."""
        self.awaiting_usage = True

    def on_reported_usage(self, prompt_tokens: int, threshold_tokens: int, now: float) -> None:
        """Judge the last compaction from the provider's reported prompt size."""
        if not self.awaiting_usage:
            return
        self.awaiting_usage = False
        if prompt_tokens < threshold_tokens:
            self.strikes = 0
            self.next_backoff = BACKOFF_START
            return
        self.strikes += 1
        if self.strikes >= STRIKES_TO_BACK_OFF:
            self.backoff_until = now + self.next_backoff
            self.next_backoff = min(self.next_backoff * 2, BACKOFF_MAX)

    def reset(self) -> None:
        for name, default in _DEFAULTS.items():
            setattr(self, name, default)

    def to_state(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _DEFAULTS}  # flat: no deep copy needed

    @classmethod
    def from_state(cls, state: Mapping[str, Any] | None) -> CompactionGuard:
        guard = cls()
        if state:
            for name, default in _DEFAULTS.items():
                value = state.get(name)
                if value is None:
                    continue
                try:
                    setattr(guard, name, type(default)(value))
                except (TypeError, ValueError):
                    continue  # unreadable state starts from the default rather than failing every turn
        return guard


#: Every field and its default (read once: a turn loads and exports the guard).
_DEFAULTS: dict[str, Any] = {item.name: item.default for item in fields(CompactionGuard)}
