"""Facts taken mechanically from the ORIGINAL compacted turns, before anything is pruned.

The digest is what no summarizer may lose: the anchor index, every real user message verbatim, the tool calls
made and files touched, decision and preference sentences as written, the telling lines of long tool listings
(commits, search hits, issue rows, settings), a stand-in line per photo, document or voice message (and the newest
photos' refs, so the summary can still show them), and what the assistant was doing when the turns were cut. It is
carried from one compaction to the next (bounded), so the second compaction still knows what the first folded
away, and it is JSON-safe so the engine can persist it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent import json_codec
from agent.compaction.anchor_index import AnchorIndex
from agent.compaction.anchors import anchors_in
from agent.compaction.everyday import message_remarks
from agent.compaction.lean import STUBBED_KEY
from agent.compaction.listings import rank, records_in, search_queries
from agent.compaction.sentences import fact_sentences, is_greeting, normalised
from agent.messages import Message, carried_images, is_real_user_message, is_summary, item_refs, stand_in_lines
from agent.tokens import content_text

#: Bounds on what a digest carries between compactions (keeps the persisted state small).
MAX_QUOTES = 400
MAX_QUOTE_CHARS_TOTAL = 60_000
MAX_SENTENCES = 250
MAX_FILES = 300
MAX_ANCHORS_PER_KIND = 250
MAX_LISTING_LINES_PER_KIND = 200
MAX_ITEM_LINES = 300
#: Everyday remarks (people, events, plans, likes, feelings, places) kept per kind.
MAX_EVERYDAY_PER_KIND = 120
#: Refs of the newest folded photos a digest carries (the summary shows them while no newer ones crowd them out).
MAX_CARRIED_IMAGES = 4
#: Anchor kinds only engineering talk has: one of them and the conversation is not a plain chat.
ENGINEERING_ANCHORS = ("path", "commit", "ref", "error")
#: Listing scores are stored as integers (JSON-safe, comparable across compactions).
LISTING_SCORE_SCALE = 1000


@dataclass
class Line:
    """A sentence, message or listing line as written, with the id of the message it came from.

    Sentences also carry their kind (preference, decision, progress, fact) and score
    (see :mod:`agent.compaction.sentences`); listing lines theirs (see
    :mod:`agent.compaction.listings`).
    """

    text: str
    id: str | None = None
    seq: int = 0
    kind: str = ""
    score: int = 0

    def to_state(self) -> list[Any]:
        return [self.text, self.id, self.seq, self.kind, self.score]

    @classmethod
    def from_state(cls, row: Sequence[Any]) -> Line:
        kind = str(row[3]) if len(row) > 3 else ""
        score = int(row[4]) if len(row) > 4 else 0
        return cls(str(row[0]), row[1] if row[1] is None else str(row[1]), int(row[2]), kind, score)


@dataclass
class Digest:
    """Mechanical facts of everything compacted so far; lists are newest first."""

    anchors: AnchorIndex = field(default_factory=AnchorIndex)
    quotes: list[Line] = field(default_factory=list)
    first_request: Line | None = None
    tool_calls: dict[str, int] = field(default_factory=dict)
    files: dict[str, int] = field(default_factory=dict)
    sentences: list[Line] = field(default_factory=list)
    listings: list[Line] = field(default_factory=list)
    last_assistant: Line | None = None
    #: A stand-in line per item (photo, document, voice) of the folded messages, newest first.
    items: list[Line] = field(default_factory=list)
    #: Refs of the newest folded photos, newest first, each naming its message (``origin``).
    images: list[dict[str, Any]] = field(default_factory=list)
    #: What everyday conversation stated (:mod:`agent.compaction.everyday`), newest first; kind = the remark's.
    everyday: list[Line] = field(default_factory=list)
    messages: int = 0
    tokens: int = 0
    first_id: str | None = None
    last_id: str | None = None
    seq: int = 0

    def plain(self) -> bool:
        """Whether the compacted turns are people talking: no tool call, listing, file, path, commit, ticket or
        error line (the notes then give their room to people, events, plans and likes, not to empty parts)."""
        if self.tool_calls or self.listings or self.files:
            return False
        return not any(self.anchors.entries.get(kind) for kind in ENGINEERING_ANCHORS)

    def merge(self, older: Digest | None) -> Digest:
        """This digest (newer) with an earlier one folded in behind it, bounded."""
        if older is None:
            return self.bounded()
        self.anchors.merge(older.anchors)
        self.quotes = _dedupe_lines(self.quotes + older.quotes)
        self.first_request = older.first_request or self.first_request
        for name, count in older.tool_calls.items():
            self.tool_calls[name] = self.tool_calls.get(name, 0) + count
        for path, seq in older.files.items():
            self.files[path] = max(seq, self.files.get(path, 0))
        self.sentences = _dedupe_sentences(self.sentences + older.sentences)
        self.listings = _dedupe_lines(self.listings + older.listings)
        self.last_assistant = self.last_assistant or older.last_assistant
        self.items = _dedupe_lines(self.items + older.items)
        self.images = _dedupe_images(self.images + older.images)
        self.everyday = _dedupe_everyday(self.everyday + older.everyday)
        self.messages += older.messages
        self.tokens += older.tokens
        self.first_id = older.first_id or self.first_id
        self.last_id = self.last_id or older.last_id
        return self.bounded()

    def bounded(self) -> Digest:
        total = 0
        kept: list[Line] = []
        for quote in self.quotes[:MAX_QUOTES]:
            total += len(quote.text)
            if total > MAX_QUOTE_CHARS_TOTAL and kept:
                break
            kept.append(quote)
        self.quotes = kept
        if len(self.sentences) > MAX_SENTENCES:
            best = sorted(self.sentences, key=lambda line: (line.score, line.seq), reverse=True)[:MAX_SENTENCES]
            keep = {id(line) for line in best}
            self.sentences = [line for line in self.sentences if id(line) in keep]
        self.listings = _best_per_kind(self.listings, MAX_LISTING_LINES_PER_KIND)
        self.items = self.items[:MAX_ITEM_LINES]
        self.images = self.images[:MAX_CARRIED_IMAGES]
        if len(self.everyday) > MAX_EVERYDAY_PER_KIND:
            strongest = {id(line) for line in _best_per_kind(self.everyday, MAX_EVERYDAY_PER_KIND)}
            self.everyday = [line for line in self.everyday if id(line) in strongest]
        if len(self.files) > MAX_FILES:
            newest = sorted(self.files, key=self.files.__getitem__, reverse=True)[:MAX_FILES]
            self.files = {path: self.files[path] for path in newest}
        if len(self.anchors) > MAX_ANCHORS_PER_KIND * 4:
            self.anchors = self.anchors.trimmed(MAX_ANCHORS_PER_KIND)
        return self

    def to_state(self) -> dict[str, Any]:
        return {
            "anchors": self.anchors.trimmed(MAX_ANCHORS_PER_KIND).to_state(),
            "quotes": [line.to_state() for line in self.quotes],
            "first_request": self.first_request.to_state() if self.first_request else None,
            "tool_calls": dict(self.tool_calls),
            "files": dict(self.files),
            "sentences": [line.to_state() for line in self.sentences],
            "listings": [line.to_state() for line in self.listings],
            "last_assistant": self.last_assistant.to_state() if self.last_assistant else None,
            "items": [line.to_state() for line in self.items],
            "images": [dict(ref) for ref in self.images],
            "everyday": [line.to_state() for line in self.everyday],
            "messages": self.messages,
            "tokens": self.tokens,
            "first_id": self.first_id,
            "last_id": self.last_id,
            "seq": self.seq,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any] | None) -> Digest | None:
        if not state:
            return None
        lines = lambda key: [Line.from_state(row) for row in state.get(key) or ()]  # noqa: E731
        one = lambda key: Line.from_state(state[key]) if state.get(key) else None  # noqa: E731
        return cls(
            anchors=AnchorIndex.from_state(state.get("anchors")),
            quotes=lines("quotes"),
            first_request=one("first_request"),
            tool_calls={str(k): int(v) for k, v in (state.get("tool_calls") or {}).items()},
            files={str(k): int(v) for k, v in (state.get("files") or {}).items()},
            sentences=lines("sentences"),
            listings=lines("listings"),
            last_assistant=one("last_assistant"),
            items=lines("items"),
            images=[dict(ref) for ref in state.get("images") or () if isinstance(ref, Mapping)],
            everyday=lines("everyday"),
            messages=int(state.get("messages") or 0),
            tokens=int(state.get("tokens") or 0),
            first_id=state.get("first_id"),
            last_id=state.get("last_id"),
            seq=int(state.get("seq") or 0),
        )


def _dedupe_lines(lines: Sequence[Line]) -> list[Line]:
    seen: set[str] = set()
    out: list[Line] = []
    for line in lines:
        if line.text not in seen:
            seen.add(line.text)
            out.append(line)
    return out


def _dedupe_everyday(lines: Sequence[Line]) -> list[Line]:
    """Newest first, one per text; a person's relation or a place once, however often it was said (its newest
    saying kept: the part before its "(speaker, day)")."""
    seen: set[tuple[str, str]] = set()
    out: list[Line] = []
    for line in lines:
        key = line.text.rsplit(" (", 1)[0] if line.kind in ("person", "place") else line.text
        if (line.kind, key) not in seen:
            seen.add((line.kind, key))
            out.append(line)
    return out


def _dedupe_images(refs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Newest first, one per stored image."""
    seen: set[str] = set()
    out: list[dict[str, Any]] = []
    for ref in refs:
        if ref.get("sha") not in seen:
            seen.add(str(ref.get("sha")))
            out.append(dict(ref))
    return out


