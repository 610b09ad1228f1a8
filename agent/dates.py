"""Date phrases in everyday text, resolved against the day the text was written.

People rarely write dates: they say "last Saturday", "yesterday", "next Friday", "in March". Notes that keep
those words lose the date the moment the conversation is read a week later, and a search for "what did she do
last Saturday?" finds nothing unless both the question and the messages become days. This module turns the
phrases into spans of calendar days.

It is a small, bounded vocabulary read with regular expressions, not a general date parser: the general parsers
read every "may", "sun" or "march" as a date and cost milliseconds a message, while compaction and search look at
tens of thousands of messages. Ordinary words are taken as dates only where they cannot be read otherwise ("May"
needs a capital, a day or a preposition such as "in May").
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

__all__ = ["MONTHS", "WEEKDAYS", "DateSpan", "day_of", "find_dates"]

Day = dt.date

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_NUMBER_WORDS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "a couple of": 2,
    "a few": 3,
    "couple of": 2,
    "few": 3,
}
_WEEKDAY = "|".join(WEEKDAYS)
_MONTH = "|".join(MONTHS) + "|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec"
_COUNT = r"\d{1,3}|a couple of|couple of|a few|few|" + "|".join(sorted(_NUMBER_WORDS, key=len, reverse=True))
_UNIT = r"days?|weeks?|months?|years?"

#: Words in a sentence that say it speaks of what is still to come (a bare "on Saturday" is then the next one).
_FUTURE = re.compile(
    r"(?i)\b(?:will|won'?t|shall|going to|gonna|plan(?:s|ning)? to|promised?|tomorrow|next|upcoming)\b|'ll\b"
)


@dataclass(frozen=True)
class DateSpan:
    """A date phrase as written and the calendar days it stands for (``start`` to ``end``, both included)."""

    phrase: str
    start: Day
    end: Day
    at: tuple[int, int]

    def label(self) -> str:
        """The span in ISO words: a day, a month, or ``first..last``."""
        if self.start == self.end:
            return self.start.isoformat()
        if (self.start.month, self.start.day, self.end.month, self.end.day) == (1, 1, 12, 31):
            return (
                f"{self.start.year:04d}" if self.start.year == self.end.year else f"{self.start.year}..{self.end.year}"
            )
        last_of_month = calendar.monthrange(self.start.year, self.start.month)[1]
        if self.start.day == 1 and self.end == self.start.replace(day=last_of_month):
            return f"{self.start.year:04d}-{self.start.month:02d}"
        return f"{self.start.isoformat()}..{self.end.isoformat()}"

    def covers(self, day: Day) -> bool:
        return self.start <= day <= self.end


def day_of(ts: float) -> Day:
    """A message's ``_ts`` (Unix seconds) as its calendar day in UTC."""
    return dt.datetime.fromtimestamp(ts, dt.UTC).date()


def _count(word: str) -> int:
    word = " ".join(word.lower().split())
    return int(word) if word.isdigit() else _NUMBER_WORDS.get(word, 1)


def _shift(day: Day, months: int) -> Day:
    """``day`` moved by whole months, kept within the target month's length."""
    index = day.year * 12 + day.month - 1 + months
    year, month = divmod(index, 12)
    return day.replace(year=year, month=month + 1, day=min(day.day, calendar.monthrange(year, month + 1)[1]))


def _month_span(year: int, month: int) -> tuple[Day, Day]:
    return Day(year, month, 1), Day(year, month, calendar.monthrange(year, month)[1])


def _week_of(day: Day) -> tuple[Day, Day]:
    monday = day - dt.timedelta(days=day.weekday())
    return monday, monday + dt.timedelta(days=6)


def _month_number(word: str) -> int:
    word = word.lower()
    return next(index for index, name in enumerate(MONTHS, 1) if name.startswith(word[:3]))


def _weekday_day(written: Day, weekday: str, which: str, future: bool) -> Day:
    """The day a weekday phrase names: ``last`` the one before, ``next`` and ``this coming`` the one after, ``this``
    the one in the current week, a bare one the nearest in the direction the sentence speaks of."""
    target = WEEKDAYS.index(weekday.lower())
    if which == "this":
        return written + dt.timedelta(days=target - written.weekday())
    if which in ("next", "this coming"):
        return written + dt.timedelta(days=(target - written.weekday()) % 7 or 7)
    if which in ("last", "this past"):
        return written - dt.timedelta(days=(written.weekday() - target) % 7 or 7)
    if future:
        return written + dt.timedelta(days=(target - written.weekday()) % 7)
    return written - dt.timedelta(days=(written.weekday() - target) % 7)


def _relative_unit(written: Day, count: int, unit: str) -> tuple[Day, Day]:
    """The day, week, month or year ``count`` units from ``written`` (negative: back)."""
    unit = unit.lower().rstrip("s")
    if unit == "day":
        day = written + dt.timedelta(days=count)
        return day, day
    if unit == "week":
        return _week_of(written + dt.timedelta(weeks=count))
    if unit == "month":
        moved = _shift(written, count)
        return _month_span(moved.year, moved.month)
    return Day(written.year + count, 1, 1), Day(written.year + count, 12, 31)


