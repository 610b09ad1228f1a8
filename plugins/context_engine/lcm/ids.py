"""Message ids as compact runs, and id ranges such as ``"34..50"``.

The gateway numbers a session's messages 1, 2, 3 …; offline transcripts use ``m00031`` or
line numbers. What one compaction takes out of the context is therefore nearly always one
or two runs of consecutive numbers under one prefix, so the engine persists runs
(``[["34", "50"], "57"]``) instead of every id: the state stays small — ranges and
counts, never message text — and every id stays exactly recoverable.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from agent.messages import Message

#: One run: a single id, or ``[first, last]`` of consecutively numbered ids.
Run = str | list[str]

#: Separator of a range's two ends in tool arguments and in what the model is shown.
RANGE_SEPARATOR = ".."

_NUMBERED = re.compile(r"(.*?)(\d+)")


@dataclass(frozen=True)
class NumberedId:
    """An id split into a prefix and its trailing number (``m00031`` → ``m``, 31, width 5)."""

    prefix: str
    number: int
    width: int

    def shifted(self, step: int) -> str:
        return f"{self.prefix}{self.number + step:0{self.width}d}"


def parse_id(value: Any) -> NumberedId | None:
    """The id as prefix + number, or None when it does not end in digits."""
    match = _NUMBERED.fullmatch(str(value))
    if match is None:
        return None
    digits = match.group(2)
    return NumberedId(match.group(1), int(digits), len(digits))


def encode_runs(ids: Iterable[str]) -> list[Run]:
    """Consecutive numbered ids collapsed into ``[first, last]`` runs; everything else kept one by one, in order."""
    runs: list[Run] = []
    first: str | None = None
    last: str | None = None
    last_parsed: NumberedId | None = None
    for value in ids:
        value = str(value)
        if last_parsed is not None and last_parsed.shifted(1) == value:
            last, last_parsed = value, parse_id(value)
            continue
        if first is not None:
            runs.append(first if first == last else [first, last])  # type: ignore[list-item]
        first = last = value
        last_parsed = parse_id(value)
    if first is not None:
        runs.append(first if first == last else [first, last])  # type: ignore[list-item]
    return runs


def expand_runs(runs: Sequence[Run]) -> list[str]:
    """Every id the runs stand for, in order (the inverse of :func:`encode_runs`)."""
    ids: list[str] = []
    for run in runs:
        if isinstance(run, str):
            ids.append(run)
            continue
        first, last = str(run[0]), str(run[-1])
        start, end = parse_id(first), parse_id(last)
        if start is None or end is None or start.prefix != end.prefix or end.number < start.number:
            ids.extend(dict.fromkeys((first, last)))
            continue
        ids.extend(start.shifted(step) for step in range(end.number - start.number + 1))
    return ids


def runs_text(runs: Sequence[Run], separator: str = RANGE_SEPARATOR) -> str:
    """Runs as the model reads and writes them: ``"34..50, 57"``."""
    return ", ".join(run if isinstance(run, str) else f"{run[0]}{separator}{run[-1]}" for run in runs)


class RangeError(ValueError):
    """A range argument that names no messages; the message says why."""


def split_range(text: str) -> tuple[str, str]:
    """``"A..B"`` (also ``"A…B"``) → ``("A", "B")``; a single id is the range of itself."""
    for separator in (RANGE_SEPARATOR, "…"):
        if separator in text:
            start, _, end = text.partition(separator)
            start, end = start.strip(), end.strip()
            if not start or not end:
                raise RangeError(f"range {text!r} needs an id on both sides of {separator!r}")
            return start, end
    value = text.strip()
    if not value:
        raise RangeError("empty range")
    return value, value


def select_range(messages: Sequence[Message], start: str, end: str) -> list[Message]:
    """The messages from id ``start`` to id ``end`` inclusive.

    When both ends are numbered under one prefix, the range means every id with that
    prefix numbered between them, in number order (so ``4..33`` is what it says, wherever
    those messages now live). Otherwise it is the stretch between the two ids in the
    order ``messages`` lists them (archive first, then the live context).
    """
    first, last = parse_id(start), parse_id(end)
    if first is not None and last is not None and first.prefix == last.prefix:
        numbered = _numbered_between(messages, first, last)
        if numbered:
            return numbered
    positions = {
        str(m.get("_id")): index for index, m in reversed(list(enumerate(messages))) if m.get("_id") is not None
    }
    missing = [value for value in (start, end) if value not in positions]
    if missing:
        raise RangeError(f"no message with id {missing[0]!r}")
    low_index, high_index = sorted((positions[start], positions[end]))
    return list(messages[low_index : high_index + 1])


def _numbered_between(messages: Sequence[Message], first: NumberedId, last: NumberedId) -> list[Message]:
    """The messages numbered from ``first`` to ``last`` under their prefix, in number order (the first listed
    where two share a number); empty when none is."""
    low, high = sorted((first.number, last.number))
    chosen: dict[int, tuple[int, Message]] = {}
    for message in messages:
        parsed = parse_id(message.get("_id")) if message.get("_id") is not None else None
        if parsed is not None and parsed.prefix == first.prefix and low <= parsed.number <= high:
            chosen.setdefault(parsed.number, (parsed.number, message))
    return [message for _, message in sorted(chosen.values(), key=lambda item: item[0])]
