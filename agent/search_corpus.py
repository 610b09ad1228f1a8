"""A chat's messages prepared once for keyword search, so a search does not walk every message in Python.

:func:`agent.search.search_messages` needs, per query term, which messages hold it and how often.
Asking each message in turn costs a few microseconds a message — a fifth of a second for a
100K-message archive and a question — though the archive never changes between two searches. A
:class:`SearchCorpus` keeps every message's search text lowered and joined into one string (a
``"\\x00"`` between two messages, so a term cannot run from one into the next), with where each
message starts; a term's occurrences are then found by ``str.find`` at C speed and only the messages
holding one are looked at. What it answers is exactly what the message-by-message scan answers
(:func:`scan_terms`, kept for a one-off search), which a property test holds it to.

A corpus is built once and extended with newer messages by adding a segment (small segments are
merged as they pile up, so a search looks at a few strings, not one per extension); extending
returns a new corpus and leaves the old one as it was, so a cached archive's corpus can be
extended with a call's live messages without changing it.
"""

from __future__ import annotations

import functools
import itertools
import re
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.messages import stand_in_lines, tool_names_by_call_id
from agent.search_query import Term
from agent.tokens import ITEMS_KEY, content_text

__all__ = ["Matched", "SearchCorpus", "lower_same_length", "message_search_text", "scan_terms"]

#: Between two messages in the joined text: no query term matches it (a term is looked for only inside one
#: message), and ``str.lower`` and the terms' lookbehinds (no word character, no ``.`` or ``#``) take it for
#: the edge of a text, as they take the start of a message searched alone.
SEPARATOR = "\x00"


#: A term's pattern that opens with a one-character lookbehind: ``(?<![a-z0-9])`` and the like.
_LEADING_LOOKBEHIND = re.compile(r"\(\?<!(\[(?:[^\]\\]|\\.)*\])\)")


@functools.lru_cache(maxsize=256)
def _literal_first(pattern: re.Pattern[str], literal: str) -> re.Pattern[str]:
    """``pattern`` with its leading lookbehind moved behind its literal, where it opens with both: the same matches,
    but the regex engine can then jump from one occurrence of the literal to the next instead of trying every
    position (``(?<![a-z0-9])word`` matches where ``word(?<![a-z0-9]word)`` does)."""
    opening = _LEADING_LOOKBEHIND.match(pattern.pattern)
    escaped = re.escape(literal)
    if opening is None or not literal or not pattern.pattern.startswith(escaped, opening.end()):
        return pattern
    if re.fullmatch(opening.group(1), SEPARATOR):  # it would see the separator as a character before the term
        return pattern
    rest = pattern.pattern[opening.end() + len(escaped) :]
    try:
        return re.compile(f"{escaped}(?<!{opening.group(1)}{escaped}){rest}", pattern.flags)
    except re.error:
        return pattern


@functools.lru_cache(maxsize=256)
def _sees_past_start(pattern: re.Pattern[str]) -> bool:
    """Whether ``pattern`` searched from a message's start in the joined text could answer otherwise than in the
    message's text alone: a lookbehind other than a leading one whose class does not match the separator, or
    an anchor to the start of the text."""
    text = pattern.pattern
    opening = _LEADING_LOOKBEHIND.match(text)
    if opening is not None and re.fullmatch(opening.group(1), SEPARATOR):
        return True
    rest = text[opening.end() :] if opening is not None else text
    return "(?<" in rest or "^" in text or "\\A" in text


def message_search_text(message: Mapping[str, Any]) -> str:
    """What a search sees of a message: its text, its items' stand-in lines (a photo is found by its name),
    and the names and arguments of its tool calls."""
    content = message.get("content")
    calls = message.get("tool_calls")
    if not calls and ITEMS_KEY not in message:
        return content if isinstance(content, str) else content_text(content)
    text = content_text(content)
    parts = [text] if text else []
    parts += stand_in_lines(message)
    for call in calls or ():
        if not isinstance(call, Mapping):
            continue
        function = call.get("function") or {}
        arguments = function.get("arguments")
        parts.append(f"{function.get('name') or ''} {arguments if isinstance(arguments, str) else arguments or ''}")
    return "\n".join(parts)