def _month_year(written: Day, month: int, year: int | None, which: str, future: bool) -> tuple[Day, Day]:
    """The month a month name stands for: with its year; ``last``/``next``/``this``; else the nearest one in the
    direction the sentence speaks of (the current month counts as both)."""
    if year is None:
        year = written.year
        if which == "last":
            year -= month >= written.month
        elif which == "next":
            year += month <= written.month
        elif which != "this" and future and month < written.month:
            year += 1
        elif which != "this" and not future and month > written.month:
            year -= 1
    return _month_span(year, month)


class _Unified:
    """One match read through the names of its first alternative (a pattern with alternatives numbers its groups
    ``mon``, ``mon2`` …): ``unified["mon"]`` is whichever alternative matched."""

    def __init__(self, match: re.Match[str]) -> None:
        self.match = match

    def __getitem__(self, name: str | int) -> str | None:
        if isinstance(name, int):
            return self.match[name]
        groups = self.match.groupdict()
        for key in (name, f"{name}2", f"{name}3"):
            if groups.get(key):
                return groups[key]
        return None


Span = tuple[Day, Day]
Resolver = Callable[[_Unified, Day, bool], Span | None]


def _iso(match: _Unified, written: Day, future: bool) -> Span | None:
    try:
        day = Day(int(match["y"] or 0), int(match["m"] or 0), int(match["d"] or 0))
    except ValueError:
        return None
    return day, day


_DAY_WORDS = {
    "today": 0,
    "tonight": 0,
    "this morning": 0,
    "this afternoon": 0,
    "this evening": 0,
    "yesterday": -1,
    "last night": -1,
    "tomorrow": 1,
    "the day before yesterday": -2,
    "the day after tomorrow": 2,
}


def _day_word(match: _Unified, written: Day, future: bool) -> Span:
    day = written + dt.timedelta(days=_DAY_WORDS[_words(match[0])])
    return day, day


def _weekday(match: _Unified, written: Day, future: bool) -> Span:
    day = _weekday_day(written, match["wd"] or "", _words(match["which"]), future)
    return day, day


def _period(match: _Unified, written: Day, future: bool) -> Span:
    """last/this/next (or this past) week, weekend, month or year."""
    sign = -1 if _words(match["which"]) in ("last", "this past") else int(_words(match["which"]) == "next")
    unit = _words(match["unit"])
    if unit == "weekend":
        monday, _ = _week_of(written + dt.timedelta(weeks=sign))
        return monday + dt.timedelta(days=5), monday + dt.timedelta(days=6)
    return _relative_unit(written, sign, unit)


def _ago(match: _Unified, written: Day, future: bool) -> Span:
    return _relative_unit(written, -_count(match["n"] or ""), match["unit"] or "")


def _ahead(match: _Unified, written: Day, future: bool) -> Span:
    return _relative_unit(written, _count(match["n"] or ""), match["unit"] or "")


def _month_day(match: _Unified, written: Day, future: bool) -> Span | None:
    year = int(match["y"]) if match["y"] else None
    start, _ = _month_year(written, _month_number(match["mon"] or ""), year, "", future)
    try:
        day = start.replace(day=int(match["day"] or 0))
    except ValueError:
        return None
    return day, day


def _month(match: _Unified, written: Day, future: bool) -> Span:
    year = int(match["y"]) if match["y"] else None
    return _month_year(written, _month_number(match["mon"] or ""), year, _words(match["which"]), future)


def _words(text: str | None) -> str:
    return " ".join((text or "").lower().split())


