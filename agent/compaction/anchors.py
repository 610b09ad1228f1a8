"""Anchors: identifiers pulled out of the compacted turns verbatim, by regex, never paraphrased.

An anchor is a literal substring of some compacted message that someone may need
later exactly as written: PR/issue numbers and ticket keys, commit SHAs and UUIDs,
file paths, error lines, people and handles, URLs, version numbers, numbers with units,
code identifiers.

Each anchor keeps where it was best seen (:mod:`agent.compaction.anchor_context`: a few words
of its own line and clause, or, for an error line, its producer — last traceback frame or
location, the log record its traceback came under — and the tool call whose output held it),
and the index (:mod:`agent.compaction.anchor_index`) shows it beside the anchor.

The extractors, one per kind, are in :mod:`agent.compaction.anchor_extractors`. Compaction may see half a
million tokens at once, so what they find (contexts included) is memoized per message text
(:mod:`agent.compaction.memo`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from agent.compaction.anchor_context import context_words, producer
from agent.compaction.anchor_extractors import positioned
from agent.compaction.memo import TextMemo

#: Anchor kinds in the order the index lists them.
KINDS = ("ref", "commit", "path", "error", "name", "url", "version", "quantity", "identifier")
#: How many anchors of each kind one round of the index takes: the identifiers people quote back
#: (SHAs, paths, PRs, error lines) before the ones that are mostly noise in tool output. Error lines
#: most of all: one with what produced it answers "what did the export crash with?" on its own, where a
#: SHA or a path from a listing needs the line it stood on.
ROUND_SHARES = {
    "ref": 2,
    "commit": 3,
    "path": 3,
    "error": 4,
    "name": 2,
    "url": 1,
    "version": 1,
    "quantity": 1,
    "identifier": 1,
}
LABELS = {
    "name": "People and handles",
    "ref": "PRs, issues, tickets",
    "commit": "Commits and ids",
    "path": "Files and paths",
    "error": "Errors",
    "url": "URLs",
    "version": "Versions",
    "quantity": "Numbers",
    "identifier": "Identifiers",
}

Anchor = tuple[str, str]  # (kind, text)

#: Score one lone mention adds (see :class:`agent.compaction.anchor_index.AnchorIndex`).
MENTION_WEIGHT = 1000
#: How much more a mention in conversation counts than one in tool output.
CONVERSATION_FACTOR = 3


def scan(text: str, conversation: bool) -> tuple[Anchor, ...]:
    """Every anchor in ``text``, in order of appearance.

    ``conversation`` is true for what a person or the assistant wrote: numbers with units
    and code constants are only taken from there, because in tool output (logs, listings)
    they are mostly noise that would crowd the index.
    """
    return tuple((kind, anchor) for _, kind, anchor in positioned(text, conversation))


# The memo passes any hashable option; this one is only ever given ``conversation`` (a bool).
_MEMO: TextMemo[tuple[Anchor, ...]] = TextMemo(scan)  # type: ignore[arg-type]


def anchors_in(text: str, conversation: bool = True) -> tuple[Anchor, ...]:
    """Memoized :func:`scan`."""
    if not text:
        return ()
    return _MEMO(text, conversation)


def clear_memo() -> None:
    _MEMO.clear()
    _WEIGHED.clear()


def _anchor_end(text: str, start: int, anchor: str) -> tuple[int, int]:
    """Where ``anchor`` (found at or just after ``start``) begins and ends in ``text``."""
    begin = text.find(anchor, start, start + len(anchor) + 8)
    begin = start if begin < 0 else begin
    return begin, begin + len(anchor)


def _contexts(text: str, found: Sequence[tuple[int, str, str]]) -> dict[Anchor, str]:
    """The context of each distinct anchor's first mention in ``text``: its producer for an error line, else its
    words."""
    contexts: dict[Anchor, str] = {}
    for start, kind, anchor in found:
        key = (kind, anchor)
        if key in contexts:
            continue
        if kind == "error":
            contexts[key] = producer(text, start, anchor)
        else:
            contexts[key] = context_words(text, *_anchor_end(text, start, anchor))
    return contexts


def weigh(
    anchors: Sequence[Anchor], conversation: bool, contexts: Mapping[Anchor, str] | None = None
) -> tuple[tuple[str, str, int, str], ...]:
    """``(kind, anchor, weight, context)`` per distinct anchor of one message (see
    :class:`agent.compaction.anchor_index.AnchorIndex`)."""
    if not anchors:
        return ()
    per_kind = Counter(kind for kind, _ in anchors)
    base = MENTION_WEIGHT * (CONVERSATION_FACTOR if conversation else 1)
    weights: dict[Anchor, int] = {}
    for kind, anchor in anchors:
        weights[(kind, anchor)] = weights.get((kind, anchor), 0) + max(1, base // per_kind[kind])
    contexts = contexts or {}
    return tuple((kind, anchor, weight, contexts.get((kind, anchor), "")) for (kind, anchor), weight in weights.items())


def _weigh_text(text: str, conversation: bool) -> tuple[tuple[str, str, int, str], ...]:
    """:func:`weigh` for the anchors of ``text``, with the context of each one's first mention."""
    found = positioned(text, conversation)
    return weigh([(kind, anchor) for _, kind, anchor in found], conversation, _contexts(text, found))


_WEIGHED: TextMemo[tuple[tuple[str, str, int, str], ...]] = TextMemo(
    lambda text, conversation: _weigh_text(text, bool(conversation))
)


def weighed_text(text: str, conversation: bool) -> tuple[tuple[str, str, int, str], ...]:
    """Memoized :func:`weigh` of the anchors of ``text``, each with the context of its first mention."""
    return _WEIGHED(text, conversation)
