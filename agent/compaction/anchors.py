"""The anchor index: identifiers pulled out of the compacted turns verbatim, by regex, never paraphrased.

An anchor is a literal substring of some compacted message that someone may need
later exactly as written: PR/issue numbers and ticket keys, commit SHAs and UUIDs,
file paths, error lines, people and handles, URLs, version numbers, numbers with units,
code identifiers.

Speed matters because compaction may see half a million tokens at once: each pattern
starts with a literal or a rare character class so the regex engine can skip ahead,
candidates are widened and checked in Python, and results are memoized per message
text (:mod:`agent.compaction.memo`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

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


def scan(text: str, conversation: bool) -> tuple[Anchor, ...]:
    """Every anchor in ``text``, in order of appearance.

    ``conversation`` is true for what a person or the assistant wrote: numbers with units
    and code constants are only taken from there, because in tool output (logs, listings)
    they are mostly noise that would crowd the index.
    """
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
    return tuple((kind, anchor) for _, kind, anchor in found)


_MEMO: TextMemo[tuple[Anchor, ...]] = TextMemo(scan)  # type: ignore[arg-type]


def anchors_in(text: str, conversation: bool = True) -> tuple[Anchor, ...]:
    """Memoized :func:`scan`."""
    if not text:
        return ()
    return _MEMO(text, conversation)


def clear_memo() -> None:
    _MEMO.clear()
    _WEIGHTED.clear()


def _weighted(anchors: Sequence[Anchor], conversation: bool) -> tuple[tuple[str, str, int], ...]:
    """``(kind, anchor, weight)`` per distinct anchor of one message (see :class:`AnchorIndex`)."""
    if not anchors:
        return ()
    per_kind = Counter(kind for kind, _ in anchors)
    base = MENTION_WEIGHT * (CONVERSATION_FACTOR if conversation else 1)
    weights: dict[Anchor, int] = {}
    for kind, anchor in anchors:
        weights[(kind, anchor)] = weights.get((kind, anchor), 0) + max(1, base // per_kind[kind])
    return tuple((kind, anchor, weight) for (kind, anchor), weight in weights.items())


_WEIGHTED: TextMemo[tuple[tuple[str, str, int], ...]] = TextMemo(
    lambda text, conversation: _weighted(anchors_in(text, bool(conversation)), bool(conversation))
)


@dataclass
class AnchorIndex:
    """Distinct anchors per kind, scored by how often and where they were mentioned, and how recently.

    ``entries[kind][anchor] = [score, last_seq]``. Each mention adds a weight: a mention in
    what a person or the assistant wrote counts three times one in tool output, and a
    mention among many of its kind in one message (one SHA of a hundred in a git log)
    counts for its share only — so an identifier that stands out ranks above a listing.
    ``last_seq`` grows with message position across compactions, so recency survives merges.
    """

    entries: dict[str, dict[str, list[int]]] = field(default_factory=lambda: {kind: {} for kind in KINDS})

    def add(self, kind: str, anchor: str, seq: int, weight: int = MENTION_WEIGHT) -> None:
        bucket = self.entries.setdefault(kind, {})
        entry = bucket.get(anchor)
        if entry is None:
            bucket[anchor] = [weight, seq]
        else:
            entry[0] += weight
            if seq > entry[1]:
                entry[1] = seq

    def add_all(self, anchors: Sequence[Anchor], seq: int, conversation: bool = False) -> None:
        """Add one message's anchors, weighting each by its role and how crowded its kind is there."""
        self._add_weighted(_weighted(anchors, conversation), seq)

    def add_text(self, text: str, seq: int, conversation: bool = False) -> None:
        """:meth:`add_all` for the anchors of ``text`` (their weights memoized per text)."""
        if text:
            self._add_weighted(_WEIGHTED(text, conversation), seq)

    def _add_weighted(self, weighted: Sequence[tuple[str, str, int]], seq: int) -> None:
        entries = self.entries
        for kind, anchor, weight in weighted:
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

    def merge(self, older: "AnchorIndex") -> None:
        """Fold an earlier compaction's index into this one (mentions add up, recency is kept)."""
        for kind, bucket in older.entries.items():
            for anchor, (mentions, seq) in bucket.items():
                entry = self.entries.setdefault(kind, {}).get(anchor)
                if entry is None:
                    self.entries[kind][anchor] = [mentions, seq]
                else:
                    entry[0] += mentions
                    entry[1] = max(entry[1], seq)

    def ranked(self, kind: str) -> list[str]:
        """Anchors of one kind, highest score first, then most recent."""
        bucket = self.entries.get(kind, {})
        return sorted(bucket, key=lambda anchor: (bucket[anchor][0], bucket[anchor][1]), reverse=True)

    def __len__(self) -> int:
        return sum(len(bucket) for bucket in self.entries.values())

    def trimmed(self, per_kind: int) -> "AnchorIndex":
        """The ``per_kind`` best anchors of each kind (bounds what is persisted)."""
        kept = AnchorIndex()
        for kind in self.entries:
            bucket = self.entries[kind]
            kept.entries[kind] = {anchor: list(bucket[anchor]) for anchor in self.ranked(kind)[:per_kind]}
        return kept

    def to_state(self) -> dict[str, list[list[Any]]]:
        return {kind: [[anchor, *entry] for anchor, entry in bucket.items()] for kind, bucket in self.entries.items() if bucket}

    @classmethod
    def from_state(cls, state: Mapping[str, Sequence[Sequence[Any]]] | None) -> "AnchorIndex":
        index = cls()
        for kind, rows in (state or {}).items():
            for row in rows:
                if len(row) == 3 and isinstance(row[0], str):
                    index.entries.setdefault(kind, {})[row[0]] = [int(row[1]), int(row[2])]
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
    """
    queues = {kind: index.ranked(kind) for kind in KINDS if index.entries.get(kind)}
    positions = dict.fromkeys(queues, 0)
    misfits = dict.fromkeys(queues, 0)
    chosen: dict[str, list[str]] = {kind: [] for kind in queues}
    taken = _Taken()
    used = 0

    def take_next(kind: str) -> bool:
        """Take the kind's next anchor that fits; False when the kind has nothing more to give."""
        nonlocal used
        queue = queues[kind]
        while positions[kind] < len(queue) and misfits[kind] < 8:
            anchor = queue[positions[kind]]
            positions[kind] += 1
            if skip(anchor) or anchor in taken:
                continue
            cost = count_line(anchor) + 1 + (_KIND_HEADER_TOKENS if not chosen[kind] else 0)
            if used + cost > budget_tokens:
                misfits[kind] += 1
                continue
            chosen[kind].append(anchor)
            taken.add(anchor)
            used += cost
            return True
        return False

    active = [kind for kind in KINDS if kind in queues]
    while active and used < budget_tokens:
        active = [kind for kind in active if all(take_next(kind) for _ in range(ROUND_SHARES.get(kind, 1)))]
    lines = []
    for kind in KINDS:
        anchors = chosen.get(kind)
        if not anchors:
            continue
        if kind == "error":
            lines.append(f"- {LABELS[kind]}:")
            lines.extend(f"  - {anchor}" for anchor in anchors)
        else:
            lines.append(f"- {LABELS[kind]}: " + ", ".join(anchors))
    return "\n".join(lines), used


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
