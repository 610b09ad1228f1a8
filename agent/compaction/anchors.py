"""Anchors: identifiers pulled out of the compacted turns verbatim, by regex, never paraphrased.

An anchor is a literal substring of some compacted message that someone may need
later exactly as written: PR/issue numbers and ticket keys, commit SHAs and UUIDs,
file paths, error lines, people and handles, URLs, version numbers, numbers with units,
code identifiers.

Each anchor keeps where it was best seen (:mod:`agent.compaction.anchor_context`: a few words
of its own line and clause, or, for an error line, its producer — last traceback frame or
location, the log record its traceback came under — and the tool call whose output held it),
and the index (:mod:`agent.compaction.anchor_index`) shows it beside the anchor.

Speed matters because compaction may see half a million tokens at once: each pattern
starts with a literal or a rare character class so the regex engine can skip ahead,
candidates are widened and checked in Python, and results (contexts included) are memoized
per message text (:mod:`agent.compaction.memo`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence

from agent.compaction.anchor_context import context_words, producer
from agent.compaction.error_lines import find_error_lines
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

#: Longest anchor kept (an error line is cut around its keyword, everything else is skipped).
MAX_ANCHOR_CHARS = 240

_URL = re.compile(r"https?://[^\s<>\"'`)\]}]+")
_HASH_REF = re.compile(r"#\d{1,6}\b")
_REF_PREFIX = re.compile(r"(?:PR|MR|[Pp]ull [Rr]equest|[Ii]ssue|[Tt]icket|[Bb]ug) ?$")
_WORD_REF = re.compile(r"(?:PR|MR)[ -]?\d+\b")
#: Starts only where a word starts: inside a run of capitals every later start would rescan the run.
_UPPER_ID = re.compile(r"(?<![A-Za-z0-9_])[A-Z][A-Z0-9]*+(?:_[A-Z0-9_]+|-\d+(?:-\d+)*)")
_SHA = re.compile(r"[0-9a-f]{7,40}")
_UUID_TAIL = re.compile(r"-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_PATH = re.compile(r"/[\w.@+-]+(?:/[\w.@+-]*)*")
_FILE = re.compile(
    r"\.(?:py|pyi|js|mjs|cjs|ts|tsx|jsx|go|rs|java|kt|rb|php|c|h|cc|cpp|hpp|cs|swift|sh|bash|zsh|ps1"
    r"|md|rst|txt|json|jsonl|ya?ml|toml|ini|cfg|conf|env|lock|sql|html|css|scss|vue|svelte|proto|tf"
    r"|gradle|xml|csv|log|ipynb)\b"
)
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
    [
        "The",
        "This",
        "That",
        "These",
        "Those",
        "There",
        "Then",
        "When",
        "Where",
        "What",
        "Which",
        "Who",
        "Why",
        "How",
        "Let",
        "Please",
        "Also",
        "And",
        "But",
        "So",
        "If",
        "It",
        "Its",
        "We",
        "You",
        "They",
        "He",
        "She",
        "I",
        "My",
        "Our",
        "Your",
        "Their",
        "Checking",
        "Looking",
        "Running",
        "Done",
        "Sure",
        "Yes",
        "No",
        "Ok",
        "Okay",
        "Good",
        "Great",
        "Thanks",
        "Thank",
        "Hello",
        "Hi",
        "Hey",
        "Morning",
        "Evening",
        "Tonight",
        "Today",
        "Tomorrow",
        "Yesterday",
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
        "Agreed",
        "Decision",
        "Note",
        "Heads",
        "Fyi",
        "Update",
        "Committed",
        "Patched",
        "Tests",
        "Found",
        "See",
    ]
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

#: Score one lone mention adds (see :class:`agent.compaction.anchor_index.AnchorIndex`).
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


#: A log field holding a namespaced key (``key=user:``), whose id half is bookkeeping, not a commit.
_KEYED_ID = re.compile(r"=[A-Za-z_][\w.-]{0,40}:$")


def _is_keyed_id(text: str, start: int) -> bool:
    """Whether the hex at ``start`` is the id half of a ``key=user:f2a1d9bd3404`` field (an image's ``name:tag``
    is not)."""
    return start > 0 and text[start - 1] == ":" and _KEYED_ID.search(text, max(0, start - 44), start) is not None


def _shas(text: str, out: list[tuple[int, str, str]]) -> None:
    taken = -1
    for match in _SHA.finditer(text):
        start, end = match.span()
        if start < taken or _word_before(text, start) or _is_keyed_id(text, start):
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
    for line_start, line in find_error_lines(text, MAX_ANCHOR_CHARS):
        out.append((line_start, "error", line))


def _versions(text: str, out: list[tuple[int, str, str]]) -> None:
    taken = -1
    for match in _DOTTED_NUMBER.finditer(text):
        if match.start() < taken:
            continue
        start = _expand_left(text, match.start(), _DIGITS)
        if start == match.start():
            continue
        end = match.end()
        while end < len(text) and (
            text[end] in _DIGITS or (text[end] == "." and end + 1 < len(text) and text[end + 1] in _DIGITS)
        ):
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
    found = _positioned(text, conversation)
    return weigh([(kind, anchor) for _, kind, anchor in found], conversation, _contexts(text, found))


_WEIGHED: TextMemo[tuple[tuple[str, str, int, str], ...]] = TextMemo(
    lambda text, conversation: _weigh_text(text, bool(conversation))
)


def weighed_text(text: str, conversation: bool) -> tuple[tuple[str, str, int, str], ...]:
    """Memoized :func:`weigh` of the anchors of ``text``, each with the context of its first mention."""
    return _WEIGHED(text, conversation)
