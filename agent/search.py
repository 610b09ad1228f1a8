"""Keyword and regex search over messages: the one search behind recovery after compaction.

Compaction folds old turns into a summary; what it rounds away stays retrievable
only if a search finds it again. The things people come back for are mostly exact
identifiers (a SHA from ``git log``, a path, ``PR #4821``, an error code), so
identifiers match exactly and weigh far more than ordinary words; ordinary words
are ranked BM25-style so a 100K-character log that mentions everything once does
not bury the one short message that answers the question.

Nothing is indexed ahead of time: each call scans the texts once per query term
with C-level substring checks before any regex runs, so a 500K-token archive is
searched in a fraction of a second and the function stays pure (no I/O, no state).

What is found is meant to answer: each hit carries the turns around it, a summary ranks behind
the originals it repeats, a ranking by meaning can be fused in (:mod:`agent.search_answers`), and a
date phrase in the query is read as days rather than words (:mod:`agent.search_dates`).
"""

from __future__ import annotations

import datetime as dt
import heapq
import itertools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.messages import is_summary, tool_names_by_call_id
from agent.search_answers import (
    NEIGHBOUR_CHARS,
    SUMMARY_FACTOR,
    Neighbour,
    Ranked,
    chosen_first,
    demote_summaries,
    fuse,
    indexes_of,
    neighbours,
)
from agent.search_corpus import Matched, SearchCorpus, message_search_text, scan_terms
from agent.search_dates import DateQuery, date_query, dated
from agent.search_query import STOPWORDS, Query, SearchError, parse_query, parse_regex

__all__ = [
    "DEFAULT_HITS",
    "STOPWORDS",
    "Neighbour",
    "SearchCorpus",
    "SearchHit",
    "SearchError",
    "search_messages",
    "message_search_text",
]

#: Hits a search returns unless asked for another number (the recovery tool, ``foldgate search``).
DEFAULT_HITS = 6

