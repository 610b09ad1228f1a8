"""The anchor index: which anchors a compaction keeps, ranked, with where each was best seen, and how it is rendered.

Anchors come from :mod:`agent.compaction.anchors`; the index scores them by how often and
where they were mentioned and how recently, carries them across compactions (merged, trimmed,
saved in the engine's state), and renders the best of each kind within a token budget.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.compaction.anchor_context import RECORD_LABEL
from agent.compaction.anchors import KINDS, LABELS, MENTION_WEIGHT, ROUND_SHARES, Anchor, weigh, weighed_text
from agent.compaction.error_lines import error_signature
from agent.compaction.fitting import count_line

#: Longest context kept in (or loaded from) an index's state.
MAX_SEEN_CHARS = 240


#: Where an anchor was best seen: ``(context, message id, weight of that mention)`` — a few words
#: of context (an error line's producer), the message they came from, how much that mention weighed.
Seen = tuple[str, str | None, int]


def _better(context: str, weight: int, old: Seen) -> bool:
    """Whether a mention's context replaces the kept one: it weighs more, or as much and says more."""
    return weight > old[2] or (weight == old[2] and len(context) > len(old[0]))


def with_origin(kind: str, context: str, origin: str | None) -> str:
    """An error line's producer followed by the tool call whose output held it (``(run_tests "pytest …")``).

    Not when the output itself named the job (its traceback's log record): the call that
    printed a log says less than the record, and every token of an entry is one less entry.
    Other anchors keep their own words only: a call's name next to each of a listing's
    hundred identifiers would cost the index more than it tells.
    """
    if not origin or kind != "error" or RECORD_LABEL in context:
        return context
    return f"{context} ({origin})" if context else f"({origin})"


