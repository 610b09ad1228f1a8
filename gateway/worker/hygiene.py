"""Session hygiene: the gateway's 85% safety net, run before the agent sees a new message.

A chat can pile up hundreds of messages between replies (a group chat overnight, a
backlog after downtime). Before the agent runs, hygiene compares the session's size
with a FIXED 85% of the model's window and, when it is over, compacts with ``force=True``
so a failing summarizer degrades to the deterministic summary instead of leaving the
session too large for the next request.

The decision reads only the session meta (a handful of counters), never the transcript,
so it costs the same for a 1K-token and a 500K-token session.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

#: Fraction of the context window at which hygiene compacts. Deliberately above the agent's 50%.
HYGIENE_THRESHOLD = 0.85
#: Hygiene only runs on histories at least this long.
MIN_MESSAGES = 4


class SessionCounters(Protocol):
    """The meta fields hygiene needs (``gateway.store.SessionMeta`` has them). Read-only: hygiene only reads
    them, and the meta is frozen."""

    @property
    def tokens(self) -> int: ...
    @property
    def count(self) -> int: ...
    @property
    def last_prompt_tokens(self) -> int | None: ...
    @property
    def tokens_at_report(self) -> int | None: ...


@dataclass(frozen=True)
class HygieneDecision:
    fire: bool
    tokens: int
    threshold_tokens: int
    source: Literal["reported", "counted", "skipped"]
    reason: str


def estimate_session_tokens(meta: SessionCounters) -> tuple[int, Literal["reported", "counted"]]:
    """The session's prompt size: the provider's last report when there is one, else the stored count.

    The report is from the previous response; messages recorded since then are added from the
    running total so an overnight backlog after a small report is still seen. (The running total
    is the exact per-message count kept at append, standing in for the seed's rough estimate
    without reading the transcript.)
    """
    reported = meta.last_prompt_tokens
    if reported:
        recorded_since = max(0, meta.tokens - (meta.tokens_at_report or 0))
        return reported + recorded_since, "reported"
    return meta.tokens, "counted"


def decide(meta: SessionCounters, context_length: int, *, enabled: bool, pending_tokens: int = 0) -> HygieneDecision:
    """Whether hygiene must compact this session before the next turn.

    ``pending_tokens`` is what the turn's request adds to the session: the messages it carries (the
    newest of a coalesced backlog) and the tool schemas. The request as a whole is what must fit.
    """
    threshold_tokens = int(context_length * HYGIENE_THRESHOLD)
    if not enabled:
        return HygieneDecision(False, 0, threshold_tokens, "skipped", "compression disabled")
    if meta.count < MIN_MESSAGES:
        return HygieneDecision(False, 0, threshold_tokens, "skipped", f"fewer than {MIN_MESSAGES} messages")
    session, source = estimate_session_tokens(meta)
    tokens = session + pending_tokens
    fire = tokens >= threshold_tokens
    weighed = (
        f"{tokens} tokens ({session} stored + {pending_tokens} this request adds)"
        if pending_tokens
        else f"{tokens} tokens"
    )
    reason = f"{weighed} {'≥' if fire else '<'} {threshold_tokens} (85% of {context_length})"
    return HygieneDecision(fire, tokens, threshold_tokens, source, reason)
