"""Where an anchor was seen: a few words of its own line and clause, or what produced an error line.

An identifier alone answers nothing: ``EDUN-5169`` is useful next to "upstream rejected the
dunning throttling request", an error line next to the frame and the job that raised it.
:func:`context_words` takes the nearest telling words around an anchor; :func:`producer`
finds, for an error line, the last traceback frame or test location above it and the log
record its traceback was printed under. Both look only at a bounded window around the
anchor, so a long output costs no more per anchor than a short one.
"""

from __future__ import annotations

import functools
import re

from agent.compaction.config_sections import section_above

#: Words of an anchor's own line kept as its context: the nearest ones before it, then after it.
CONTEXT_WORDS_BEFORE = 6
CONTEXT_WORDS_AFTER = 3
#: Longest context an entry carries (the index is fitted to a budget: more words, fewer entries).
MAX_CONTEXT_CHARS = 72
#: Longest frame or location an error line carries (``pkg/worker.py:88 in settle``).
MAX_FRAME_CHARS = 80
#: Longest log record an error line carries (the line its traceback was printed under).
MAX_RECORD_CHARS = 40
#: Path segments a frame's file keeps (``/app/src/pkg/mod.py`` → ``pkg/mod.py`` with 2).
FRAME_PATH_SEGMENTS = 2
#: Characters read on either side of an anchor for its context (its line, bounded).
CONTEXT_SCAN_CHARS = 160
#: Characters read back from an error line for the start of its traceback or its pytest failure.
TRACEBACK_LOOKBACK = 4_000
#: Fewest words of its own line that tell enough about an anchor.
MIN_TELLING_WORDS = 2
#: Longest context word; longer tokens are data (hashes, blobs), not words.
MAX_CONTEXT_WORD_CHARS = 40

_CLAUSE_MARKS = frozenset(".!?;")
_DASHES = frozenset({"—", "–", "-", "--"})
_CONTEXT_PUNCTUATION = "`'\"()[]{}<>,:;*#|=!?.…/"
#: A word without a letter (a number, a symbol) or with a date or time in it.
_NOT_TELLING = re.compile(r"[\W\d_]*$|.*?(?:\d{4}-\d\d-\d\d|\d\d:\d\d:\d\d)")
#: Words that fill a context's few places without saying what it is about ("on", "off", "not" do say).
_FILLER = frozenset(
    [
        "the",
        "a",
        "an",
        "to",
        "of",
        "for",
        "at",
        "by",
        "as",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "we",
        "i",
        "you",
        "our",
        "my",
        "your",
        "they",
        "fyi",
        "btw",
        "also",
        "ok",
        "okay",
        "please",
        "so",
        "and",
        "or",
        "then",
        "just",
    ]
)
_LOG_LEVELS = frozenset(["INFO", "DEBUG", "WARN", "WARNING", "ERROR", "ERR", "CRITICAL", "FATAL", "TRACE", "NOTICE"])
_LOG_PREFIX = re.compile(
    r"^\s*\[?(?:\d{4}-\d\d-\d\d[T ][\d:.,]+(?:Z|[+-]\d\d:?\d\d)?)?\]?\s*"
    r"(?:(?:INFO|DEBUG|WARN(?:ING)?|ERROR|CRITICAL|FATAL|TRACE|NOTICE)\b:?\s*)?"
)
_PY_FRAME = re.compile(r'\s*File "([^"]+)", line (\d+), in (\S+)')
_AT_FRAME = re.compile(r"\s+at (?:([\w.$<>\[\]/-]+) \()?([^\s()]+?:\d+)(?::\d+)?\)?\s*$")
_ARROW_LOCATION = re.compile(r"\s*--> ([^\s:]+:\d+)")
_PYTEST_LOCATION = re.compile(r"([^\s:]+\.\w+:\d+): \w")
_PYTEST_HEADER = re.compile(r"_{3,} (\S+) _{3,}")
_TRACEBACK_HEADER = "Traceback (most recent call last)"
#: How a producer names the log record (or sentence) its traceback came under (``under "…"``).
RECORD_LABEL = 'under "'
_HAS_LETTER = re.compile(r"[A-Za-z]")


