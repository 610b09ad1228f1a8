"""Fact-bearing sentences from what the user and the assistant wrote, taken verbatim and scored.

A long session's conversation holds the facts people ask about later — who owns what,
which port or limit was set, what was decided and why, what the user wants always or
never, the house rules they lay down, where code moved, what the assistant committed or
opened — in single sentences between a great deal of routine narration ("Checking the
logs."). Each sentence is classified (preference, decision, progress, fact) and scored
by the signals it carries, so a small budget takes the dense ones first. Results are
memoized per message text.
"""

from __future__ import annotations

import functools
import re
from typing import NamedTuple

#: Longest sentence kept whole; longer ones are cut with an ellipsis (the start stays verbatim).
MAX_SENTENCE_CHARS = 320
MIN_SENTENCE_CHARS = 12

#: Where a message's text splits into sentences: after end punctuation and a space, or at a line break.
SPLIT = re.compile(r"(?<=[.!?。！？])\s+|\n+")
_PREFERENCE = re.compile(
    r"(?i)\b(?:prefer|preference|always|never|don'?t|do not|avoid|must|mustn'?t|should(?:n'?t)?|from now on"
    r"|i want|i'd like|no more than|at most|at least|keep (?:it|the|using)|stick to|make sure"
    r"|for the rest of|going forward|by default|every time|whenever)\b"
)
_DECISION = re.compile(
    r"(?i)\b(?:decided|decide|decision|agreed|agree|going with|go with|chose|choose|settled on|let'?s use"
    r"|we will|we'll|switch(?:ed)?|approved|confirmed|rather than|instead of|because|the reason|so that"
    r"|since(?! (?:the last|last|yesterday|this|then|\d)))\b"
)
#: A decision's firm words; "because", "since", "so that" alone only give a reason, which in a chat between people
#: is nearly always small talk ("the heating clanks since the move").
_FIRM_DECISION = re.compile(
    r"(?i)\b(?:decided|decide|decision|agreed|agree|going with|go with|chose|choose|settled on|let'?s use"
    r"|we will|we'll|switch(?:ed)?|approved|confirmed)\b"
)
#: Someone else's advice told on ("Kofi said I should …"): the speaker's report, not a standing wish of theirs.
_ADVICE = re.compile(
    r"(?i)\b(?:said|says|told (?:me|us)|reckons|thinks|suggested|wants me to)\b[^.!?]{0,40}?\b(?:should|must)\b"
)
#: Standing rules a person lays down ("house rule: …", "please remember …").
_RULE = re.compile(r"(?i)\b(?:house rules?|ground rules?|rule of thumb|remember|keep in mind|don'?t forget)\b")
#: A fact stated for the record: where something is now, what was renamed, a heads-up.
_STATED = re.compile(
    r"(?i)\b(?:fyi|heads[- ]up|for the record|note that|moved (?:to|into)|lives (?:in|at|under)|renamed (?:to|as)"
    r"|now lives)\b"
)
#: Words that say nothing alone: a sentence made only of them ("please remember that") is a cue, not a fact.
_HOLLOW = frozenset(
    [
        "please",
        "remember",
        "that",
        "this",
        "it",
        "ok",
        "okay",
        "thanks",
        "sure",
        "yes",
        "fine",
        "also",
        "and",
        "so",
        "btw",
        "fyi",
        "keep",
        "in",
        "mind",
    ]
)
_WORDS = re.compile(r"[\w'-]+")
_PROGRESS = re.compile(
    r"(?i)\b(?:done|fixed|added|created|implemented|updated|merged|passed|passing|resolved|completed"
    r"|deployed|released|refactored|removed|renamed|migrated|committed|pushed|opened|filed|reverted|rebased|tagged)\b"
)
_PEOPLE = re.compile(r"(?i)\b(?:owns?|owner|maintain(?:s|er)|on[- ]call|ask|ping|assigned|reviewer?s?)\b|@[a-z]")
_PERSON = re.compile(r"\b[A-Z][a-z]+ [A-Z][a-z]+\b")
_SETTING = re.compile(
    r"(?i)\b(?:port|limit|timeout|budget|costs?|price|quota|rate|threshold|max(?:imum)?|min(?:imum)?|retention"
    r"|ttl|per (?:month|minute|second|hour|day)|version|deadline|cap(?:ped)?)\b"
)
_DIGIT = re.compile(r"\d")
_IDENTIFIER = re.compile(r"`[^`]+`|\w/\w|#\d|\b[0-9a-f]{7,40}\b")
_NORMALISE = re.compile(r"\d+")
#: A fenced block (a pasted traceback, code, a log): its lines are not sentences of the conversation.
FENCED = re.compile(r"^[ \t]*```[^`\n]*\n.*?(?:^[ \t]*```[ \t]*$|\Z)", re.M | re.S)


