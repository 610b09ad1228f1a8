"""Fitting text into token budgets: exact counts of the few pieces a summary is built from."""

from __future__ import annotations

from typing import Callable, Iterable

from agent.tokens import count_text


def clip(text: str, max_chars: int, hint: str = "") -> str:
    """``text`` cut to ``max_chars`` with a visible marker (and ``hint``) when cut; the kept part is verbatim."""
    if len(text) <= max_chars:
        return text
    marker = f" … [+{len(text) - max_chars:,} chars{'; ' + hint if hint else ''}]"
    return text[:max_chars].rstrip() + marker


def take_lines(
    lines: Iterable[str],
    budget_tokens: int,
    *,
    stop_at_first_misfit: bool = False,
    accept: Callable[[str], bool] = lambda line: True,
) -> tuple[list[str], int]:
    """``(lines that fit, tokens used)``: lines in order while the budget lasts.

    A line too big for what is left is skipped (a smaller one after it may still fit)
    unless ``stop_at_first_misfit`` keeps the order strict (e.g. newest-first quotes).
    """
    taken: list[str] = []
    used = 0
    for line in lines:
        if used >= budget_tokens:
            break
        if not accept(line):
            continue
        cost = count_text(line) + 1
        if used + cost > budget_tokens:
            if stop_at_first_misfit:
                break
            continue
        taken.append(line)
        used += cost
    return taken, used
