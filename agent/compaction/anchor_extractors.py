"""The anchor extractors: one function per kind of identifier, each finding its candidates by regex and checking them.

:mod:`agent.compaction.anchors` turns what they find into the anchors it memoizes and weighs;
what counts as a path, a commit, a version or a person is decided here.

Speed matters because compaction may see half a million tokens at once: each pattern
starts with a literal or a rare character class so the regex engine can skip ahead,
candidates are widened and checked in Python, and :func:`positioned` skips the extractors
whose anchors need a character the text lacks.
"""

from __future__ import annotations

import re

from agent.compaction.error_lines import find_error_lines
from agent.compaction.everyday import ADDRESS_WORDS, ORDINARY_CAPITALS

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
#: Nor are the greetings, farewells and interjections of everyday talk ("Wow Maya", "Bye Maya", "Thanks Tom").
_NOT_NAMES |= ORDINARY_CAPITALS

_HAS_LETTER = re.compile(r"[A-Za-z]")
_HAS_DIGIT = re.compile(r"\d")
_WORDISH = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_PATH_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.~@+-")
_FILE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_DIGITS = frozenset("0123456789")
_HEX_LETTERS = frozenset("abcdef")
_NOT_TICKETS = frozenset({"UTF", "SHA", "ISO", "HTTP", "TLS", "SSL", "MD", "X"})


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
    """Dotted numbers as versions (``1.2.3-rc1``, ``v2.0``) or, with four parts of at most 255, as IPv4 addresses
    with their port; a dotted number inside a word or a longer dotted run is neither."""
    taken = -1
    for match in _DOTTED_NUMBER.finditer(text):
        if match.start() < taken:
            continue
        digits = _expand_left(text, match.start(), _DIGITS)
        if digits == match.start():
            continue
        end = taken = _dotted_end(text, match.end())
        start = _version_start(text, digits)
        if start is not None:
            out.append(_dotted_anchor(text, start, end))
    for match in _V_VERSION.finditer(text):
        if match.group().count(".") == 1 and not _word_before(text, match.start()):
            out.append((match.start(), "version", match.group()))


def _dotted_end(text: str, end: int) -> int:
    """Where the dotted number going on at ``end`` stops: past its digits and each dot a digit follows."""
    while end < len(text) and (
        text[end] in _DIGITS or (text[end] == "." and end + 1 < len(text) and text[end + 1] in _DIGITS)
    ):
        end += 1
    return end


def _version_start(text: str, start: int) -> int | None:
    """Where the dotted number whose digits begin at ``start`` begins, with its ``v``; None when it goes on a
    word or a dotted run before it (``x1.2``, ``.1.2.3``)."""
    if not start:
        return start
    before = text[start - 1]
    if before in "vV":
        start -= 1
        return None if start and text[start - 1] in _WORDISH else start
    return None if before in _WORDISH or before == "." else start


def _dotted_anchor(text: str, start: int, end: int) -> tuple[int, str, str]:
    """The dotted number ``text[start:end]`` as an anchor: an IPv4 address with its port, or a version with its
    suffix."""
    parts = text[start:end].lstrip("vV").split(".")
    if len(parts) == 4 and all(len(part) <= 3 and int(part) <= 255 for part in parts):
        port = _PORT.match(text, end)
        return start, "identifier", text[start : port.end() if port else end]
    suffix = _VERSION_SUFFIX.match(text, end)
    if suffix and suffix.end() > end:
        end = suffix.end()
    return start, "version", text[start:end].rstrip(".-")


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
    """Full names; a greeting before one ("Thanks Tom Baker", "Wow Maya") is not part of it."""
    for match in _PERSON.finditer(text):
        words, start = match.group().split(), match.start()
        if _word_before(text, start):
            continue
        while len(words) > 2 and words[0] in ADDRESS_WORDS:
            start += len(words.pop(0)) + 1
        if words[0] in _NOT_NAMES or any(w in _NOT_NAMES for w in words[1:]):
            continue
        out.append((start, "name", " ".join(words)))


def positioned(text: str, conversation: bool) -> list[tuple[int, str, str]]:
    """``(position, kind, anchor)`` of every anchor in ``text``, in order of appearance (see
    :func:`agent.compaction.anchors.scan`)."""
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
