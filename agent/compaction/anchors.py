"""The anchor index: identifiers pulled out of the compacted turns verbatim, by regex, never paraphrased.

An anchor is a literal substring of some compacted message that someone may need
later exactly as written: PR/issue numbers and ticket keys, commit SHAs and UUIDs,
file paths, error lines, people and handles, URLs, version numbers, numbers with units,
code identifiers.

Each anchor keeps where it was best seen (:mod:`agent.compaction.anchor_context`: a few words
of its own line and clause, or, for an error line, its producer — last traceback frame or
location, the log record its traceback came under — and the tool call whose output held it),
and the index shows it beside the anchor.

Speed matters because compaction may see half a million tokens at once: each pattern
starts with a literal or a rare character class so the regex engine can skip ahead,
candidates are widened and checked in Python, and results (contexts included) are memoized
per message text (:mod:`agent.compaction.memo`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.compaction.anchor_context import RECORD_LABEL, context_words, producer
from agent.compaction.fitting import count_line
from agent.compaction.memo import TextMemo

#: Anchor kinds in the order the index lists them.
KINDS = ("ref", "commit", "path", "error", "name", "url", "version", "quantity", "identifier")
#: How many anchors of each kind one round of the index takes: the identifiers people quote back
#: (SHAs, paths, PRs, error lines) before the ones that are mostly noise in tool output.
ROUND_SHARES = {"ref": 2, "commit": 3, "path": 3, "error": 2, "name": 2, "url": 1, "version": 1, "quantity": 1, "identifier": 1}
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

#: Longest anchor kept (an error line is cut around its keyword, everything else is skipped).
MAX_ANCHOR_CHARS = 240

_URL = re.compile(r"https?://[^\s<>\"'`)\]}]+")
_HASH_REF = re.compile(r"#\d{1,6}\b")
_REF_PREFIX = re.compile(r"(?:PR|MR|[Pp]ull [Rr]equest|[Ii]ssue|[Tt]icket|[Bb]ug) ?$")
_WORD_REF = re.compile(r"(?:PR|MR)[ -]?\d+\b")
_UPPER_ID = re.compile(r"[A-Z][A-Z0-9]*+(?:_[A-Z0-9_]+|-\d+(?:-\d+)*)")
_SHA = re.compile(r"[0-9a-f]{7,40}")
_UUID_TAIL = re.compile(r"-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_PATH = re.compile(r"/[\w.@+-]+(?:/[\w.@+-]*)*")
_FILE = re.compile(
    r"\.(?:py|pyi|js|mjs|cjs|ts|tsx|jsx|go|rs|java|kt|rb|php|c|h|cc|cpp|hpp|cs|swift|sh|bash|zsh|ps1"
    r"|md|rst|txt|json|jsonl|ya?ml|toml|ini|cfg|conf|env|lock|sql|html|css|scss|vue|svelte|proto|tf"
    r"|gradle|xml|csv|log|ipynb)\b"
)
_ERROR = re.compile(
    r"Error|Exception|Traceback|FAILED|FATAL|fatal:|panic:|error:|error\[|ERR!|Errno|exit code|exit status"
    r"|Segmentation fault"
)
_ERROR_KEYWORD = re.compile(r"(?:Error|Exception|FAILED|FATAL|fatal|panic|error|ERR|Errno|exit code|exit status|fault)(?:[:!\]\s]|$)")
_CODE_LINE = re.compile(r"\s*(?:raise |except\b|catch\b|throw |class |def |import |from |#|//|\*|if |elif |return |assert |with )")
_LINE_NUMBER = re.compile(r"^\s*\d+(?:\t|: |\| )")
_DOTTED_NUMBER = re.compile(r"\.\d+\.\d+")
_V_VERSION = re.compile(r"v\d+\.\d+(?:\.\d+)*")
_VERSION_SUFFIX = re.compile(r"(?:-(?:rc|alpha|beta|dev|post|pre)?\.?\d*[0-9A-Za-z.]*|\+[0-9A-Za-z.]+|(?:a|b|rc)\d+)?")
_PORT = re.compile(r":\d{2,5}\b")
_QUANTITY = re.compile(
    r"\d++(?:[.,]\d++)*+ ?+(?:ms|s|sec|secs|seconds|min|mins|minutes|h|hr|hrs|hours|days|weeks|months|years"
    r"|B|KB|MB|GB|TB|KiB|MiB|GiB|k|K|M|%|tokens|rps|qps|USD|EUR|JPY|dollars|yen|req/s|°C|x)(?![\w/])"
)
_MONEY = re.compile(r"[$€£¥]\d[\d,]*(?:\.\d+)?[kKmMbB]?")
_BACKTICK = re.compile(r"`([^`\n]{2,80})`")
_HANDLE = re.compile(r"@[A-Za-z0-9][\w.-]*[A-Za-z0-9]")
_EMAIL_LOCAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.+-")
_PERSON = re.compile(r"[A-Z][a-z]+ [A-Z][a-z]+(?: [A-Z][a-z]+)?")
#: Capitalised words that start sentences, not names ("The Loyalty ...", "Let Me ...").
_NOT_NAMES = frozenset(
    "The This That These Those There Then When Where What Which Who Why How Let Please Also And But So If "
    "It Its We You They He She I My Our Your Their Checking Looking Running Done Sure Yes No Ok Okay Good "
    "Great Thanks Thank Hello Hi Hey Morning Evening Tonight Today Tomorrow Yesterday Monday Tuesday "
    "Wednesday Thursday Friday Saturday Sunday January February March April May June July August September "
    "October November December Agreed Decision Note Heads Fyi Update Committed Patched Tests Found See".split()
)

_HAS_LETTER = re.compile(r"[A-Za-z]")
_HAS_DIGIT = re.compile(r"\d")
_WORDISH = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_PATH_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.~@+-")
_FILE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_DIGITS = frozenset("0123456789")
_HEX_LETTERS = frozenset("abcdef")
_NOT_TICKETS = frozenset({"UTF", "SHA", "ISO", "HTTP", "TLS", "SSL", "MD", "X"})

Anchor = tuple[str, str]  # (kind, text)

#: Score one lone mention adds (see :class:`AnchorIndex`).
MENTION_WEIGHT = 1000
#: How much more a mention in conversation counts than one in tool output.
CONVERSATION_FACTOR = 3


def _word_before(text: str, index: int) -> bool:
    return index > 0 and text[index - 1] in _WORDISH


def _expand_left(text: str, index: int, allowed: frozenset[str]) -> int:
    while index > 0 and text[index - 1] in allowed:
        index -= 1
    return index


def _urls(text: str, out: list[tuple[int, str, str]]) -> None:
    for match in _URL.finditer(text):
        url = match.group().rstrip(".,;:!?'\")")
        if len(url) > 10 and len(url) <= MAX_ANCHOR_CHARS:
            out.append((match.start(), "url", url))


def _refs(text: str, out: list[tuple[int, str, str]]) -> None:
    for match in _HASH_REF.finditer(text):
        start = match.start()
        if start and text[start - 1] in "&#" or _word_before(text, start):
            continue
        prefix = _REF_PREFIX.search(text, max(0, start - 14), start)
        if prefix:
            start = prefix.start()
        out.append((start, "ref", text[start : match.end()]))
    for match in _WORD_REF.finditer(text):
        if not _word_before(text, match.start()):
            out.append((match.start(), "ref", match.group()))


def _upper_ids(text: str, out: list[tuple[int, str, str]], conversation: bool) -> None:
    for match in _UPPER_ID.finditer(text):
        token = match.group()
        if _word_before(text, match.start()):
            continue
        if "_" in token:
            if conversation and len(token) >= 4:
                out.append((match.start(), "identifier", token))
        elif token.split("-", 1)[0] not in _NOT_TICKETS and len(token.split("-", 1)[0]) >= 2:
            out.append((match.start(), "ref", token))


def _shas(text: str, out: list[tuple[int, str, str]]) -> None:
    taken = -1
    for match in _SHA.finditer(text):
        start, end = match.span()
        if start < taken or _word_before(text, start):
            continue
        if end - start == 8 and text.startswith("-", end):
            tail = _UUID_TAIL.match(text, end)
            if tail and not (tail.end() < len(text) and text[tail.end()] in _WORDISH):
                out.append((start, "commit", text[start : tail.end()]))
                taken = tail.end()
                continue
        if end < len(text) and text[end] in _WORDISH:
            continue
        token = match.group()
        if not _DIGITS.isdisjoint(token) and not _HEX_LETTERS.isdisjoint(token):
            out.append((start, "commit", token))


def _looks_like_path(candidate: str) -> bool:
    if not _HAS_LETTER.search(candidate):
        return False
    slashes = candidate.count("/")
    last = candidate[candidate.rfind("/") + 1 :]
    if candidate[0] in "/~." and candidate.startswith(("/", "~/", "./", "../")):
        return len(candidate) > 2 and (slashes >= 2 or "." in last or len(last) > 2)
    if slashes >= 2 or ("." in last and not last.endswith(".")):
        return True
    return "_" in candidate or "-" in candidate or "." in candidate or bool(_HAS_DIGIT.search(candidate))


def _paths(text: str, out: list[tuple[int, str, str]]) -> None:
    for match in _PATH.finditer(text):
        start = _expand_left(text, match.start(), _PATH_CHARS)
        if start and text[start - 1] in "/:":
            continue
        candidate = text[start : match.end()].rstrip(".,:;")
        if len(candidate) <= MAX_ANCHOR_CHARS and _looks_like_path(candidate):
            out.append((start, "path", candidate))
    for match in _FILE.finditer(text):
        start = _expand_left(text, match.start(), _FILE_CHARS)
        if start == match.start() or (start and text[start - 1] in "/\\"):
            continue
        candidate = text[start : match.end()].lstrip(".-")
        if candidate and any(char.isalpha() for char in candidate[: -(match.end() - match.start())] or "x"):
            out.append((start, "path", candidate))


def _errors(text: str, out: list[tuple[int, str, str]]) -> None:
    seen_line = -1
    for match in _ERROR.finditer(text):
        line_start = text.rfind("\n", 0, match.start()) + 1
        if line_start == seen_line:
            continue
        seen_line = line_start
        line_end = text.find("\n", match.start())
        if line_end < 0:
            line_end = len(text)
        line = text[line_start:line_end]
        stripped = line.strip()
        code = _LINE_NUMBER.sub("", line.lstrip("+-"), count=1)  # a diff's or a numbered listing's code is still code
        if not stripped or stripped.startswith("Traceback (most recent call last)") or _CODE_LINE.match(code):
            continue
        if not _ERROR_KEYWORD.search(stripped):
            continue
        if len(stripped) > MAX_ANCHOR_CHARS:
            offset = match.start() - line_start - (len(line) - len(line.lstrip()))
            begin = max(0, offset - 80)
            stripped = stripped[begin : begin + MAX_ANCHOR_CHARS].strip()
        out.append((line_start, "error", stripped))


def _versions(text: str, out: list[tuple[int, str, str]]) -> None:
    taken = -1
    for match in _DOTTED_NUMBER.finditer(text):
        if match.start() < taken:
            continue
        start = _expand_left(text, match.start(), _DIGITS)
        if start == match.start():
            continue
        end = match.end()
        while end < len(text) and (text[end] in _DIGITS or (text[end] == "." and end + 1 < len(text) and text[end + 1] in _DIGITS)):
            end += 1
        taken = end
        if start and (text[start - 1] in _WORDISH or text[start - 1] == ".") and text[start - 1] not in "vV":
            continue
        if start and text[start - 1] in "vV":
            start -= 1
            if start and text[start - 1] in _WORDISH:
                continue
        parts = text[start:end].lstrip("vV").split(".")
        if len(parts) == 4 and all(len(part) <= 3 and int(part) <= 255 for part in parts):
            port = _PORT.match(text, end)
            out.append((start, "identifier", text[start : port.end() if port else end]))
            continue
        suffix = _VERSION_SUFFIX.match(text, end)
        if suffix and suffix.end() > end:
            end = suffix.end()
        out.append((start, "version", text[start:end].rstrip(".-")))
    for match in _V_VERSION.finditer(text):
        if match.group().count(".") == 1 and not _word_before(text, match.start()):
            out.append((match.start(), "version", match.group()))


def _quantities(text: str, out: list[tuple[int, str, str]]) -> None:
    for match in _QUANTITY.finditer(text):
        if not _word_before(text, match.start()) and (match.start() == 0 or text[match.start() - 1] not in ".,"):
            out.append((match.start(), "quantity", match.group()))


def _money(text: str, out: list[tuple[int, str, str]]) -> None:
    for match in _MONEY.finditer(text):
        out.append((match.start(), "quantity", match.group()))


def _backticks(text: str, out: list[tuple[int, str, str]]) -> None:
    for match in _BACKTICK.finditer(text):
        span = match.group(1).strip()
        if len(span) >= 2:
            out.append((match.start(), "identifier", span))


def _handles(text: str, out: list[tuple[int, str, str]]) -> None:
    """``@handles``, and e-mail addresses as a whole (the part before ``@`` is not a handle)."""
    for match in _HANDLE.finditer(text):
        start = match.start()
        if start and text[start - 1] in _EMAIL_LOCAL:
            local = _expand_left(text, start, _EMAIL_LOCAL)
            if "." in match.group():
                out.append((local, "name", text[local : match.end()]))
            continue
        out.append((start, "name", match.group()))


def _people(text: str, out: list[tuple[int, str, str]]) -> None:
    for match in _PERSON.finditer(text):
        words = match.group().split()
        if words[0] in _NOT_NAMES or _word_before(text, match.start()) or any(w in _NOT_NAMES for w in words[1:]):
            continue
        out.append((match.start(), "name", match.group()))


def _positioned(text: str, conversation: bool) -> list[tuple[int, str, str]]:
    """``(position, kind, anchor)`` of every anchor in ``text``, in order of appearance (see :func:`scan`)."""
    found: list[tuple[int, str, str]] = []
    if "http" in text:
        _urls(text, found)
    if "#" in text or "PR" in text or "MR" in text:
        _refs(text, found)
    _upper_ids(text, found, conversation)
    _shas(text, found)
    if "/" in text or "." in text:
        _paths(text, found)
    _errors(text, found)
    if "." in text:
        _versions(text, found)
    if "@" in text:
        _handles(text, found)
    if "$" in text or "€" in text or "£" in text or "¥" in text:
        _money(text, found)
    if conversation:
        _quantities(text, found)
        _people(text, found)
        if "`" in text:
            _backticks(text, found)
    found.sort(key=lambda item: item[0])
    return found


def scan(text: str, conversation: bool) -> tuple[Anchor, ...]:
    """Every anchor in ``text``, in order of appearance.

    ``conversation`` is true for what a person or the assistant wrote: numbers with units
    and code constants are only taken from there, because in tool output (logs, listings)
    they are mostly noise that would crowd the index.
    """
    return tuple((kind, anchor) for _, kind, anchor in _positioned(text, conversation))


_MEMO: TextMemo[tuple[Anchor, ...]] = TextMemo(scan)  # type: ignore[arg-type]


def anchors_in(text: str, conversation: bool = True) -> tuple[Anchor, ...]:
    """Memoized :func:`scan`."""
    if not text:
        return ()
    return _MEMO(text, conversation)


def clear_memo() -> None:
    _MEMO.clear()
    _WEIGHTED.clear()


def _anchor_end(text: str, start: int, anchor: str) -> tuple[int, int]:
    """Where ``anchor`` (found at or just after ``start``) begins and ends in ``text``."""
    begin = text.find(anchor, start, start + len(anchor) + 8)
    begin = start if begin < 0 else begin
    return begin, begin + len(anchor)


def _contexts(text: str, found: Sequence[tuple[int, str, str]]) -> dict[Anchor, str]:
    """The context of each distinct anchor's first mention in ``text``: its producer for an error line, else its words."""
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


