"""What a fold says about the people who wrote it: entries for each person's memory, taken mechanically.

When a compaction folds messages into the archive, the standing things people said about themselves there ("I'm
vegetarian", "call me Dee", "always answer in metric units") must not go with them: each becomes an entry in that
person's memory. This runs with the deterministic notes too, so it is a pure function of the folded messages, no
model, and it runs on every compaction.

This module reads the folded messages: whose words they are, their sentences, and the entries they make. Only a
person's own words count: a user message carrying ``_user`` (never the assistant's, a tool result, a summary or a
synthetic line), without the lines it quotes ("> …") or its fenced blocks (code, logs). Which of its sentences are
statements about the speaker, and of which kind, is :func:`agent.compaction.self_statements.self_statement`'s to
say, one sentence at a time.

An entry's text is the speaker's sentence as written (whitespace collapsed, cut at a word to fit
:data:`MAX_NOTE_CHARS`) in double quotes, then the UTC day it was said::

    "I'm vegetarian." (said 2026-01-16)

(without the day when the message has no ``_ts``). The same sentence said twice by one person is one entry, with
the newest message's id and day. Each person's entries come firmest first: what they are called, then their
constraints and standing instructions, facts about them, preferences, decisions; in the order said within each.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from agent.compaction.everyday import written_day
from agent.compaction.self_statements import self_statement
from agent.compaction.sentences import FENCED, SPLIT
from agent.messages import is_real_user_message
from agent.tokens import content_text

__all__ = ["MAX_NOTE_CHARS", "MemoryNote", "memory_notes"]

#: Longest entry text, the quotes and the day included.
MAX_NOTE_CHARS = 300
#: Shortest sentence read ("I'm 34", "I'm vegan").
_MIN_CHARS = 5


@dataclass(frozen=True)
class MemoryNote:
    """One entry for a person's memory: whose it is, its text, and the message it was said in."""

    person: str  # the message's "_user", e.g. "tg:42"
    text: str  # the entry as shown to the model and to the person, at most MAX_NOTE_CHARS
    message_id: str  # the message's "_id" ("" when it has none)


class _Found(NamedTuple):
    rank: int
    person: str
    sentence: str
    message: Mapping[str, Any]


def memory_notes(folded: Sequence[Mapping[str, Any]], *, limit_per_person: int = 20) -> list[MemoryNote]:
    """The entries the folded messages give each person who wrote them, grouped by person (in the order of their
    entries' messages), each person's firmest first and at most ``limit_per_person`` of them.

    A note is only ever its speaker's: the ``_user`` of the message whose ``_id`` it carries, whoever the
    sentence names. The same sentence from one person is kept once, from the newest message saying it.
    """
    found: dict[tuple[str, str], _Found] = {}
    for message in folded:
        person = _person(message)
        if person is None:
            continue
        for sentence, rank in _statements(_own_text(message)):
            key = (person, _key(sentence))
            found.pop(key, None)  # the newest saying wins, and takes its place in the order said
            found[key] = _Found(rank, person, sentence, message)
    by_person: dict[str, list[_Found]] = {}
    for item in found.values():
        by_person.setdefault(item.person, []).append(item)
    notes: list[MemoryNote] = []
    for items in by_person.values():
        items.sort(key=lambda item: -item.rank)  # stable: the order said within a rank
        notes += [_note(item) for item in items[: max(limit_per_person, 0)]]
    return notes


def _person(message: Mapping[str, Any]) -> str | None:
    """Whose memory a message may feed: a person's own message (not a summary or a synthetic line) with ``_user``."""
    user = message.get("_user")
    if not isinstance(user, str) or not user.strip() or not is_real_user_message(message):
        return None
    return user.strip()


def _own_text(message: Mapping[str, Any]) -> str:
    """A message's text without the lines it quotes ("> …"): those are someone else's words."""
    text = content_text(message.get("content"))
    if ">" in text:
        text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith(">"))
    return text


def _key(sentence: str) -> str:
    return " ".join(sentence.casefold().replace("\u2019", "'").split()).rstrip(".!\u2026 ")


def _note(item: _Found) -> MemoryNote:
    ident = item.message.get("_id")
    return MemoryNote(item.person, _note_text(item.sentence, item.message), ident if isinstance(ident, str) else "")


def _note_text(sentence: str, message: Mapping[str, Any]) -> str:
    """``"<sentence>" (said YYYY-MM-DD)``: the sentence cut at a word so the whole fits :data:`MAX_NOTE_CHARS`."""
    day = written_day(message)
    tail = f" (said {day.isoformat()})" if day else ""
    words = " ".join(sentence.split())
    room = MAX_NOTE_CHARS - len(tail) - 2
    if len(words) > room:
        words = words[: room - 1].rsplit(" ", 1)[0].rstrip(" ,;:") + "\u2026"
    return f'"{words}"{tail}'


@functools.lru_cache(maxsize=16_384)
def _statements(text: str) -> tuple[tuple[str, int], ...]:
    """``(sentence, rank)`` for each sentence of a message's text that is a statement about its speaker; fenced
    blocks (code, logs) are left out."""
    if "```" in text:
        text = FENCED.sub("\n", text)
    found = []
    for raw in SPLIT.split(text):
        sentence = " ".join(raw.split()).strip(" -*\u2022")
        if len(sentence) < _MIN_CHARS or sentence.startswith(("File ", "Traceback", ">")):  # ">": a quote mid-line
            continue
        start, rank = self_statement(sentence)
        if rank:
            found.append((sentence[start:], rank))
    return tuple(found)