@dataclass
class AnchorIndex:
    """Distinct anchors per kind, scored by how often and where they were mentioned, and how recently.

    ``entries[kind][anchor] = [score, last_seq]``. Each mention adds a weight: a mention in
    what a person or the assistant wrote counts three times one in tool output, and a
    mention among many of its kind in one message (one SHA of a hundred in a git log)
    counts for its share only — so an identifier that stands out ranks above a listing.
    ``last_seq`` grows with message position across compactions, so recency survives merges.

    ``seen[kind][anchor]`` is where the anchor was best seen (:data:`Seen`, from its heaviest
    mention): an identifier alone says little, next to the words around it it answers a question.
    """

    entries: dict[str, dict[str, list[int]]] = field(default_factory=lambda: {kind: {} for kind in KINDS})
    seen: dict[str, dict[str, Seen]] = field(default_factory=dict)

    def add(
        self,
        kind: str,
        anchor: str,
        seq: int,
        weight: int = MENTION_WEIGHT,
        context: str = "",
        message_id: str | None = None,
    ) -> None:
        bucket = self.entries.setdefault(kind, {})
        entry = bucket.get(anchor)
        if entry is None:
            bucket[anchor] = [weight, seq]
        else:
            entry[0] += weight
            if seq > entry[1]:
                entry[1] = seq
        if context:
            self._see(kind, anchor, context, message_id, weight)

    def add_all(self, anchors: Sequence[Anchor], seq: int, conversation: bool = False) -> None:
        """Add one message's anchors, weighting each by its role and how crowded its kind is there."""
        self._addweigh(weigh(anchors, conversation), seq)

    def add_text(
        self,
        text: str,
        seq: int,
        conversation: bool = False,
        *,
        message_id: str | None = None,
        origin: str | None = None,
        with_context: bool = True,
    ) -> None:
        """:meth:`add_all` for the anchors of ``text`` (their weights and contexts memoized per text).

        ``message_id`` is the message ``text`` belongs to; ``origin`` the tool call that produced
        it (see :func:`with_origin`). ``with_context=False`` takes the anchors without their
        context: a stub's words are about the stub, not about what it stands for, and the
        words of a tool call's arguments are its keys.
        """
        if text:
            self._addweigh(weighed_text(text, conversation), seq, message_id, origin, with_context)

    def _addweigh(
        self,
        weighted: Sequence[tuple[str, str, int, str]],
        seq: int,
        message_id: str | None = None,
        origin: str | None = None,
        with_context: bool = True,
    ) -> None:
        entries, seen_by_kind = self.entries, self.seen
        for kind, anchor, weight, context in weighted:
            bucket = entries.get(kind)
            if bucket is None:
                bucket = entries[kind] = {}
            entry = bucket.get(anchor)
            if entry is None:
                bucket[anchor] = [weight, seq]
            else:
                entry[0] += weight
                if seq > entry[1]:
                    entry[1] = seq
            if not with_context:
                continue
            if origin and kind == "error":
                context = with_origin(kind, context, origin)
            if context:  # :meth:`_see`, inlined: this loop runs for every anchor of every message
                seen = seen_by_kind.get(kind)
                if seen is None:
                    seen = seen_by_kind[kind] = {}
                old = seen.get(anchor)
                if old is None or _better(context, weight, old):
                    seen[anchor] = (context, message_id, weight)

    def _see(self, kind: str, anchor: str, context: str, message_id: str | None, weight: int) -> None:
        """Keep ``context`` for the anchor unless the kept one's mention was better (:func:`_better`)."""
        seen = self.seen.setdefault(kind, {})
        old = seen.get(anchor)
        if old is None or _better(context, weight, old):
            seen[anchor] = (context[:MAX_SEEN_CHARS], message_id, weight)

    def merge(self, older: AnchorIndex) -> None:
        """Fold an earlier compaction's index into this one (mentions add up, recency and the best context are kept)."""
        for kind, bucket in older.entries.items():
            for anchor, (mentions, seq) in bucket.items():
                entry = self.entries.setdefault(kind, {}).get(anchor)
                if entry is None:
                    self.entries[kind][anchor] = [mentions, seq]
                else:
                    entry[0] += mentions
                    entry[1] = max(entry[1], seq)
        for kind, seen in older.seen.items():
            for anchor, (context, message_id, weight) in seen.items():
                self._see(kind, anchor, context, message_id, weight)

    def ranked(self, kind: str) -> list[str]:
        """Anchors of one kind, highest score first, then most recent; errors by :func:`error_ranking`."""
        bucket = self.entries.get(kind, {})
        if kind == "error":
            return error_ranking(bucket)
        return sorted(bucket, key=lambda anchor: (bucket[anchor][0], bucket[anchor][1]), reverse=True)

    def context(self, kind: str, anchor: str) -> str:
        """The words the anchor was best seen with (an error line's producer), or ""."""
        seen = self.seen.get(kind, {}).get(anchor)
        return seen[0] if seen else ""

    def described(self, kind: str, anchor: str) -> str:
        """The anchor as an index entry shows it: with its context beside it (an error line: ``— from …``)."""
        context = self.context(kind, anchor)
        if not context:
            return anchor
        return f"{anchor} — {context}" if kind == "error" else f"{anchor} ({context})"

    def __len__(self) -> int:
        return sum(len(bucket) for bucket in self.entries.values())

    def trimmed(self, per_kind: int) -> AnchorIndex:
        """The ``per_kind`` best anchors of each kind (bounds what is persisted)."""
        kept = AnchorIndex()
        for kind in self.entries:
            bucket = self.entries[kind]
            seen = self.seen.get(kind, {})
            best = self.ranked(kind)[:per_kind]
            kept.entries[kind] = {anchor: list(bucket[anchor]) for anchor in best}
            kept.seen[kind] = {anchor: seen[anchor] for anchor in best if anchor in seen}
        return kept

    def to_state(self) -> dict[str, list[list[Any]]]:
        """``{kind: [[anchor, score, seq] + ([context, message id, weight] when seen with one)]}`` (JSON-safe)."""
        state: dict[str, list[list[Any]]] = {}
        for kind, bucket in self.entries.items():
            seen = self.seen.get(kind, {})
            rows = [[anchor, *entry, *seen.get(anchor, ())] for anchor, entry in bucket.items()]
            if rows:
                state[kind] = rows
        return state

    @classmethod
    def from_state(cls, state: Mapping[str, Sequence[Sequence[Any]]] | None) -> AnchorIndex:
        """The index :meth:`to_state` wrote; rows without a context (older states) load as anchors only."""
        index = cls()
        for kind, rows in (state or {}).items():
            for row in rows:
                if len(row) < 3 or not isinstance(row[0], str):
                    continue
                index.entries.setdefault(kind, {})[row[0]] = [int(row[1]), int(row[2])]
                if len(row) >= 6 and isinstance(row[3], str) and row[3]:
                    message_id = None if row[4] is None else str(row[4])
                    index.seen.setdefault(kind, {})[row[0]] = (row[3][:MAX_SEEN_CHARS], message_id, int(row[5]))
        return index