def _dedupe_sentences(lines: Sequence[Line]) -> list[Line]:
    """Newest first, one per normalised text (routine lines differing only in numbers collapse)."""
    seen: set[str] = set()
    out: list[Line] = []
    for line in lines:
        key = normalised(line.text)
        if key not in seen:
            seen.add(key)
            out.append(line)
    return out


def _best_per_kind(lines: Sequence[Line], limit: int) -> list[Line]:
    """The ``limit`` best lines of each kind, best first."""
    ranked = sorted(lines, key=lambda line: (line.score, line.seq), reverse=True)
    taken: dict[str, int] = {}
    kept = []
    for line in ranked:
        if taken.get(line.kind, 0) < limit:
            taken[line.kind] = taken.get(line.kind, 0) + 1
            kept.append(line)
    return kept


#: Longest argument a tool call's label shows (``terminal "pytest tests/billing"``).
MAX_CALL_ARGUMENT_CHARS = 30
#: Arguments that say what a call did, in the order one is picked for its label.
_LABEL_KEYS = ("command", "cmd", "path", "file_path", "file", "pattern", "query", "url")


@functools.lru_cache(maxsize=8_192)
def _label(name: str, arguments: str) -> str:
    """:func:`call_label` of a call's name and JSON arguments (memoized: the same calls recur across compactions)."""
    try:
        parsed = json_codec.loads(arguments) if arguments else {}
    except ValueError:
        parsed = arguments
    value: Any = parsed
    if isinstance(parsed, Mapping):
        value = next((parsed[key] for key in _LABEL_KEYS if isinstance(parsed.get(key), str)), None)
        value = value or next((item for item in parsed.values() if isinstance(item, str)), "")
    if not isinstance(value, str) or not value.strip():
        return name
    value = " ".join(value.split()).replace('"', "'")
    if len(value) > MAX_CALL_ARGUMENT_CHARS:
        value = value[: MAX_CALL_ARGUMENT_CHARS - 1].rstrip() + "…"
    return f'{name} "{value}"'