def lower_same_length(text: str) -> str:
    """Lowercase ``text`` keeping every character at its index (a few characters grow under ``lower()``)."""
    lowered = text.lower()
    if len(lowered) == len(text):
        return lowered
    return "".join(char if len(low := char.lower()) != 1 else low for char in text)


@dataclass
class Matched:
    """Per message (None where no term occurs): its search text and each term's hit count; per term the number
    of messages it occurs in; the length of all the messages' texts together; which messages some term occurs
    in (in no particular order), so what follows looks at those alone; and, through :meth:`lowered`, a found
    message's lowered text."""

    texts: list[str | None]
    counts: list[list[int] | None]
    document_frequency: list[int]
    total_chars: int
    found: list[int]
    lowered_text: Callable[[int], str]

    @classmethod
    def empty(cls, size: int, terms: int, lowered_text: Callable[[int], str]) -> Matched:
        return cls([None] * size, [None] * size, [0] * terms, 0, [], lowered_text)

    def lowered(self, index: int) -> str:
        """The lowered search text of a message some term occurs in."""
        return self.lowered_text(index)

    def count(self, index: int, term_index: int, hits: int, terms: int, text: str) -> None:
        """Record ``hits`` occurrences of a term in message ``index`` (whose search text is ``text``)."""
        found = self.counts[index]
        if found is None:
            found = self.counts[index] = [0] * terms
            self.texts[index] = text
            self.found.append(index)
        found[term_index] = hits
        self.document_frequency[term_index] += 1


def scan_terms(messages: Sequence[Mapping[str, Any]], terms: Sequence[Term]) -> Matched:
    """The terms' hits found message by message: for a search that runs once over messages nobody keeps."""
    lowered: dict[int, str] = {}
    matched = Matched.empty(len(messages), len(terms), lowered.__getitem__)
    for index, message in enumerate(messages):
        text = message_search_text(message)
        matched.total_chars += len(text)
        if not text:
            continue
        low = text.lower()
        if len(low) != len(text):  # rare: a character that grows when lowered
            low = lower_same_length(text)
        for term_index, term in enumerate(terms):
            if term.literal in low:
                hits = sum(1 for _ in term.pattern.finditer(low))
                if hits:
                    matched.count(index, term_index, hits, len(terms), text)
                    lowered[index] = low
    return matched


def _texts_and_tools(messages: Sequence[Mapping[str, Any]]) -> tuple[list[str], dict[str, str]]:
    """Each message's search text, and the tool name of each call the messages make (by call id, the last
    message to make a call naming it as in :func:`agent.messages.tool_names_by_call_id`)."""
    texts = [message_search_text(message) for message in messages]
    tools = tool_names_by_call_id(message for message in messages if message.get("tool_calls"))
    return texts, tools


@dataclass(frozen=True, slots=True)
class _Segment:
    """Consecutive messages' search texts, and the same lowered and joined, with where each one starts, and
    the tool names of the calls they make."""

    texts: list[str]
    joined: str
    starts: list[int]
    tools: dict[str, str]

    @classmethod
    def of(cls, messages: Sequence[Mapping[str, Any]]) -> _Segment:
        texts, tools = _texts_and_tools(messages)
        joined = SEPARATOR.join(texts)
        lowered = joined.lower()
        if len(lowered) != len(joined):  # some text grows when lowered: keep each at its indexes
            lowered = SEPARATOR.join(lower_same_length(text) for text in texts)
        starts = list(itertools.accumulate((len(text) + 1 for text in texts[:-1]), initial=0)) if texts else []
        return cls(texts, lowered, starts, tools)

    def then(self, newer: _Segment) -> _Segment:
        """This segment followed by ``newer``, as one."""
        shift = len(self.joined) + 1
        return _Segment(
            self.texts + newer.texts,
            self.joined + SEPARATOR + newer.joined,
            self.starts + [start + shift for start in newer.starts],
            {**self.tools, **newer.tools},
        )

    def match(self, term: Term, term_index: int, base: int, matched: Matched, terms: int) -> None:
        """Count ``term`` in the messages of this segment that hold its literal (message ``base`` is its first)."""
        joined, starts, texts, literal = self.joined, self.starts, self.texts, term.literal
        pattern = _literal_first(term.pattern, literal)
        plain = pattern.pattern == re.escape(literal) and not pattern.flags & ~re.UNICODE
        findall, alone = pattern.findall, _sees_past_start(term.pattern)
        for local in self._holding(literal) if literal else range(len(texts)):
            start = starts[local]
            end = start + len(texts[local])
            if alone:  # the message's text by itself, as the scan searches it
                hits = len(findall(joined[start:end]))
            else:
                hits = joined.count(literal, start, end) if plain else len(findall(joined, start, end))
            if hits:
                matched.count(base + local, term_index, hits, terms, texts[local])

    def _holding(self, literal: str) -> list[int]:
        """The messages (local indexes) whose lowered text holds ``literal``, in order."""
        joined, starts, texts = self.joined, self.starts, self.texts
        found: list[int] = []
        width = len(literal)
        pos = joined.find(literal)
        while pos != -1:
            local = bisect_right(starts, pos) - 1
            end = starts[local] + len(texts[local])
            if pos + width <= end:
                found.append(local)
                pos = joined.find(literal, end + 1)
            else:  # runs over the separator (a literal holding one): look further on
                pos = joined.find(literal, pos + 1)
        return found