def _clip_words(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, the cut marked (a context is a hint, not a quote to fetch)."""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


@functools.lru_cache(maxsize=65_536)
def _context_word(token: str) -> str:
    """``token`` stripped of punctuation, or "" when it says nothing (a timestamp, a log level, a number, filler).

    Memoized: the words of logs and listings repeat from line to line.
    """
    word = token.strip(_CONTEXT_PUNCTUATION)
    if not word or len(word) > MAX_CONTEXT_WORD_CHARS or word in _LOG_LEVELS or word.lower() in _FILLER:
        return ""
    if _NOT_TELLING.match(word):
        return ""
    return word


def _is_compound(word: str) -> bool:
    """A path, module or identifier (``src/checkout``, ``app.db``, ``fan_out``): one such word tells where on its
    own."""
    return "/" in word or "_" in word or "." in word


def _words_before(left: str) -> list[str]:
    """Up to :data:`CONTEXT_WORDS_BEFORE` telling words of ``left``, back to the start of its clause.

    A token glued to the anchor (``code=`` of ``code=E42``, a backtick) is not a word of its own.
    """
    tokens = left.split()
    if tokens and not left[-1].isspace():
        tokens.pop()
    words: list[str] = []
    for token in reversed(tokens):
        if token in _DASHES or token[-1] in _CLAUSE_MARKS:
            break
        word = _context_word(token)
        if word:
            words.append(word)
            if len(words) == CONTEXT_WORDS_BEFORE:
                break
    words.reverse()
    return words


def _words_after(right: str) -> list[str]:
    """Up to :data:`CONTEXT_WORDS_AFTER` telling words of ``right``, up to the end of its clause."""
    tokens = right.split()
    if tokens and not right[0].isspace() and tokens.pop(0)[-1] in _CLAUSE_MARKS:
        return []
    words: list[str] = []
    for token in tokens:
        if token in _DASHES:
            break
        word = _context_word(token)
        if word:
            words.append(word)
            if len(words) == CONTEXT_WORDS_AFTER:
                break
        if token[-1] in _CLAUSE_MARKS:
            break
    return words


def context_words(text: str, start: int, end: int) -> str:
    """A few words of the line and clause ``text[start:end]`` sits in: what it is about, without the anchor.

    An indented ``key: value`` line of a config file starts with the key of the section it is in
    (``checkout_backoff monthly_cost_usd …``): ``monthly_cost_usd`` alone does not say whose cost.
    Fewer than :data:`MIN_TELLING_WORDS` words tell nothing ("index", "Image") unless one is a path,
    module or identifier: then "".
    """
    low = max(0, start - CONTEXT_SCAN_CHARS)
    newline = text.rfind("\n", low, start)
    line_start = newline + 1 if newline >= 0 else low
    before = _words_before(text[line_start:start])
    section = _section_key(text, line_start) if newline >= 0 or low == 0 else ""
    if section:
        before = [section, *before[1 - CONTEXT_WORDS_BEFORE :]]
    high = min(len(text), end + CONTEXT_SCAN_CHARS)
    newline = text.find("\n", end, high)
    after = _words_after(text[end : newline if newline >= 0 else high])
    if len(before) + len(after) < MIN_TELLING_WORDS and not any(map(_is_compound, before + after)):
        return ""
    words = " ".join(before)
    if after:
        words = f"{words} … {' '.join(after)}" if words else " ".join(after)
    return _clip_words(words, MAX_CONTEXT_CHARS)


#: An indented mapping entry (``  monthly_cost_usd: 6976``), whose section says whose value it is.
_MAPPING_ENTRY = re.compile(r"( +)[\w.-]+:(?: |$)")


def _section_key(text: str, line_start: int) -> str:
    """The key of the config section holding the indented ``key: value`` line at ``line_start``, or ""."""
    entry = _MAPPING_ENTRY.match(text, line_start)
    if not entry:
        return ""
    section = section_above(text, line_start, len(entry.group(1)))
    return section if section and len(section) <= MAX_CONTEXT_WORD_CHARS else ""


def _lines_before(text: str, line_start: int, count: int) -> list[str]:
    """Up to ``count`` lines before the one starting at ``line_start``, nearest first."""
    lines: list[str] = []
    end = line_start - 1
    while end > 0 and len(lines) < count:
        begin = text.rfind("\n", 0, end) + 1
        lines.append(text[begin:end])
        end = begin - 1
    return lines


def _lines_after(text: str, line_end: int, count: int) -> list[str]:
    """Up to ``count`` lines after the one ending at ``line_end``, nearest first."""
    lines: list[str] = []
    begin = line_end + 1
    while begin < len(text) and len(lines) < count:
        end = text.find("\n", begin)
        end = len(text) if end < 0 else end
        lines.append(text[begin:end])
        begin = end + 1
    return lines


def _short_path(path: str) -> str:
    """A frame's path without its installation prefix (``/app/src/pkg/y.py`` → ``pkg/y.py``); the tail is verbatim."""
    return "/".join(path.split("/")[-FRAME_PATH_SEGMENTS:])


def _frame(text: str, line_start: int, line_end: int, error_line: str) -> tuple[str, bool]:
    """``(where the error was raised, whether a Python traceback holds it)``: its last frame or location line."""
    for line in _lines_before(text, line_start, 2):
        match = _PY_FRAME.match(line)
        if match:
            path, number, function = match.groups()
            return f"{_short_path(path)}:{number} in {function}", True
    for line in _lines_after(text, line_end, 4):
        at = _AT_FRAME.match(line)
        if at:
            return (f"{at.group(2)} in {at.group(1)}" if at.group(1) else at.group(2)), False
        arrow = _ARROW_LOCATION.match(line)
        if arrow:
            return arrow.group(1), False
        if error_line.startswith("E "):
            location = _PYTEST_LOCATION.match(line)
            if location:
                return location.group(1), False
    return "", False


def without_log_prefix(line: str) -> str:
    """``line`` without the stamp and level a log record starts with (``2025-03-24T21:06:09Z ERROR   ``)."""
    return _LOG_PREFIX.sub("", line, count=1)


def _log_record(text: str, line_start: int) -> str:
    """The line a traceback above ``line_start`` was printed under — a log record (its job or module), cleaned of
    stamp and level, or the sentence before a pasted traceback's fence."""
    header = text.rfind(_TRACEBACK_HEADER, max(0, line_start - TRACEBACK_LOOKBACK), line_start)
    if header < 0:
        return ""
    begin = text.rfind("\n", 0, header) + 1
    for line in _lines_before(text, begin, 2):
        if line.lstrip().startswith("```"):
            continue  # a pasted traceback: the line before its fence says what it came from
        record = without_log_prefix(line).strip()
        if record.startswith((_TRACEBACK_HEADER, "File ")) or not _HAS_LETTER.search(record):
            return ""
        return _clip_words(record, MAX_RECORD_CHARS)
    return ""


def _pytest_test(text: str, line_start: int) -> str:
    """The test whose failure block holds the line at ``line_start`` (pytest's ``____ test_x ____`` header)."""
    header = text.rfind("____ ", max(0, line_start - TRACEBACK_LOOKBACK), line_start)
    if header < 0:
        return ""
    begin = text.rfind("\n", 0, header) + 1
    end = text.find("\n", header)
    match = _PYTEST_HEADER.search(text, begin, end if end >= 0 else len(text))
    return match.group(1) if match else ""


def producer(text: str, line_start: int, error_line: str) -> str:
    """What produced the error line at ``line_start``: ``from`` its frame or test, and the log record it came under."""
    line_end = text.find("\n", line_start)
    line_end = len(text) if line_end < 0 else line_end
    where, in_traceback = _frame(text, line_start, line_end, error_line)
    if not in_traceback and (error_line.startswith("E ") or _PYTEST_LOCATION.match(error_line)):
        test = _pytest_test(text, line_start)
        if test:
            where = f"{where} in {test}" if where else f"in {test}"
    parts = [_clip_words(where if where.startswith("in ") else f"from {where}", MAX_FRAME_CHARS)] if where else []
    record = _log_record(text, line_start) if in_traceback else ""
    if record:
        parts.append(f'{RECORD_LABEL}{record}"')
    return "; ".join(parts)