def error_ranking(bucket: Mapping[str, Sequence[int]]) -> list[str]:
    """Error lines ranked by their score divided among the lines of their kind of failure.

    Lines are grouped by :func:`error_signature`: a log's hundred ``TimeoutError`` lines,
    each with its own id, are one failure told a hundred times, and share one line's worth
    of score; the one ``PayoutDedupError`` or ``[E6706]`` among them keeps all of its own, so
    it is not buried under them, in one compaction or over many. Within a kind the order
    stays: score, then recency.
    """
    sizes: dict[str, int] = {}
    signatures = {anchor: error_signature(anchor) for anchor in bucket}
    for signature in signatures.values():
        sizes[signature] = sizes.get(signature, 0) + 1
    return sorted(
        bucket,
        key=lambda anchor: (bucket[anchor][0] / sizes[signatures[anchor]], bucket[anchor][1]),
        reverse=True,
    )


def render_index(
    index: AnchorIndex,
    budget_tokens: int,
    skip: Callable[[str], bool] = lambda anchor: False,
) -> tuple[str, int]:
    """``(index text, tokens used)``: anchors taken round-robin across kinds, best first, within the budget.

    Round-robin (``ROUND_SHARES`` per kind and round) keeps a flood of one kind — hundreds
    of SHAs from a git log — from crowding out the rare ones, like the one error string.
    An anchor contained in one taken earlier, or for which ``skip`` is true (it survives
    verbatim elsewhere), is left out.

    Entries carry their context (:meth:`AnchorIndex.described`), its cost counted. When the
    budget binds, the best entries carry it up to :data:`CONTEXT_SHARE` of the budget (error
    lines always) and the tail is listed bare: fewer entries, but the ones that matter told.
    When every anchor fits bare, contexts take :data:`SPARE_CONTEXT_SHARE` of what is left
    and the rest stays for what the summary adds after the index (older user messages).
    """
    queues = {kind: index.ranked(kind) for kind in KINDS if index.entries.get(kind)}
    bare = _Fill(index, queues, budget_tokens, skip).run()
    if bare.complete:
        allowance = (budget_tokens - bare.used) * SPARE_CONTEXT_SHARE
        fill = _Fill(index, queues, budget_tokens, skip, lambda kind, used, extra: extra <= allowance).run()
    else:
        until = budget_tokens * CONTEXT_SHARE
        fill = _Fill(
            index, queues, budget_tokens, skip, lambda kind, used, extra: kind == "error" or used < until
        ).run()
    lines = [_kind_lines(kind, fill.chosen[kind]) for kind in KINDS if fill.chosen.get(kind)]
    return "\n".join(lines), fill.used


#: ``describe(kind, tokens used so far, context tokens so far with this entry's)``: whether the entry carries its
#: context.
Describe = Callable[[str, int, int], bool]