class SearchCorpus:
    """Messages prepared for keyword search (see the module's docstring); built from exactly the messages a
    search is then given, in their order."""

    __slots__ = ("_bases", "_chars", "_segments", "_size")

    #: Segments are merged while the one before the newest holds at most this many times as many messages.
    _MERGE_RATIO = 2

    def __init__(self, segments: Sequence[_Segment] = ()) -> None:
        self._segments = tuple(segment for segment in segments if segment.texts)
        self._bases = list(itertools.accumulate((len(s.texts) for s in self._segments[:-1]), initial=0))
        self._size = sum(len(segment.texts) for segment in self._segments)
        self._chars = sum(len(segment.joined) - len(segment.texts) + 1 for segment in self._segments)

    @classmethod
    def build(cls, messages: Sequence[Mapping[str, Any]]) -> SearchCorpus:
        """A corpus of ``messages``, in their order."""
        return cls([_Segment.of(messages)])

    def extended(self, messages: Sequence[Mapping[str, Any]]) -> SearchCorpus:
        """A corpus of this one's messages followed by ``messages``; this one is left as it is."""
        if not messages:
            return self
        segments = list(self._segments)
        newest = _Segment.of(messages)
        while segments and len(segments[-1].texts) <= self._MERGE_RATIO * len(newest.texts):
            newest = segments.pop().then(newest)
        return SearchCorpus([*segments, newest])

    @classmethod
    def joined(cls, parts: Sequence[SearchCorpus]) -> SearchCorpus:
        """One corpus of ``parts``' messages, one part after the other (none of them changes)."""
        return cls([segment for part in parts for segment in part._segments])

    def __len__(self) -> int:
        return self._size

    @property
    def chars(self) -> int:
        """Characters of all the messages' search texts together."""
        return self._chars

    def text(self, index: int) -> str:
        """The search text of message ``index``."""
        segment = bisect_right(self._bases, index) - 1
        return self._segments[segment].texts[index - self._bases[segment]]

    def tool_name(self, call_id: str) -> str | None:
        """The name of the tool the call ``call_id`` (made by one of these messages) calls, else None."""
        for segment in reversed(self._segments):
            if call_id in segment.tools:
                return segment.tools[call_id]
        return None

    def _lowered(self, index: int) -> str:
        number = bisect_right(self._bases, index) - 1
        segment, local = self._segments[number], index - self._bases[number]
        start = segment.starts[local]
        return segment.joined[start : start + len(segment.texts[local])]

    def match(self, terms: Sequence[Term]) -> Matched:
        """What :func:`scan_terms` finds for ``terms`` in these messages, found by searching the joined text."""
        matched = Matched.empty(self._size, len(terms), self._lowered)
        matched.total_chars = self._chars
        for term_index, term in enumerate(terms):
            for base, segment in zip(self._bases, self._segments):
                segment.match(term, term_index, base, matched, len(terms))
        return matched
