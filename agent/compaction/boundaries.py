"""Phase 2: where the kept head ends and the kept tail starts.

Everything here works on indices over the message list and the per-message token
counts (:func:`planning_counts`: exact where a cut can fall), so it is linear and never
re-tokenizes. A boundary never separates a tool call
from its results, and never lands inside a call whose results are still pending (a provider
refuses a call without its results): the tail always starts at a message that is not a tool result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agent.messages import Message, is_real_user_message
from agent.tokens import count_message, estimate_message_tokens

#: Roles a summary message may take, in order of preference (Anthropic wants a user turn first).
SUMMARY_ROLES = ("user", "assistant")


@dataclass(frozen=True)
class Boundaries:
    """``messages[:head_end]`` stay, ``messages[head_end:tail_start]`` are summarized, the rest stays.

    ``budget_start`` is where the tail would start on the token budget alone; lean mode
    treats tool results the tail holds before it (kept only for the user-message or
    minimum-count guarantees) as old.
    """

    head_end: int
    tail_start: int
    budget_start: int
    summary_role: str

    @property
    def middle(self) -> range:
        return range(self.head_end, self.tail_start)


#: The newest messages are counted exactly until they cover this multiple of the tail budget.
EXACT_TAIL_MARGIN = 1.25


def planning_counts(messages: Sequence[Message], *, tail_budget: int, protect_last_n: int) -> list[int]:
    """Per-message tokens to plan a compaction with: exact where a cut can fall, rough elsewhere.

    Every cut is found walking back from the newest message (:func:`plan_boundaries`): by the
    tail's token budget, or within the last ``protect_last_n`` messages. Those are counted
    exactly (with a margin), as is any message that already carries its count; the older rest
    only adds up to the size of the middle, where ±35% (:func:`agent.tokens.estimate_text_tokens_rough`)
    cannot move a cut — and tokenizing it was most of a cold compaction's time.
    """
    counts = [0] * len(messages)
    covered, exact_until = 0, len(messages)
    while exact_until > 0 and (
        covered < tail_budget * EXACT_TAIL_MARGIN or len(messages) - exact_until < protect_last_n + 2
    ):
        exact_until -= 1
        counts[exact_until] = count_message(messages[exact_until])
        covered += counts[exact_until]
    for index in range(exact_until):
        counts[index] = estimate_message_tokens(messages[index])
    return counts


def head_end(messages: Sequence[Message], protect_first_n: int) -> int:
    """End of the protected head: the system prompt and the first exchange, with that exchange's tool results.

    Without a system prompt the first exchange alone is protected.
    """
    if not messages:
        return 0
    size = protect_first_n if messages[0].get("role") == "system" else protect_first_n - 1
    end = min(max(size, 1), len(messages))
    while end < len(messages) and messages[end].get("role") == "tool":
        end += 1
    return end


def align_boundary_backward(messages: Sequence[Message], index: int, floor: int) -> int:
    """Move a tail start off tool results back to the call that produced them (never below ``floor``)."""
    while index > floor and index < len(messages) and messages[index].get("role") == "tool":
        index -= 1
    return index


def budget_walk(counts: Sequence[int], floor: int, budget: int) -> int:
    """First index of the longest suffix (not reaching below ``floor``) whose tokens fit ``budget``."""
    total = 0
    index = len(counts)
    while index > floor:
        cost = counts[index - 1]
        if total + cost > budget:
            break
        total += cost
        index -= 1
    return index


def real_user_indices(messages: Sequence[Message], start: int, stop: int) -> list[int]:
    """Indices of messages a person typed in ``[start, stop)``, oldest first."""
    return [i for i in range(start, stop) if is_real_user_message(messages[i])]


def role_before(messages: Sequence[Message], index: int) -> str | None:
    """The role the message before ``index`` will have once tool pairs are sanitized.

    Tool results only survive after an assistant message that made calls (and such a message
    gets stand-in results if its own are missing); results after anything else are dropped.
    """
    i = index - 1
    while i >= 0 and messages[i].get("role") == "tool":
        i -= 1
    if i < 0:
        return None
    if messages[i].get("role") == "assistant" and messages[i].get("tool_calls"):
        return "tool"
    return messages[i].get("role")


def choose_summary_role(previous_role: str | None, next_role: str | None) -> str | None:
    """A role for the summary differing from both neighbours, or None when both roles are taken."""
    for role in SUMMARY_ROLES:
        if role != previous_role and role != next_role:
            return role
    return None


def plan_boundaries(
    messages: Sequence[Message],
    counts: Sequence[int],
    *,
    protect_first_n: int,
    tail_budget: int,
    protect_last_n: int,
    min_tail_user_messages: int,
    max_tail_tokens: int | None = None,
) -> Boundaries | None:
    """The three regions of a compaction, or None when there is no middle to summarize.

    ``protect_last_n`` widens the tail only while it stays within ``max_tail_tokens`` (a few
    huge messages must not make a session impossible to compact); the real-user-message
    guarantee widens it regardless.
    """
    n = len(messages)
    head = head_end(messages, protect_first_n)
    if n - head < 2:
        return None
    budget_start = budget_walk(counts, head, tail_budget)
    protected = max(head, n - protect_last_n)
    if max_tail_tokens is not None:
        protected = max(protected, budget_walk(counts, head, max_tail_tokens))
    start = min(budget_start, protected, n - 1)

    users = real_user_indices(messages, head, n)
    in_tail = sum(1 for i in users if i >= start)
    if in_tail < min_tail_user_messages and users:
        wanted = users[-min(min_tail_user_messages, len(users))]
        start = min(start, wanted)

    start = align_boundary_backward(messages, start, head)
    budget_start = max(budget_start, start)
    previous_role = role_before(messages, head)
    while start > head:
        next_role = messages[start].get("role")
        role = choose_summary_role(previous_role, next_role)
        if role is None and role_before(messages, start) == next_role:
            # Two messages of one role already meet at this cut (an overnight backlog of user
            # messages with no reply between them): the summary takes the first one's place.
            role = next((r for r in SUMMARY_ROLES if r != previous_role), None)
        if role is not None:
            return Boundaries(head, start, budget_start, role)
        start = align_boundary_backward(messages, start - 1, head)
    return None