def _weighted(
    anchors: Sequence[Anchor], conversation: bool, contexts: Mapping[Anchor, str] | None = None
) -> tuple[tuple[str, str, int, str], ...]:
    """``(kind, anchor, weight, context)`` per distinct anchor of one message (see :class:`AnchorIndex`)."""
    if not anchors:
        return ()
    per_kind = Counter(kind for kind, _ in anchors)
    base = MENTION_WEIGHT * (CONVERSATION_FACTOR if conversation else 1)
    weights: dict[Anchor, int] = {}
    for kind, anchor in anchors:
        weights[(kind, anchor)] = weights.get((kind, anchor), 0) + max(1, base // per_kind[kind])
    contexts = contexts or {}
    return tuple((kind, anchor, weight, contexts.get((kind, anchor), "")) for (kind, anchor), weight in weights.items())


def _weighted_text(text: str, conversation: bool) -> tuple[tuple[str, str, int, str], ...]:
    """:func:`_weighted` for the anchors of ``text``, with the context of each one's first mention."""
    found = _positioned(text, conversation)
    return _weighted([(kind, anchor) for _, kind, anchor in found], conversation, _contexts(text, found))


_WEIGHTED: TextMemo[tuple[tuple[str, str, int, str], ...]] = TextMemo(
    lambda text, conversation: _weighted_text(text, bool(conversation))
)

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
        self._add_weighted(_weighted(anchors, conversation), seq)

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
            self._add_weighted(_WEIGHTED(text, conversation), seq, message_id, origin, with_context)

    def _add_weighted(
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

    def merge(self, older: "AnchorIndex") -> None:
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
        """Anchors of one kind, highest score first, then most recent."""
        bucket = self.entries.get(kind, {})
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

    def trimmed(self, per_kind: int) -> "AnchorIndex":
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
    def from_state(cls, state: Mapping[str, Sequence[Sequence[Any]]] | None) -> "AnchorIndex":
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
        fill = _Fill(index, queues, budget_tokens, skip, lambda kind, used, extra: kind == "error" or used < until).run()
    lines = [_kind_lines(kind, fill.chosen[kind]) for kind in KINDS if fill.chosen.get(kind)]
    return "\n".join(lines), fill.used


#: ``describe(kind, tokens used so far, context tokens so far with this entry's)``: whether the entry carries its context.
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

    def run(self) -> "_Fill":
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