class _Fill:
    """One round-robin pass of :func:`render_index` over the ranked anchors, within the budget."""

    def __init__(
        self,
        index: AnchorIndex,
        queues: Mapping[str, Sequence[str]],
        budget_tokens: int,
        skip: Callable[[str], bool],
        describe: Describe | None = None,
    ) -> None:
        self.index, self.queues, self.budget, self.skip, self.describe = index, queues, budget_tokens, skip, describe
        self.positions = dict.fromkeys(queues, 0)
        self.misfits = dict.fromkeys(queues, 0)
        self.chosen: dict[str, list[tuple[str, str]]] = {kind: [] for kind in queues}
        self.taken = _Taken()
        self.used = 0
        #: Tokens spent on contexts beyond what the same entries cost bare.
        self.extra = 0

    def run(self) -> _Fill:
        active = [kind for kind in KINDS if kind in self.queues]
        while active and self.used < self.budget:
            active = [kind for kind in active if all(self._take_next(kind) for _ in range(ROUND_SHARES.get(kind, 1)))]
        return self

    @property
    def complete(self) -> bool:
        """Whether every anchor not skipped was taken (the budget did not bind)."""
        return all(self.positions[kind] == len(queue) and not self.misfits[kind] for kind, queue in self.queues.items())

    def _entry(self, kind: str, anchor: str) -> tuple[str, int, int]:
        """``(entry text, its cost, its context's share of it)`` for the next anchor taken."""
        cost = count_line(anchor) + (_ENTRY_LINE_TOKENS if kind == "error" else 1)
        if self.describe is None:
            return anchor, cost, 0
        entry = self.index.described(kind, anchor)
        if entry == anchor:
            return anchor, cost, 0
        told = count_line(entry) + _ENTRY_LINE_TOKENS
        if not self.describe(kind, self.used, self.extra + told - cost):
            return anchor, cost, 0
        return entry, told, told - cost

    def _take_next(self, kind: str) -> bool:
        """Take the kind's next anchor that fits; False when the kind has nothing more to give."""
        queue = self.queues[kind]
        while self.positions[kind] < len(queue) and self.misfits[kind] < 8:
            anchor = queue[self.positions[kind]]
            self.positions[kind] += 1
            if self.skip(anchor) or anchor in self.taken:
                continue
            entry, cost, extra = self._entry(kind, anchor)
            cost += _KIND_HEADER_TOKENS if not self.chosen[kind] else 0
            if self.used + cost > self.budget:
                self.misfits[kind] += 1
                continue
            self.chosen[kind].append((anchor, entry))
            self.taken.add(anchor)
            self.used += cost
            self.extra += extra
            return True
        return False


def _kind_lines(kind: str, chosen: Sequence[tuple[str, str]]) -> str:
    """One kind's part of the index: entries with context (and error lines) one a line, bare anchors on one line."""
    described = [entry for anchor, entry in chosen if entry != anchor or kind == "error"]
    bare = [anchor for anchor, entry in chosen if entry == anchor and kind != "error"]
    if not described:
        return f"- {LABELS[kind]}: " + ", ".join(bare)
    lines = [f"- {LABELS[kind]}:", *(f"  - {entry}" for entry in described)]
    if bare:
        lines.append("  - " + ", ".join(bare))
    return "\n".join(lines)


#: Share of the index budget whose entries carry their context; the long tail after it is listed bare
#: (still verbatim and searchable), so a budget holds both the entries that matter, told, and many more.
CONTEXT_SHARE = 0.75
#: Share of what a bare index leaves unused that contexts may take when every anchor fits.
SPARE_CONTEXT_SHARE = 0.5
#: Tokens the line of an entry shown on its own costs besides its text ("\n  - ").
_ENTRY_LINE_TOKENS = 2
#: Tokens a kind's line costs before its first anchor ("- Files and paths: ").
_KIND_HEADER_TOKENS = 8


class _Taken:
    """Anchors taken so far, answering "is this one contained in one of them?" cheaply."""

    def __init__(self) -> None:
        self._blob = ""
        self._recent: list[str] = []

    def add(self, anchor: str) -> None:
        self._recent.append(anchor)
        if len(self._recent) >= 32:
            self._blob += "\n" + "\n".join(self._recent)
            self._recent = []

    def __contains__(self, anchor: str) -> bool:
        return anchor in self._blob or any(anchor in taken for taken in self._recent)
