"""The message list cut at its planned boundaries: head, middle and tail, lean mode's old tool results stubbed.

:mod:`agent.compaction.boundaries` says where the cuts fall; this takes the pieces, and in lean
mode turns the old tool results of the head and tail into stubs (:mod:`agent.compaction.lean`),
keeping the originals with their sequence numbers, so the digest can still take facts from
them before anything is pruned.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.compaction.boundaries import Boundaries
from agent.compaction.lean import FRESH_SHARE, MIN_FRESH_TOKENS, old_tool_result_cutoff, stub_old_tool_results
from agent.messages import Message


@dataclass(frozen=True)
class Cut:
    """One compaction's pieces: what stays before the summary, what it folds, what stays after it."""

    head: list[Message]
    middle: list[Message]
    middle_counts: list[int]
    tail: list[Message]
    #: The digest's sequence number of the middle's first message.
    seq_start: int
    #: Tool results of the head and tail that became stubs, with their sequence numbers.
    stubbed: list[tuple[int, Message]]


def fresh_tokens(tail_budget: int) -> int:
    """How many tokens of the newest tool output stay verbatim in a tail of ``tail_budget`` tokens."""
    return max(int(tail_budget * FRESH_SHARE), min(MIN_FRESH_TOKENS, tail_budget))


def cut_at(
    messages: list[Message], counts: list[int], plan: Boundaries, *, seq_start: int, lean_budget: int | None
) -> Cut:
    """Head, middle and tail at the plan's boundaries; with a ``lean_budget`` (lean mode's tail budget) the old
    tool results of the head and tail are stubbed."""
    head = messages[: plan.head_end]
    tail = messages[plan.tail_start :]
    middle = messages[plan.head_end : plan.tail_start]
    stubbed: list[tuple[int, Message]] = []
    if lean_budget is not None:
        # The first exchange's tool results are as old as anything compacted: the head
        # keeps the exchange, not a file read that may be bigger than the whole lean tail.
        head, head_originals = stub_old_tool_results(head, len(head))
        tail, tail_originals = stub_old_tool_results(
            tail, old_tool_result_cutoff(tail, plan.budget_start - plan.tail_start, fresh_tokens(lean_budget))
        )
        tail_seq = seq_start + len(middle)
        stubbed = [(seq_start, message) for _, message in head_originals]
        stubbed += [(tail_seq + index, message) for index, message in tail_originals]
    return Cut(head, middle, counts[plan.head_end : plan.tail_start], tail, seq_start, stubbed)
