"""An extractive stand-in for a summarizer model: notes with the required sections, written by rules, no model.

``foldgate eval compaction --summarizer stand-in`` (and ``eval decay``) use it to run the
compressor's model path — notes written piece by piece, carried into the next compaction,
the model notes' share of the summary — where no provider is at hand, and to see what notes that only copy
sentences keep. It reads the transcript in the request it is sent and keeps a few
sentences per section: the first user request (goal), user lines that lay down a rule
(constraints), assistant lines that report work (done), the last ones of each (in
progress, next steps), lines that decide something, the error lines of tool output
(blocked), paths (files), and sentences carrying identifiers (critical context). Each
line cites its message id. Same request, same notes.

It is a floor, not a model: what a real summarizer keeps beyond these notes is what the
model adds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from agent.compaction.summary_prompt import PROGRESS_SUBHEADINGS, SECTION_HEADINGS
from agent.tokens import content_text, count_text

#: Share of ``max_tokens`` the notes fill at most (the compressor lets an answer run a third over its budget).
FILL_SHARE = 0.7
#: Sentences one piece of transcript adds to a section.
PER_SECTION = 6
#: Longest sentence copied whole.
MAX_SENTENCE_CHARS = 280
#: Most paths one piece of transcript adds under Relevant Files (the latest it mentions).
MAX_FILES = 16

_ENTRY = re.compile(r"^\[([^\]\n]+)\] (user|assistant|system|tool result(?: \([^)\n]*\))?)(?: \(synthetic\))?: ", re.M)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`\"'(\[])")
_RULE = re.compile(r"\b(always|never|don't|do not|from now on|house rule|remember|prefer|must|make sure)\b", re.I)
_DONE = re.compile(
    r"\b(committed|opened|fixed|merged|pushed|added|switched|checked|patched|deployed|wrote|moved)\b", re.I
)
_DECISION = re.compile(r"\b(decid\w*|decision|we go with|we'll use|instead of|rather than|agreed)\b", re.I)
_ERROR_LINE = re.compile(r"^(?:[A-Z]\w*(?:Error|Exception)\b.*|.*\b(?:ERROR|FAILED)\b.*)$")
_IDENTIFIER = re.compile(r"\b[0-9a-f]{7,40}\b|#\d{2,}|\b[A-Z][A-Z0-9]+-\d+\b|\bE\d{3,}\b|\b\d[\d,.]*(?:ms|s|%)?\b")
_PATH = re.compile(r"(?<![\w/])(?:src|tests|deploy|config|docs)/[\w./-]*\w\.\w+")
_TAG = re.compile(r"<(previous_notes|turns)>\n(.*?)\n</\1>", re.S)


@dataclass(frozen=True)
class Entry:
    """One transcript message as the summarizer sees it: its id, its role and its text."""

    ident: str
    role: str
    text: str


def parse_request(messages: Sequence[dict[str, Any]]) -> tuple[str | None, list[Entry]]:
    """The previous notes (if any) and the transcript entries of a summarizing request."""
    request = content_text(messages[-1].get("content")) if messages else ""
    parts = {name: body for name, body in _TAG.findall(request)}
    turns = parts.get("turns", "")
    marks = list(_ENTRY.finditer(turns))
    ends = [mark.start() for mark in marks[1:]] + [len(turns)]
    entries = [
        Entry(mark.group(1), mark.group(2).split(" ")[0], turns[mark.end() : end].strip())
        for mark, end in zip(marks, ends)
    ]
    return parts.get("previous_notes"), entries


def sentences(text: str) -> list[str]:
    """Prose sentences of a message, code fences and tool-call lines left out, each clipped."""
    prose = re.sub(r"```.*?(```|$)", " ", text, flags=re.S)
    found = []
    for line in prose.splitlines():
        line = line.strip()
        if not line or line.startswith("-> calls "):
            continue
        found += [piece.strip() for piece in _SENTENCE_END.split(line) if len(piece.strip()) > 3]
    return [piece if len(piece) <= MAX_SENTENCE_CHARS else piece[: MAX_SENTENCE_CHARS - 1] + "…" for piece in found]


def _cited(entries: Iterable[Entry], role: str, keep: re.Pattern[str] | None = None) -> list[str]:
    """``[id] sentence`` for every sentence of ``role``'s messages that ``keep`` matches (all when None)."""
    return [
        f"[{entry.ident}] {sentence}"
        for entry in entries
        if entry.role == role
        for sentence in sentences(entry.text)
        if keep is None or keep.search(sentence)
    ]


