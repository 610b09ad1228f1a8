"""How much of what compaction folds is listing lines (commits, issue and PR rows), against the summary's cap.

A fact buried in a long listing on a line nothing singles out (the generator's planted
commits) stays closed-book only if its line does. A compressor that cannot tell that line
from its neighbours can expect to keep no more than the share of the listing lines its whole
summary could hold. The evals print that share, and the recall it leads to expect, beside
the recall they measure (a line that happens to stand out in its listing does better).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.compaction.budgets import max_summary_tokens
from agent.compaction.listings import records_in
from agent.tokens import content_text, count_text

#: Listing lines of these kinds (:mod:`agent.compaction.listings`) are the ones facts hide among.
LISTING_KINDS = frozenset({"commit", "ref"})
#: Probe kinds the generator buries in such listings when it plants them in tool output.
LISTED_FACT_KINDS = frozenset({"sha", "pr", "issue"})


@dataclass(frozen=True)
class ListingLoad:
    """The listing lines of some tool output: how many, and their tokens shown one to a line."""

    lines: int = 0
    tokens: int = 0

    def share(self, context_length: int) -> float:
        """The share of these lines a summary holding nothing else could keep (the summary cap for the window)."""
        cap = max_summary_tokens(context_length)
        return 1.0 if self.tokens <= cap else cap / self.tokens


def listing_load(messages: Iterable[Mapping[str, Any]]) -> ListingLoad:
    """The commit and issue/PR listing lines of the tool results among ``messages``."""
    lines = [
        record.text
        for message in messages
        if message.get("role") == "tool"
        for record in records_in(content_text(message.get("content")))
        if record.kind in LISTING_KINDS
    ]
    return ListingLoad(len(lines), count_text("\n".join(lines)) if lines else 0)


def is_listed(kind: str, where: str) -> bool:
    """Whether a planted fact of this kind and place sits on a listing line."""
    return where == "tool" and kind in LISTED_FACT_KINDS


def expected_recall(facts: Sequence[tuple[str, str]], share: float) -> float:
    """The recall of ``(kind, where)`` facts with every fact off a listing kept and the listed ones at ``share``."""
    if not facts:
        return 1.0
    listed = sum(is_listed(kind, where) for kind, where in facts)
    return (len(facts) - listed + listed * share) / len(facts)


#: Header cells of :func:`load_cells`, for the evals' tables.
LOAD_HEADER = "listing lines | their tokens | share a summary could hold | expected recall"


def load_cells(load: ListingLoad, context_length: int, facts: Sequence[tuple[str, str]]) -> str:
    """The cells both evals show for a listing load: lines, tokens, the share a summary could hold, the recall to
    expect."""
    share = load.share(context_length)
    return f"{load.lines:,} | {load.tokens:,} | {100 * share:.0f}% | {100 * expected_recall(facts, share):.0f}%"
