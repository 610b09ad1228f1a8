"""What turns a ranked list of matching messages into answers: neighbours, fusion with meaning, summaries last.

A keyword search finds the turn that *asked* ("how was the concert?") as often as the one that
answered, because the question repeats the words the searcher remembers. Handing back the turn
before and the turn after each hit puts the answer in front of the model without a second call.

Two rankings of one chat — by keywords and by meaning (an embeddings index) — are merged by
reciprocal rank fusion: it needs no common scale between a BM25 score and a cosine, and a message
only one of them finds still takes part. Compaction summaries stay findable but are pushed behind
the originals they repeat, which say the same thing with the detail the summary rounded away.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.messages import is_summary
from agent.tokens import content_text

#: Reciprocal rank fusion's constant: how little the exact rank matters near the top.
RRF_K = 60
#: The best of the meaning ranking that are fused. Measured on generated everyday chats with a small local
#: embedding model (``foldgate eval everyday``): fusing the best 5 found the answer in the first six hits for 78% of
#: questions against 72% by keywords alone; fusing 10 or 30 let weak meaning matches that share a few words
#: outrank the keyword answer (73–74%).
MEANING_DEPTH = 5
#: The best keyword hits that stay first whatever the meanings say: an exact identifier or phrase the words found
#: is not pushed down by near meanings. Without it, fusing cost the engineering recovery probes 21 of 216 answers
#: at four hits; with it they find as many as keywords alone, and everyday questions keep the gain above.
KEYWORD_HEAD = 2
#: A summary's score is multiplied by this: behind originals of a comparable score, ahead of far weaker ones.
SUMMARY_FACTOR = 0.5
#: Characters of each neighbour handed back with a hit.
NEIGHBOUR_CHARS = 600
#: Messages looked at on each side of a hit while skipping tool plumbing (bounds the work on long tool loops).
_NEIGHBOUR_SCAN = 40
_ELLIPSIS = "…"

#: ``(score, index in the searched list, snippet centre)``, best first.
Ranked = list[tuple[float, int, int]]


@dataclass(frozen=True, slots=True)
class Neighbour:
    """The turn just before or after a hit in its conversation: its id, role and (clipped) text."""

    id: Any
    role: str
    text: str


def is_plumbing(message: Mapping[str, Any]) -> bool:
    """A message that is no turn of the conversation: a tool result, a call with no words, a summary, an empty one."""
    if message.get("role") == "tool" or is_summary(message):
        return True
    return not content_text(message.get("content")).strip()


def _clip(text: str, limit: int, *, keep_end: bool) -> str:
    text = text.strip()
    if len(text) <= limit:
        return text
    if keep_end:  # the turn before: its end leads into the hit
        return _ELLIPSIS + text[len(text) - limit + 1 :].lstrip()
    return text[: limit - 1].rstrip() + _ELLIPSIS


def _neighbour(messages: Sequence[Mapping[str, Any]], index: int, step: int, limit: int) -> Neighbour | None:
    """The nearest real turn from ``index`` in direction ``step`` within the hit's own session, or None."""
    session = messages[index].get("_session")
    position = index + step
    for _ in range(_NEIGHBOUR_SCAN):
        if not 0 <= position < len(messages):
            return None
        message = messages[position]
        if message.get("_session") != session:
            return None
        if not is_plumbing(message):
            text = _clip(content_text(message.get("content")), limit, keep_end=step < 0)
            return Neighbour(message.get("_id", position), str(message.get("role") or ""), text)
        position += step
    return None


def neighbours(
    messages: Sequence[Mapping[str, Any]], index: int, limit: int = NEIGHBOUR_CHARS
) -> tuple[Neighbour | None, Neighbour | None]:
    """The turns before and after ``messages[index]`` (the list in conversation order), each clipped to ``limit``."""
    if limit <= 0:
        return None, None
    return _neighbour(messages, index, -1, limit), _neighbour(messages, index, 1, limit)


def demote_summaries(messages: Sequence[Mapping[str, Any]], ranked: Ranked) -> Ranked:
    """``ranked`` with every summary's score scaled by :data:`SUMMARY_FACTOR`, sorted again (ties: newer first)."""
    out = [
        (score * SUMMARY_FACTOR if is_summary(messages[index]) else score, index, centre)
        for score, index, centre in ranked
    ]
    out.sort(key=lambda item: (-item[0], -item[1]))
    return out


def indexes_of(messages: Sequence[Mapping[str, Any]], ids: Iterable[Any]) -> list[int]:
    """Positions in ``messages`` of the messages with these ids, in the order given (unknown ids left out)."""
    wanted: dict[str, int] = {}
    for rank, message_id in enumerate(ids):
        wanted.setdefault(str(message_id), rank)
    if not wanted:
        return []
    found: dict[int, int] = {}
    for index, message in enumerate(messages):
        message_id = message.get("_id", index)
        position = wanted.get(message_id if type(message_id) is str else str(message_id))
        if position is not None and position not in found:
            found[position] = index
    return [found[rank] for rank in sorted(found)]


def fuse(messages: Sequence[Mapping[str, Any]], keyword: Ranked, meaning: Sequence[int]) -> Ranked:
    """The best :data:`KEYWORD_HEAD` keyword hits, then the reciprocal rank fusion of the keyword ranking and the
    best :data:`MEANING_DEPTH` of the meaning ranking (positions, best first); a message either one finds is in
    the result, summaries scaled down as in :func:`demote_summaries`."""
    scores: dict[int, float] = {}
    centres: dict[int, int] = {}
    for rank, (_score, index, centre) in enumerate(keyword, start=1):
        scores[index] = scores.get(index, 0.0) + 1.0 / (RRF_K + rank)
        centres[index] = centre
    for rank, index in enumerate(meaning[:MEANING_DEPTH], start=1):
        scores[index] = scores.get(index, 0.0) + 1.0 / (RRF_K + rank)
        centres.setdefault(index, 0)
    fused = demote_summaries(messages, [(score, index, centres[index]) for index, score in scores.items()])
    # Scores above any fused one (each at most 2 / (RRF_K + 1)), in the keywords' order.
    head = [(1.0 + KEYWORD_HEAD - n, index, centre) for n, (_score, index, centre) in enumerate(keyword[:KEYWORD_HEAD])]
    first = {index for _score, index, _centre in head}
    return head + [item for item in fused if item[1] not in first]


def chosen_first(
    messages: Sequence[Mapping[str, Any]], ranked: Ranked, chosen: Callable[[Mapping[str, Any]], bool]
) -> Ranked:
    """``ranked`` fused by reciprocal rank fusion with the ranking of the messages ``chosen`` picks among it (in
    its order): those rank ahead of the others (a chosen one deep in the list, past :data:`RRF_K`, no longer
    does), each side in ``ranked``'s order. A search of every chat of one person puts what that person said
    ahead of what others said with the same words ("Am I allergic to tofu?" of another, in a group)."""
    picked = [index for _score, index, _centre in ranked if chosen(messages[index])]
    if not picked:
        return ranked
    scores = {index: 1.0 / (RRF_K + rank) for rank, (_score, index, _centre) in enumerate(ranked, start=1)}
    for rank, index in enumerate(picked, start=1):
        scores[index] += 1.0 / (RRF_K + rank)
    order = {index: rank for rank, (_score, index, _centre) in enumerate(ranked)}
    fused = [(scores[index], index, centre) for _score, index, centre in ranked]
    fused.sort(key=lambda item: (-item[0], order[item[1]]))
    return fused