#: BM25 parameters (the usual defaults).
_K1 = 1.2
_B = 0.75
#: Characters per word, to turn a text's length into a BM25 document length cheaply.
_CHARS_PER_WORD = 6.0
#: Candidates (by BM25) that get the more expensive proximity scoring.
_MIN_CANDIDATES = 40
#: Occurrences per term considered when looking for the best window (bounds the work on huge logs).
_MAX_POSITIONS_PER_TERM = 4_000
_ELLIPSIS = "…"


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One matching message: its id, role, score (higher is better), a snippet around the best match, and the
    turns just before and after it in its conversation (the answer to a question a search found, the question
    an answer replies to)."""

    message_id: Any
    role: str
    score: float
    snippet: str
    tool_name: str | None = None
    before: Neighbour | None = None
    after: Neighbour | None = None


def _snippet(text: str, centre: int, limit: int) -> str:
    """At most ``limit`` characters of ``text`` around ``centre``, cut at whitespace where it is near."""
    if len(text) <= limit:
        return text
    if limit <= 2:
        return text[:limit]
    room = limit - 2  # one ellipsis may stand at each end
    start = max(0, min(centre - room // 2, len(text) - room))
    end = start + room
    slack = min(80, room // 10)
    if start > 0:
        cut = text.find(" ", start, start + slack)
        newline = text.find("\n", start, start + slack)
        if newline != -1:
            cut = newline
        if cut != -1:
            start = cut + 1
    if end < len(text):
        cut = max(text.rfind("\n", end - slack, end), text.rfind(" ", end - slack, end))
        if cut > start:
            end = cut
    snippet = text[start:end].strip("\n")
    return (_ELLIPSIS if start > 0 else "") + snippet + (_ELLIPSIS if end < len(text) else "")


def _best_window(positions: list[list[int]], weights: Sequence[float], width: int) -> tuple[float, int]:
    """The tightest window of at most ``width`` characters holding the most distinct term weight: (weight, centre)."""
    events = sorted((pos, term) for term, spots in enumerate(positions) for pos in spots)
    if not events:
        return 0.0, 0
    inside = [0] * len(weights)
    total = 0.0
    best_total, best_span, best_centre = 0.0, 0, events[0][0]
    left = 0
    for pos, term in events:
        if inside[term] == 0:
            total += weights[term]
        inside[term] += 1
        # Drop from the left what is too far away or repeated further right (it adds no weight).
        while left < len(events) and (pos - events[left][0] > width or inside[events[left][1]] > 1):
            gone = events[left][1]
            inside[gone] -= 1
            if inside[gone] == 0:
                total -= weights[gone]
            left += 1
        span = pos - events[left][0]
        if total > best_total + 1e-9 or (abs(total - best_total) <= 1e-9 and span < best_span):
            best_total, best_span, best_centre = total, span, (events[left][0] + pos) // 2
    return best_total, best_centre


def _regex_ranked(
    messages: Sequence[Mapping[str, Any]], pattern: re.Pattern[str], corpus: SearchCorpus | None
) -> Ranked:
    scored: Ranked = []
    for index, message in enumerate(messages):
        text = corpus.text(index) if corpus is not None else message_search_text(message)
        first = pattern.search(text)
        if first is None:
            continue
        count = sum(1 for _ in itertools.islice(pattern.finditer(text), 1_000))
        scored.append((1.0 + math.log(max(1, count)), index, (first.start() + first.end()) // 2))
    return demote_summaries(messages, scored)


def _keyword_ranked(
    messages: Sequence[Mapping[str, Any]],
    parsed: Query,
    limit: int,
    snippet_chars: int,
    corpus: SearchCorpus | None,
) -> tuple[Ranked, list[str | None]]:
    """The messages the keywords match, BM25 then proximity ranked (summaries scaled down), and the search
    texts the matching computed (None for a message no term occurs in)."""
    terms = parsed.terms
    if not terms:
        return [], []
    matched = corpus.match(terms) if corpus is not None else scan_terms(messages, terms)
    if not any(matched.document_frequency):
        return [], matched.texts
    size = len(messages)
    idf = [math.log(1.0 + (size - df + 0.5) / (df + 0.5)) for df in matched.document_frequency]
    term_weights = [term.weight * value for term, value in zip(terms, idf)]
    candidates = _bm25(matched, term_weights, max(1.0, matched.total_chars / max(1, size) / _CHARS_PER_WORD))
    ranked = _rerank(
        candidates[: max(_MIN_CANDIDATES, limit * 10)],
        matched,
        parsed,
        term_weights,
        window=max(40, int(snippet_chars * 0.85)),
    )
    return demote_summaries(messages, ranked), matched.texts


def _by_date(
    messages: Sequence[Mapping[str, Any]], ranked: Ranked, found: Mapping[int, tuple[float, int]], limit: int
) -> Ranked:
    """The best ``limit`` with the date first: messages of the span the words or the meaning also match, then
    the span's other messages (those saying the date first, summaries last), then the rest as ranked."""
    if not found:
        return ranked
    both = [item for item in ranked if item[1] in found]
    both.sort(key=lambda item: (-item[0], -found[item[1]][0], -item[1]))
    taken = {index for _, index, _ in ranked}
    only_dated = heapq.nlargest(
        max(0, limit - len(both)),
        (
            (score * SUMMARY_FACTOR if is_summary(messages[index]) else score, index, centre)
            for index, (score, centre) in found.items()
            if index not in taken
        ),
        key=lambda item: (item[0], item[1]),
    )
    rest = [item for item in ranked if item[1] not in found]
    return (both + only_dated + rest)[:limit]


def _hits(
    messages: Sequence[Mapping[str, Any]],
    ranked: Ranked,
    texts: Sequence[str | None],
    snippet_chars: int,
    neighbour_chars: int,
    corpus: SearchCorpus | None,
) -> list[SearchHit]:
    tools: dict[str, str] | None = None  # read only when a tool result names no tool itself
    hits = []
    for score, index, centre in ranked:
        message = messages[index]
        text = texts[index] if index < len(texts) else None
        if text is None:  # found by meaning or by date alone
            text = corpus.text(index) if corpus is not None else message_search_text(message)
        tool_name = message.get("name") if message.get("role") == "tool" else None
        if message.get("role") == "tool" and not tool_name:
            call_id = str(message.get("tool_call_id"))
            if corpus is not None:
                tool_name = corpus.tool_name(call_id)
            else:
                tools = tool_names_by_call_id(messages) if tools is None else tools
                tool_name = tools.get(call_id)
        before, after = neighbours(messages, index, neighbour_chars)
        hits.append(
            SearchHit(
                message.get("_id", index),
                str(message.get("role") or ""),
                round(score, 4),
                _snippet(text, centre, snippet_chars),
                tool_name or None,
                before,
                after,
            )
        )
    return hits