def _error_lines(entries: Sequence[Entry]) -> list[str]:
    return [
        f"[{entry.ident}] {line.strip()[:MAX_SENTENCE_CHARS]}"
        for entry in entries
        if entry.role == "tool"
        for line in entry.text.splitlines()
        if _ERROR_LINE.match(line.strip())
    ]


def extract(entries: Sequence[Entry]) -> dict[str, list[str]]:
    """Section heading -> the lines this piece of transcript contributes (a few each)."""
    said = _cited(entries, "user")
    replies = _cited(entries, "assistant")
    paths = list(dict.fromkeys(path for entry in entries for path in _PATH.findall(entry.text)))
    return {
        "## Goal": said[:1],
        "## Constraints & Preferences": _cited(entries, "user", _RULE)[:PER_SECTION],
        "### Done": _cited(entries, "assistant", _DONE)[:PER_SECTION],
        "### In Progress": replies[-1:],
        "### Blocked": _error_lines(entries)[-3:],
        "## Key Decisions": [line for line in said + replies if _DECISION.search(line)][:PER_SECTION],
        "## Relevant Files": paths[-MAX_FILES:],
        "## Next Steps": said[-1:],
        "## Critical Context": [line for line in said + replies if _IDENTIFIER.search(line)][-PER_SECTION:],
    }


#: The notes' layout: the required sections in order, the progress subsections under Progress.
LAYOUT: tuple[str, ...] = tuple(
    heading
    for section in SECTION_HEADINGS
    for heading in ((section, *PROGRESS_SUBHEADINGS) if section == "## Progress" else (section,))
)
#: Sections whose items are replaced, not accumulated, when the notes are updated.
_LATEST_ONLY = ("### In Progress", "## Next Steps")


def parse_notes(notes: str | None) -> dict[str, list[str]]:
    """Previous notes back into heading -> item lines (the ``- `` bullets under each heading)."""
    sections: dict[str, list[str]] = {heading: [] for heading in LAYOUT}
    current: str | None = None
    for line in (notes or "").splitlines():
        if line.startswith("#"):
            current = line.strip() if line.strip() in sections else None
        elif current and line.startswith("- ") and line[2:].strip() != "(none)":
            sections[current].append(line[2:].strip())
    return sections


def merge(previous: dict[str, list[str]], new: dict[str, list[str]]) -> dict[str, list[str]]:
    """The updated notes: new items after the old, old ones dropped where only the latest counts; no item twice."""
    merged = {}
    for heading in LAYOUT:
        old = [] if heading in _LATEST_ONLY and new.get(heading) else previous.get(heading, [])
        if heading == "## Goal" and old:
            merged[heading] = old
            continue
        merged[heading] = list(dict.fromkeys(old + new.get(heading, [])))
    return merged


def fit(sections: dict[str, list[str]], limit: int) -> dict[str, list[str]]:
    """Drop the oldest item of the fullest section until the notes fit ``limit`` tokens (the goal stays)."""
    costs = {heading: [count_text(item) + 2 for item in items] for heading, items in sections.items()}
    total = sum(count_text(heading) + 2 for heading in LAYOUT) + sum(map(sum, costs.values()))
    kept = {heading: list(items) for heading, items in sections.items()}
    while total > limit:
        heading = max((h for h in kept if kept[h] and h != "## Goal"), key=lambda h: sum(costs[h]), default=None)
        if heading is None:
            break
        kept[heading].pop(0)
        total -= costs[heading].pop(0)
    return kept


def render(sections: dict[str, list[str]]) -> str:
    """The notes as Markdown, every heading present (an empty one says ``(none)``)."""
    lines: list[str] = []
    for heading in LAYOUT:
        items = sections.get(heading) or ([] if heading == "## Progress" else ["(none)"])
        lines += [heading, *(f"- {item}" for item in items), ""]
    return "\n".join(lines).strip() + "\n"


class StandInSummarizer:
    """A :class:`agent.compaction.summarizer.Summarizer` that copies sentences instead of calling a model."""

    def __init__(self, context_length: int = 128_000, name: str = "stand-in") -> None:
        self.name = name
        self.context_length = context_length
        self.calls = 0

    async def call_llm(self, *, task: str = "compression", messages: list[dict[str, Any]], max_tokens: int) -> str:
        """Notes for the request's transcript, updating the previous notes it carries, within ``max_tokens``."""
        self.calls += 1
        previous, entries = parse_request(messages)
        notes = merge(parse_notes(previous), extract(entries))
        return render(fit(notes, int(max_tokens * FILL_SHARE)))
