"""A chat sentence as the statement patterns read it: how people type, brought to the few forms those patterns know.

People do not type "I'm allergic to peanuts." the way a form would ask for it: they write "im allergic to
peanuts 🥜 tbh", "i cant stand olives ugh", "pls reply in Spanish", "my bday is June 2 🎂". Teaching every
pattern of :mod:`agent.compaction.self_statements` each spelling would make them unreadable, so a sentence is
first brought to one spelling: the typed contractions without their apostrophe ("im", "cant", "dont") get it
back, a few chat words become the word they stand for ("pls", "u", "bday", "gonna"), emoji go, and the chatter
that trails a statement ("tbh", "lol", "just so you know") is cut. Letter case is left alone: a name is told
from a word by its capital.

An entry quotes what the person wrote, not this reading of it, so :func:`plain` also says, for each character of
the reading, where in the sentence it came from.
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["Reading", "origin", "plain"]

#: Typed words and the spelling the patterns expect.
_SPELLED = {
    "im": "i'm",
    "ive": "i've",
    "cant": "can't",
    "dont": "don't",
    "didnt": "didn't",
    "doesnt": "doesn't",
    "isnt": "isn't",
    "wasnt": "wasn't",
    "havent": "haven't",
    "u": "you",
    "ur": "your",
    "pls": "please",
    "plz": "please",
    "bday": "birthday",
    "b-day": "birthday",
    "birthdate": "birthday",
    "gonna": "going to",
    "wanna": "want to",
    "veggie": "vegetarian",
}
#: Emoji and pictographs, their joiners, variation selectors and skin tones, with the space before them.
_EMOJI = r" ?[\u2190-\u21ff\u2300-\u23ff\u2460-\u27bf\u2900-\u2bff\u3030\u303d\ufe0f\u200d\U0001f000-\U0001faff]+"
_EDIT = re.compile(r"(?i)\b(?:" + "|".join(re.escape(word) for word in _SPELLED) + r")\b|" + _EMOJI + r"|\u2019")
#: Punctuation read as a space when looking for typed words, and the words that show one ("bday's").
_PUNCTUATION = '.,!?;:()"'
_TYPED = frozenset(_SPELLED) | {word + "'s" for word in _SPELLED}
#: Last words that may end the chatter after a statement: only a sentence ending in one is searched for it.
_TRAILING_WORDS = frozenset(
    re.findall(r"\S+", "tbh btw fyi lol lmao hehe ugh x xx tho though fair know aware well too")
)
#: Chatter after a statement: cut before the patterns read it ("I'm vegan tbh", "call me Bex lol").
_TRAILING = re.compile(
    r"(?i)(?:[\s,]+(?:tbh|btw|fyi|lol|lmao|haha+|hehe|ugh|xx?|tho|though|to be fair"
    r"|just so you(?:'re| are| know)(?: aware)?|just so your aware|as well|too))+[\s.!]*$"
)


class Reading(NamedTuple):
    """A sentence as the patterns read it: its ``text``; for each character of it, the index in the sentence it was
    read from (``where``; None: the same index); and its ``words``, lower case, without the punctuation around them
    (a pattern needing a word the sentence does not hold is not tried)."""

    text: str
    where: list[int] | None
    words: frozenset[str]


def plain(sentence: str) -> Reading:
    """The sentence in the spelling the patterns expect."""
    words = _words(sentence)
    if not words:
        return Reading(sentence, None, words)
    text, where = sentence, None
    if not sentence.isascii() or not _TYPED.isdisjoint(words):
        text, where = _respelled(sentence)
        words = _words(text)
    last = text.lower().rstrip(_PUNCTUATION).rsplit(" ", 1)[-1]
    if last in _TRAILING_WORDS or last.startswith("haha"):  # most sentences end otherwise: no search
        trailing = _TRAILING.search(text)
        if trailing and trailing.start() > 0:
            text = text[: trailing.start()]
            where = where[: trailing.start()] if where is not None else None
    return Reading(text, where, words)


def _words(text: str) -> frozenset[str]:
    lower = text.lower()
    for mark in _PUNCTUATION:
        if mark in lower:
            lower = lower.replace(mark, " ")
    return frozenset(lower.split())


def _respelled(sentence: str) -> tuple[str, list[int]]:
    """The sentence with its typed words respelled and its emoji dropped, and where each character came from."""
    parts: list[str] = []
    where: list[int] = []
    done = 0
    for match in _EDIT.finditer(sentence):
        parts.append(sentence[done : match.start()])
        where.extend(range(done, match.start()))
        word = match.group(0)
        new = "'" if word == "\u2019" else _SPELLED.get(word.lower(), "")
        parts.append(new)
        where.extend([match.start()] * len(new))
        done = match.end()
    parts.append(sentence[done:])
    where.extend(range(done, len(sentence)))
    return "".join(parts), where


def origin(where: list[int] | None, at: int, length: int) -> int:
    """Where in the sentence (of ``length`` characters) the reading's character ``at`` came from."""
    if where is None:
        return min(at, length)
    return where[at] if at < len(where) else length
