"""Fitting text into token budgets: exact counts of the few pieces a summary is built from."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable

from agent.tokens import count_text

#: Lines up to this long are memoized by :func:`count_line` (bounds the memo to a few MB).
MEMO_LINE_CHARS = 512

_count_short = functools.lru_cache(maxsize=32_768)(count_text)


def count_line(text: str) -> int:
    """:func:`agent.tokens.count_text`, memoized for the short lines a summary is assembled from.

    The same anchors and listing lines are weighed at every compaction of a session
    (the digest carries them), and weighing thousands of them one by one is most of the
    cost of rendering an index.
    """
    return _count_short(text) if len(text) <= MEMO_LINE_CHARS else count_text(text)


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
        cost = count_line(line) + 1
        if used + cost > budget_tokens:
            if stop_at_first_misfit:
                break
            continue
        taken.append(line)
        used += cost
    return taken, used


_DELIMITERS = re.compile(r"[\s,;()\[\]{}<>\"'`]+")


class Shown:
    """What a summary already shows verbatim, to ask "is this anchor in it?" cheaply.

    An anchor without delimiters is looked up among the text's delimiter-separated words
    (and their ``:``-separated parts: ``path:line:text`` hits); one with delimiters (an
    error line, a name) is searched as a substring. An anchor hidden inside a longer word
    is not found, so it may be listed twice — cheap, and never a loss.
    """

    def __init__(self, *texts: str) -> None:
        self._text = "\n".join(texts)
        words = set(_DELIMITERS.split(self._text))
        for word in list(words):
            if ":" in word:
                words.update(word.split(":"))
        self._words = words

    def __contains__(self, anchor: str) -> bool:
        if anchor in self._words:
            return True
        return _DELIMITERS.search(anchor) is not None and anchor in self._text


#: Characters that may stand right before or after a sentence another text holds whole (a bullet, an id, quotes).
_SENTENCE_EDGES = frozenset(" \t\n\r\"'`()[]*-–—:")


def holds_sentence(text: str, sentence: str) -> bool:
    """Whether ``text`` holds ``sentence`` whole, not as the start of a longer one.

    "We'll pin numpy to 1.26." is not held by "We'll pin numpy to 1.26.4 for the API": a
    summary that misquotes a decision must not stand in for it.
    """
    if not sentence:
        return False
    start = text.find(sentence)
    while start >= 0:
        end = start + len(sentence)
        if (start == 0 or text[start - 1] in _SENTENCE_EDGES) and (end == len(text) or text[end] in _SENTENCE_EDGES):
            return True
        start = text.find(sentence, start + 1)
    return False
