"""How much of a coalesced backlog a turn's request carries word for word.

A night's backlog can be larger than the model's whole window, so it cannot simply ride in
the request. The request carries the newest messages of the backlog verbatim, within a share
of the window; every message before them is stored in the session first, where the hygiene
pass weighs it with the rest of the session and the request's own part, and folds it into the
summary (archived, searchable) when the whole would pass 85% of the window. Every message is
stored once, in order, and the turn answers the newest one that asked.
"""

from __future__ import annotations

from collections.abc import Sequence

#: Share of the window the verbatim part of a backlog may take at most, whatever is configured.
VERBATIM_SHARE = 0.25


def verbatim_limit(configured: int, context_length: int) -> int:
    """Tokens of a backlog the request carries verbatim: ``gateway.coalesce_max_tokens``, clamped to a
    quarter of the window (the other three quarters are the session's, the tools' and the answer's)."""
    return max(1, min(configured, int(context_length * VERBATIM_SHARE)))


def verbatim_start(sizes: Sequence[int], limit: int) -> int:
    """Where the verbatim part of a backlog of messages costing ``sizes`` begins: the newest messages
    within ``limit`` tokens, and the newest one always (it is bounded on its own, like any message)."""
    start, used = len(sizes), 0
    while start > 0 and (start == len(sizes) or used + sizes[start - 1] <= limit):
        start -= 1
        used += sizes[start]
    return start