def search_messages(
    messages: Sequence[Mapping[str, Any]],
    query: str,
    *,
    limit: int = DEFAULT_HITS,
    snippet_chars: int = 2_500,
    similar: Sequence[Any] | None = None,
    now: dt.date | dt.datetime | float | None = None,
    neighbour_chars: int = NEIGHBOUR_CHARS,
    corpus: SearchCorpus | None = None,
    first: Callable[[Mapping[str, Any]], bool] | None = None,
) -> list[SearchHit]:
    """The ``limit`` messages that best match ``query``, best first, each with a snippet of at most ``snippet_chars``
    and the turns before and after it (``neighbour_chars`` each; ``messages`` are in conversation order).

    ``query`` is keywords (identifiers such as SHAs, paths, ``#123`` match exactly;
    ``"quoted phrases"`` match as a whole) or a ``/regex/`` (with optional ``i``, ``m``,
    ``s``, ``x`` flags). A date phrase in it ("last Saturday", "in May", "2023-05-08"), read
    against ``now`` or else the newest message's day, puts the messages written in that span or
    saying a day in it first; alone, it asks for those messages. ``similar`` is the message ids
    a search by meaning found, best first: fused with the keyword ranking, a message only it
    finds is a hit too. Summaries rank behind the originals they repeat. Ties go to the newer
    message. ``corpus``, built from exactly ``messages`` (:class:`agent.search_corpus.SearchCorpus`), finds
    the keywords without walking every message; the hits are the same without it. The messages ``first`` picks
    among those the words or the meaning found rank ahead of the others (:func:`agent.search_answers.chosen_first`).
    Raises :class:`SearchError` for an invalid regex (and ValueError for a corpus of other messages).
    """
    if limit <= 0 or not query or not query.strip():
        return []
    if corpus is not None and len(corpus) != len(messages):
        raise ValueError(f"the corpus holds {len(corpus)} messages, the search was given {len(messages)}")
    snippet_chars = max(1, snippet_chars)
    regex = parse_regex(query)
    texts: list[str | None] = []
    if regex is not None:
        ranked = _regex_ranked(messages, regex, corpus)
    else:
        dates: DateQuery | None = date_query(query, messages, now)
        ranked, texts = _keyword_ranked(
            messages, parse_query(dates.rest if dates else query), limit, snippet_chars, corpus
        )
        if similar:
            ranked = fuse(messages, ranked, indexes_of(messages, similar))
        if first is not None:
            ranked = chosen_first(messages, ranked, first)
        if dates is not None:
            ranked = _by_date(messages, ranked, dated(messages, dates), limit)
    return _hits(messages, ranked[:limit], texts, snippet_chars, neighbour_chars, corpus)


def _bm25(matched: Matched, term_weights: Sequence[float], average_length: float) -> list[tuple[float, int]]:
    """``(BM25 score, index)`` of every matching message, best (then newest) first."""
    candidates: list[tuple[float, int]] = []
    for index in matched.found:
        found = matched.counts[index]
        assert found is not None  # listed as found, so counted
        length = len(matched.texts[index]) / _CHARS_PER_WORD  # type: ignore[arg-type]  # counted, so it has a text
        norm = _K1 * (1.0 - _B + _B * length / average_length)
        score = sum(weight * tf * (_K1 + 1.0) / (tf + norm) for weight, tf in zip(term_weights, found) if tf)
        candidates.append((score, index))
    candidates.sort(reverse=True)  # by score, then the newer first (indexes differ, so no two are equal)
    return candidates


def _rerank(
    candidates: Sequence[tuple[float, int]],
    matched: Matched,
    parsed: Query,
    term_weights: Sequence[float],
    *,
    window: int,
) -> list[tuple[float, int, int]]:
    """``(score, index, snippet centre)``: BM25 plus how many terms one snippet window covers, pairs that
    occur together and the whole quoted phrase; best first."""
    terms, phrase = parsed.terms, parsed.phrase
    query_weight = sum(term_weights)
    ranked: list[tuple[float, int, int]] = []
    for base, index in candidates:
        low = matched.lowered(index)
        positions: list[list[int]] = []
        for term in terms:
            spots: list[int] = []
            if term.literal in low:
                for match in term.pattern.finditer(low):
                    spots.append(match.start())
                    if len(spots) >= _MAX_POSITIONS_PER_TERM:
                        break
            positions.append(spots)
        covered, centre = _best_window(positions, term_weights, window)
        score = base + covered
        for pattern, first, second in parsed.pairs:
            if positions[first] and positions[second] and pattern.search(low):
                score += term_weights[first] + term_weights[second]
        if phrase is not None and len(terms) > 1:
            spot = low.find(phrase)
            if spot != -1:
                score += query_weight
                centre = spot + len(phrase) // 2
        ranked.append((score, index, centre))
    ranked.sort(key=lambda item: (-item[0], -item[1]))
    return ranked