_ORDINAL = r"(?:st|nd|rd|th)?"
_YEAR = r"(?:19|20)\d\d"
#: Month names taken alone only when capitalised ("March", never "march"), and "May" only with a year or a word
#: before it.
_CAPITALISED_MONTHS = "|".join(name.capitalize() for name in MONTHS if name != "may")
#: Phrases and how each is resolved, most specific first; a span taken by one is not read again by a later one.
_PATTERNS: tuple[tuple[re.Pattern[str], Resolver], ...] = (
    (re.compile(rf"\b(?P<y>{_YEAR})-(?P<m>\d\d)-(?P<d>\d\d)\b"), _iso),
    (re.compile(r"(?i)\bthe day (?:before yesterday|after tomorrow)\b"), _day_word),
    (
        re.compile(r"(?i)\b(?:today|tonight|yesterday|tomorrow|last night|this (?:morning|afternoon|evening))\b"),
        _day_word,
    ),
    (
        re.compile(rf"(?i)\b(?:(?P<which>last|next|this past|this coming|this)\s+|on\s+)(?P<wd>{_WEEKDAY})\b"),
        _weekday,
    ),
    (re.compile(r"(?i)\b(?P<which>last|next|this past|this)\s+(?P<unit>week(?:end)?|month|year)\b"), _period),
    (re.compile(rf"(?i)\b(?P<n>{_COUNT})\s+(?P<unit>{_UNIT})\s+ago\b"), _ago),
    (re.compile(rf"(?i)\bin\s+(?P<n>{_COUNT})\s+(?P<unit>{_UNIT})\b"), _ahead),
    (
        re.compile(
            rf"(?i)\b(?P<mon>{_MONTH})\.?\s+(?P<day>[0-3]?\d){_ORDINAL}\b(?:,?\s+(?P<y>{_YEAR}))?"
            rf"|\b(?P<day2>[0-3]?\d){_ORDINAL}\s+(?:of\s+)?(?P<mon2>{_MONTH})\b(?:,?\s+(?P<y2>{_YEAR}))?"
        ),
        _month_day,
    ),
    (
        re.compile(
            rf"(?i)\b(?:(?P<which>last|next|this)\s+|(?:in|since|during|early|late|mid|by|until)\s+)"
            rf"(?P<mon>{_MONTH})\b(?:\s+(?P<y>{_YEAR}))?"
            rf"|(?-i:\b(?P<mon2>{_CAPITALISED_MONTHS})\b)(?:\s+(?P<y2>{_YEAR}))?"
            rf"|\b(?P<mon3>May)\s+(?P<y3>{_YEAR})\b"
        ),
        _month,
    ),
)


#: A month's name (or its first three letters) starting a word, in lowercased text.
_MONTH_WORD = re.compile(r"\b(?:" + "|".join(name[:3] for name in MONTHS) + ")")
_UNITS = ("day", "week", "month", "year")
#: Words one of which a text must hold (lowercased) for each pattern of :data:`_PATTERNS` to be tried: a substring
#: test is far cheaper than a regular expression of many alternatives over a long log that names no day.
_TRIGGERS: tuple[tuple[str, ...] | re.Pattern[str], ...] = (
    ("-",),
    ("the day",),
    ("today", "tonight", "yesterday", "tomorrow", "night", "this "),
    WEEKDAYS,
    _UNITS,
    (" ago",),
    _UNITS,
    _MONTH_WORD,
    _MONTH_WORD,
)
assert len(_TRIGGERS) == len(_PATTERNS)


#: Characters before a month's name where a phrase naming it may begin ("the 12th of ", "early ").
_BEFORE_MONTH = 24
#: Characters after the start of a month's name that a phrase naming it may take ("ember 12th, 2024").
_AFTER_MONTH = 40


def _near_words(pattern: re.Pattern[str], text: str, words: Iterable[re.Match[str]]) -> Iterator[re.Match[str]]:
    """``pattern``'s matches in ``text`` that begin shortly before one of ``words`` (a month's name), each the match
    a scan of the whole text finds there: a month pattern run over a long log costs a scan per alternative at every
    character, a look near each month's name costs a few."""
    seen = -1
    for word in words:
        end = word.end() + _AFTER_MONTH
        found = pattern.search(text, max(seen + 1, word.start() - _BEFORE_MONTH), end)
        while found is not None and found.start() <= word.start():
            whole = pattern.match(text, found.start())  # the text's own end, not the window's, bounds it
            if whole is not None and whole.start() > seen:
                seen = whole.end() - 1
                yield whole
                break
            found = pattern.search(text, found.start() + 1, end)


def _sentence_around(text: str, start: int, end: int) -> str:
    left = max(text.rfind(mark, 0, start) for mark in ".!?\n")
    rights = [i for i in (text.find(mark, end) for mark in ".!?\n") if i != -1]
    return text[left + 1 : min(rights) if rights else len(text)]


def find_dates(text: str, written: Day, *, past: bool | None = None) -> list[DateSpan]:
    """The date phrases of ``text``, in the order they appear, each resolved against ``written`` (the day the text
    was written). An ambiguous phrase ("in May", "on Saturday") takes the direction its sentence speaks of: what
    is still to come when it says so ("will", "going to", "next" …), else what has passed; ``past=True`` (a
    search query) always takes what has passed, ``past=False`` (a plan or a promise) what is to come."""
    found: list[DateSpan] = []
    taken: list[tuple[int, int]] = []
    lowered = text.lower()
    for (pattern, resolve), triggers in zip(_PATTERNS, _TRIGGERS):
        if isinstance(triggers, re.Pattern):
            matches: Iterable[re.Match[str]] = _near_words(pattern, text, triggers.finditer(lowered))
        elif any(word in lowered for word in triggers):
            matches = pattern.finditer(text)
        else:
            continue
        for match in matches:
            start, end = match.span()
            if any(start < right and left < end for left, right in taken):
                continue
            future = past is False or (past is None and bool(_FUTURE.search(_sentence_around(text, start, end))))
            span = resolve(_Unified(match), written, future)
            if span is None:
                continue
            taken.append((start, end))
            found.append(DateSpan(match[0], span[0], span[1], (start, end)))
    found.sort(key=lambda span: span.at)
    return found