def call_label(call: Mapping[str, Any]) -> str:
    """A tool call as an error line's origin: its name and the argument that says what it did (clipped)."""
    function = call.get("function") or {}
    name = str(function.get("name") or "tool")
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        arguments = json_codec.dumps_text(arguments) if arguments else ""
    return _label(name, arguments)


def call_labels(messages: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """``tool_call_id -> label`` (:func:`call_label`) for the tool calls among ``messages``."""
    labels: dict[str, str] = {}
    for message in messages:
        for call in message.get("tool_calls") or ():
            if isinstance(call, Mapping) and isinstance(call.get("id"), str):
                labels[call["id"]] = call_label(call)
    return labels


def call_arguments_text(message: Mapping[str, Any]) -> str:
    """The arguments of an assistant message's tool calls, as one text (where the paths it touched are)."""
    parts = []
    for call in message.get("tool_calls") or ():
        if isinstance(call, Mapping):
            arguments = (call.get("function") or {}).get("arguments")
            parts.append(arguments if isinstance(arguments, str) else json_codec.dumps_text(arguments))
    return "\n".join(parts)


def build_digest(
    middle: Sequence[Message],
    counts: Sequence[int],
    *,
    seq_start: int = 0,
    stubbed: Sequence[tuple[int, Message]] = (),
    queries: Mapping[str, str] | None = None,
    calls: Mapping[str, str] | None = None,
) -> tuple[Digest, str | None]:
    """``(digest of the compacted messages, text of a summary found among them)``.

    A summary message from an earlier compaction is not re-digested (its facts live in the
    carried digest); its text is returned so the caller can use it when no digest was
    carried (state lost). ``stubbed`` are ``(seq, original)`` tool results that leave the
    kept head or tail as stubs: their text leaves the context just like the middle's, so their
    anchors and listing lines are taken too. ``queries`` maps tool call ids to the search
    patterns they were made with (found in ``middle`` when not given); ``calls`` maps them to
    the calls' labels (:func:`call_labels`), the origin an error line of their output is kept
    with — the calls in ``middle`` are labelled as they come, so ``calls`` is only needed for
    the stubbed results, whose calls stay in the kept head or tail.
    """
    builder = _DigestBuilder(search_queries(middle) if queries is None else queries, calls or {})
    for offset, message in enumerate(middle):
        builder.add(message, seq_start + offset, counts[offset] if offset < len(counts) else 0)
    for seq, message in stubbed:
        builder.add_stubbed(message, seq)
    return builder.finish(seq_start + len(middle)), builder.earlier_summary


class _DigestBuilder:
    """Collects one compaction's digest message by message (see :func:`build_digest`)."""

    def __init__(self, queries: Mapping[str, str], calls: Mapping[str, str]) -> None:
        self.digest = Digest()
        self.earlier_summary: str | None = None
        self.queries = queries
        self.stub_calls = calls
        #: Labels of the calls seen so far, so a result is kept with the latest call of its id.
        self.labels = dict(calls)
        self.quotes: list[Line] = []
        self.sentences: list[Line] = []
        self.listings: list[tuple[int, str | None, Sequence[Any]]] = []
        self.items: list[Line] = []
        self.everyday: list[Line] = []
        self.images: list[dict[str, Any]] = []

    def add(self, message: Message, seq: int, tokens: int) -> None:
        digest = self.digest
        role, message_id = message.get("role"), message.get("_id")
        text = content_text(message.get("content"))
        digest.messages += 1
        digest.tokens += tokens
        if message_id is not None:
            digest.first_id = digest.first_id or str(message_id)
            digest.last_id = str(message_id)
        if is_summary(message):
            self.earlier_summary = text
            return
        ident = None if message_id is None else str(message_id)
        self._items(message, ident, seq)
        if role == "assistant":
            self._calls(message, seq)
        conversation = role != "tool"
        origin = None if conversation else self.labels.get(str(message.get("tool_call_id")))
        digest.anchors.add_text(
            text,
            seq,
            conversation=conversation,
            message_id=ident,
            origin=origin,
            with_context=STUBBED_KEY not in message,
        )
        if not conversation:
            self._listing(message, text, seq, ident)
        elif is_real_user_message(message):
            line = Line(text.strip(), ident, seq)
            self.quotes.append(line)
            if digest.first_request is None and not is_greeting(line.text):
                digest.first_request = line
            self._said(message, text, ident, seq, True)
        elif role == "assistant" and text.strip():
            self._said(message, text, ident, seq, False)
            digest.last_assistant = Line(text.strip(), ident, seq)

    def _said(self, message: Message, text: str, ident: str | None, seq: int, by_user: bool) -> None:
        """A conversation message's everyday remarks and its fact sentences; a sentence a remark stands for is not
        listed twice."""
        said = message_remarks(message, text)
        self.everyday += [Line(remark.text, ident, seq, remark.kind, remark.score) for remark in said.items]
        self.sentences += [
            Line(s.text, ident, seq, s.kind, s.score)
            for s in fact_sentences(text, by_user)
            if s.text not in said.claimed
        ]

    def _items(self, message: Message, ident: str | None, seq: int) -> None:
        """A message's items: a stand-in line each, and its photos' refs (naming the message they came with)."""
        refs = item_refs(message)
        if not refs:
            return
        self.items += [Line(line, ident, seq) for line in stand_in_lines(message)]
        self.images += carried_images(message)

    def _calls(self, message: Message, seq: int) -> None:
        """An assistant message's tool calls: the files they touched, their count by tool, their anchors."""
        digest = self.digest
        arguments = call_arguments_text(message)
        for kind, anchor in anchors_in(arguments, True):
            if kind == "path":
                digest.files[anchor] = seq
        for call in message.get("tool_calls") or ():
            name = str(((call or {}).get("function") or {}).get("name") or "tool")
            digest.tool_calls[name] = digest.tool_calls.get(name, 0) + 1
        self.labels.update(call_labels([message]))  # a result answers the latest call with its id
        digest.anchors.add_text(arguments, seq, conversation=True, with_context=False)

    def _listing(self, message: Message, text: str, seq: int, ident: str | None) -> None:
        self.listings.append((seq, ident, records_in(text, self.queries.get(str(message.get("tool_call_id"))))))

    def add_stubbed(self, message: Message, seq: int) -> None:
        """A tool result that stays in the head or tail as a stub: its text leaves the context like the middle's."""
        text = content_text(message.get("content"))
        ident = None if message.get("_id") is None else str(message["_id"])
        origin = self.stub_calls.get(str(message.get("tool_call_id")))
        self.digest.anchors.add_text(text, seq, message_id=ident, origin=origin)
        self._listing(message, text, seq, ident)

    def finish(self, next_seq: int) -> Digest:
        digest = self.digest
        digest.quotes = self.quotes[::-1]
        digest.items = _dedupe_lines(self.items[::-1])
        digest.images = _dedupe_images(self.images[::-1])
        digest.everyday = _dedupe_everyday(self.everyday[::-1])
        digest.sentences = _dedupe_sentences(self.sentences[::-1])
        scored = [
            Line(item.record.text, item.message_id, item.seq, item.record.kind, round(item.score * LISTING_SCORE_SCALE))
            for item in rank(self.listings)
        ]
        digest.listings = _best_per_kind(scored, MAX_LISTING_LINES_PER_KIND)
        digest.seq = next_seq
        return digest
