"""Dates in a search: "what did she do last Saturday?" asks about a day, not about the word "Saturday".

The date phrase of a query is resolved against the chat's own "now" (its newest message, or a
clock the caller passes) and taken out of the keywords. Two kinds of message then belong to the
span it names: those written in it (their ``_ts``), and those that *say* a day in it relative to
when they were written — "last Saturday we went hiking", sent on the Monday after. The second kind
needs each message's own date phrases resolved against its own day, which is the costly part, so
only messages written near the span whose text holds a date-ish word are read that closely.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.dates import MONTHS, WEEKDAYS, DateSpan, day_of, find_dates
from agent.tokens import content_text

#: Newest messages looked at for the chat's "now" (the list is in written order, so the newest is near its end).
_REFERENCE_SCAN = 256
#: Score of a message written in the span, and of one whose text states a day in it (the stronger evidence).
IN_SPAN = 1.0
STATED = 2.0
#: Messages written this many days before a span or after it may still say a day in it ("last month").
_REACH_DAYS = 62
#: How far from the span a month's name, a year or "N days ago" is looked for (further off, what a message says
#: about the span is rarely the answer, and reading every message of the chat for it would cost too much).
_FAR_DAYS = 31
#: A span at least this wide (in days) is not read closely inside: what its messages say lies in it anyway.
_WIDE_DAYS = 7
_FOREVER = 1 << 30
_DAY_SECONDS = 86_400.0
_ISO_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


@dataclass(frozen=True, slots=True)
class DateQuery:
    """A query's date phrases resolved to spans, and what is left of the query without them."""

    spans: tuple[DateSpan, ...]
    rest: str
    reference: dt.date


def reference_day(messages: Sequence[Mapping[str, Any]], now: dt.date | dt.datetime | float | None) -> dt.date | None:
    """The day a query's "yesterday" counts from: ``now`` when given, else the newest message's day."""
    if isinstance(now, dt.datetime):
        return now.astimezone(dt.UTC).date() if now.tzinfo else now.date()
    if isinstance(now, dt.date):
        return now
    if isinstance(now, int | float):
        return day_of(float(now))
    newest = max(
        (ts for m in messages[-_REFERENCE_SCAN:] if isinstance(ts := m.get("_ts"), int | float)),
        default=None,
    )
    return None if newest is None else day_of(float(newest))


def date_query(
    query: str, messages: Sequence[Mapping[str, Any]], now: dt.date | dt.datetime | float | None = None
) -> DateQuery | None:
    """The date phrases of ``query`` (resolved into the past) and the query without them; None when it names no
    date or the chat has no time to count from."""
    reference = reference_day(messages, now)
    if reference is None:
        return None
    spans = find_dates(query, reference, past=True)
    if not spans:
        return None
    rest, last = [], 0
    # A written-out date stays a keyword as well: a log line stamped with it is found however long after.
    for span in sorted((s for s in spans if not _ISO_DAY.fullmatch(s.phrase.strip())), key=lambda s: s.at[0]):
        rest.append(query[last : span.at[0]])
        last = max(last, span.at[1])
    rest.append(query[last:])
    return DateQuery(tuple(spans), " ".join(" ".join(rest).split()), reference)


def _seconds(day: dt.date) -> float:
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp()


def _states(text: str, written: dt.date, spans: Sequence[DateSpan]) -> int | None:
    """Where ``text`` (written on ``written``) names a day inside one of ``spans``, or None. A phrase wider
    than the span asked about ("last week" for a question about one Saturday) says too little to count."""
    for said in find_dates(text, written):
        width = (said.end - said.start).days
        for span in spans:
            if said.start <= span.end and said.end >= span.start and width <= max(1, (span.end - span.start).days):
                return said.at[0]
    return None