#: A greeting, farewell or thanks with nothing else said ("Hey Maya!", "Thanks so much, talk soon"): small talk
#: is never a decision, whatever words of agreement it carries ("so glad we'll catch up").
_GREETING = re.compile(
    r"(?i)^(?:hi|hey|hello|hiya|yo|bye|goodbye|good ?night|good (?:morning|evening|afternoon)|morning|thanks"
    r"|thank you|thx|cheers|congrats|congratulations|welcome|wow|omg|oh|aw+|haha|lol|see (?:you|ya)|talk soon"
    r"|take care|miss you|love you|xo+)\b[^.!?]{0,48}$"
)


class Sentence(NamedTuple):
    text: str
    kind: str  # "preference", "decision", "progress" or "fact"
    score: int


def normalised(text: str) -> str:
    """A key under which routine sentences that differ only in numbers collapse ("Tests pass (6)")."""
    return _NORMALISE.sub("#", text.lower())


def classify(sentence: str, by_user: bool) -> Sentence | None:
    """The sentence's kind and score, or None when it carries nothing worth keeping.

    A decision or a user's preference names the kind; every further signal adds to the score and
    names the kind only of a sentence that has none yet (in the order listed below, so a stated fact
    about a person is a fact, and a commit the assistant reports is progress).
    """
    if all(word in _HOLLOW for word in _WORDS.findall(sentence.lower())) or is_greeting(sentence):
        return None
    kind, score = _stance(sentence, by_user)
    digits = bool(_DIGIT.search(sentence))
    signals: tuple[tuple[str | None, int, bool], ...] = (  # (kind if none yet, points, present)
        ("fact", 2, bool(_STATED.search(sentence))),
        ("fact", 2, bool(_PEOPLE.search(sentence) or _PERSON.search(sentence[1:]))),
        ("fact", 2, digits and bool(_SETTING.search(sentence))),
        (None, 1, digits),
        ("progress", 1, not by_user and bool(_PROGRESS.search(sentence))),
        ("fact", 1, bool(_IDENTIFIER.search(sentence))),
    )
    for named, points, present in signals:
        if present:
            kind, score = kind or named, score + points
    if kind is None or score < 2:
        return None
    return Sentence(sentence, kind, score)


def is_firm_decision(sentence: str) -> bool:
    """Whether a decision sentence says what was decided, not only why something is ("because", "since")."""
    return bool(_FIRM_DECISION.search(sentence))


def is_stated(sentence: str) -> bool:
    """Whether a sentence states a fact for the record ("fyi", "moved to", "lives in"), not only names something
    with two capitalised words ("a Fleetwood Mac track")."""
    return bool(_STATED.search(sentence))


def is_advice(sentence: str) -> bool:
    """Whether a preference sentence reports what someone else advised ("Kofi said I should enter")."""
    return bool(_ADVICE.search(sentence))


def is_greeting(sentence: str) -> bool:
    """Whether a sentence is only a greeting, farewell or thanks (with a name or a few words of warmth)."""
    return bool(_GREETING.match(sentence.strip(" \t!.?,")))


def _stance(sentence: str, by_user: bool) -> tuple[str | None, int]:
    """``(kind, score)`` from what the sentence decides or (said by the user) wants: a preference outranks a
    decision in the same sentence, and both score."""
    kind, score = None, 0
    if _DECISION.search(sentence):
        kind, score = "decision", 3
    if by_user and (_PREFERENCE.search(sentence) or _RULE.search(sentence)):
        kind, score = "preference", score + 3
    return kind, score


@functools.lru_cache(maxsize=16_384)
def fact_sentences(text: str, by_user: bool) -> tuple[Sentence, ...]:
    """Every classified sentence of one message, in order; fenced blocks are left out.

    A line of a pasted traceback or code (``return Service(limit=4896)``) looks dense but says
    nothing about what it belongs to; the anchor index keeps its identifiers, the quote keeps it whole.
    """
    found = []
    for sentence in split_sentences(text):
        classified = classify(sentence, by_user)
        if classified is not None:
            found.append(classified)
    return tuple(found)


@functools.lru_cache(maxsize=16_384)
def split_sentences(text: str) -> tuple[str, ...]:
    """The sentences of a message as the notes quote them: fenced blocks left out, list marks stripped, very
    short ones dropped, long ones clipped (the start stays verbatim)."""
    if "```" in text:
        text = FENCED.sub("\n", text)
    out = []
    for raw in SPLIT.split(text):
        sentence = raw.strip(" \t-*>•")
        if len(sentence) < MIN_SENTENCE_CHARS or sentence.startswith(("```", "File ", "Traceback")):
            continue
        if len(sentence) > MAX_SENTENCE_CHARS:
            sentence = sentence[: MAX_SENTENCE_CHARS - 1].rstrip() + "…"
        out.append(sentence)
    return tuple(out)