class _Reading:
    """Which words, in a message written ``offset`` days from the span (negative before it, 0 inside, positive
    after), could state a day in it: "yesterday" only reaches one or two days back, "last Saturday" a week or
    so, "last month" two, a month's name, a year or "N days ago" a month (or the span's width). A message with
    none of the words its distance allows is not parsed."""

    def __init__(self, spans: Sequence[DateSpan]) -> None:
        start, end = min(s.start for s in spans), max(s.end for s in spans)
        self.width = (end - start).days + 1
        self.start = _seconds(start)
        self.end = _seconds(end) + _DAY_SECONDS
        self.windows = [(_seconds(s.start), _seconds(s.end) + _DAY_SECONDS) for s in spans]
        far = max(_FAR_DAYS, min(self.width, 366))
        self.reach = [
            (word, min(before, far), min(after, far)) for word, before, after in _reach(spans, start, self.width)
        ]
        self.low = self.start - max(before for _, before, _ in self.reach) * _DAY_SECONDS
        self.high = self.end + max(after for _, _, after in self.reach) * _DAY_SECONDS
        self._words: dict[int, tuple[str, ...]] = {}

    def offset(self, ts: float) -> int:
        if ts < self.start:
            return int((ts - self.start) // _DAY_SECONDS)
        if ts >= self.end:
            return int((ts - self.end) // _DAY_SECONDS) + 1
        return 0

    def words(self, offset: int) -> tuple[str, ...]:
        words = self._words.get(offset)
        if words is None:
            if offset == 0 and self.width >= _WIDE_DAYS:
                words = ()
            else:
                words = tuple(word for word, before, after in self.reach if -before <= offset <= after)
            self._words[offset] = words
        return words


def _reach(spans: Sequence[DateSpan], start: dt.date, width: int) -> list[tuple[str, int, int]]:
    """``(word, days before the span, days after it)`` within which a message using the word may name a day in
    the span; a phrase wider than the span ("last week" for one Saturday) says too little, so its word is left out."""
    days = [start + dt.timedelta(days=n) for n in range(min(width, 7))]
    reach: list[tuple[str, int, int]] = [
        *((WEEKDAYS[day.weekday()], 7, 13) for day in days),
        ("yesterday", 0, 2),
        ("today", 0, 0),
        ("tonight", 0, 0),
        ("tomorrow", 2, 0),
        ("weekend", 14, 14),
        ("ago", 0, _FOREVER),
        ("days", _FOREVER, 0),
    ]
    if width >= 7:
        reach.append(("week", 14, 14))
    if width >= 28:
        reach.append(("month", _REACH_DAYS, _REACH_DAYS))
    if width >= 365:
        reach.append(("year", _FOREVER, _FOREVER))
    months = {(s.start.year, s.start.month) for s in spans} | {(s.end.year, s.end.month) for s in spans}
    reach += [(MONTHS[month - 1].capitalize(), _FOREVER, _FOREVER) for _, month in months]
    reach += [(str(year), _FOREVER, _FOREVER) for year, _ in months]
    return [(variant, before, after) for word, before, after in reach for variant in _variants(word)]


def _variants(word: str) -> tuple[str, ...]:
    return (word,) if not word.islower() else (word, word.capitalize())


def dated(messages: Sequence[Mapping[str, Any]], query: DateQuery) -> dict[int, tuple[float, int]]:
    """``index -> (date score, snippet centre)`` of the messages written in the query's spans or saying a day in
    them; only messages written near a span are looked at, and only those with a fitting word are parsed."""
    reading = _Reading(query.spans)
    found: dict[int, tuple[float, int]] = {}
    for index, message in enumerate(messages):
        ts = message.get("_ts")
        if not isinstance(ts, int | float) or not reading.low <= ts < reading.high:
            continue
        offset = reading.offset(ts)
        score = IN_SPAN if offset == 0 and any(low <= ts < high for low, high in reading.windows) else 0.0
        centre = 0
        words = reading.words(offset)
        if words:
            text = content_text(message.get("content"))
            if any(word in text for word in words):
                stated = _states(text, day_of(float(ts)), query.spans)
                if stated is not None:
                    score += STATED
                    centre = stated
        if score:
            found[index] = (score, centre)
    return found
