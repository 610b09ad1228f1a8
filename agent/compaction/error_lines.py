"""Error lines: which lines of a text report a failure, and what kind of failure each reports.

An error line is an exception or failure line (``KeyError: 'ledger_ref' [E4711]``,
``error: failed to push``, ``FAILED tests/…``), or a log record at warning or above that
carries an error code (``WARNING [app.http] upstream rejected … code=EPAY-4135``). Lines of
code that merely mention an error (``raise PayoutError(…)``) are not.

Its *signature* is the kind of failure: its error code, else its exception class, else its
error keyword (``error``, ``FAILED``, ``fatal``). A log's hundred ``TimeoutError`` lines share
one; the one ``PayoutDedupError`` among them has its own, which is how the anchor index tells
news from repetition.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from agent.compaction.anchor_context import without_log_prefix

_ERROR = re.compile(
    r"Error|Exception|Traceback|FAILED|FATAL|fatal:|panic:|error:|error\[|ERR!|Errno|exit code|exit status"
    r"|Segmentation fault"
)
_ERROR_KEYWORD = re.compile(
    r"(?:Error|Exception|FAILED|FATAL|fatal|panic|error|ERR|Errno|exit code|exit status|fault)(?:[:!\]\s]|$)"
)
_CODE_LINE = re.compile(
    r"\s*(?:raise |except\b|catch\b|throw |class |def |import |from |#|//|\*|if |elif |return |assert |with )"
)
_LINE_NUMBER = re.compile(r"^\s*\d+(?:\t|: |\| )")
#: An error code: bracketed (``[E4711]``, ``[ORA-00942]``) or given as one (``code=EPAY-4135``, ``error_code: E42``).
#: A bare ``PAY-342`` or ``ISO-8601`` is a ticket or a name, not a code.
_ERROR_CODE = re.compile(
    r"\[([A-Z]{1,5}-?\d{2,6})\]|(?<![\w-])(?i:(?:error_?)?code)[=:] ?([A-Z]{1,5}-?\d{2,6})(?![\w-])"
)
#: A log record's level at warning or above, as a word of its own (not ``logging.ERROR`` nor ``ERR-12``).
_WARNING_LEVEL = re.compile(r"(?<![\w.-])(?:WARN|WARNING|ERROR|ERR|CRITICAL|FATAL|SEVERE)(?![\w.-])")
#: Characters at the start of a line a log record's level is looked for in.
_LEVEL_WINDOW = 80
_EXCEPTION_CLASS = re.compile(r"\b[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Warning)\b")
#: Characters kept on either side of the keyword when a long error line is cut.
_CUT_BEFORE = 80


def _cut(line: str, keyword_offset: int, max_chars: int) -> str:
    """``line`` stripped, or cut to ``max_chars`` around the keyword at ``keyword_offset`` when longer."""
    stripped = line.strip()
    if len(stripped) <= max_chars:
        return stripped
    offset = keyword_offset - (len(line) - len(line.lstrip()))
    begin = max(0, offset - _CUT_BEFORE)
    return stripped[begin : begin + max_chars].strip()


def _is_code(line: str) -> bool:
    """Whether ``line`` is source code (also in a diff or a numbered listing), which mentions errors without
    reporting one."""
    return bool(_CODE_LINE.match(_LINE_NUMBER.sub("", line.lstrip("+-"), count=1)))


def _first_per_line(matches: Iterator[re.Match[str]], text: str) -> Iterator[tuple[re.Match[str], int, int]]:
    """Each match that is the first on its line, with the line's start and end; the rest of a line's are skipped.

    So a line is read once however many matches it holds (one long line of keywords stays linear).
    """
    resume = 0
    for match in matches:
        if match.start() < resume:
            continue
        line_start = text.rfind("\n", 0, match.start()) + 1
        line_end = text.find("\n", match.end())
        resume = line_end = len(text) if line_end < 0 else line_end
        yield match, line_start, line_end


def find_error_lines(text: str, max_chars: int) -> list[tuple[int, str]]:
    """``(line start, error line)`` for each line of ``text`` that reports a failure, in order."""
    found: dict[int, str] = {}
    for _, line_start, line_end in _first_per_line(_ERROR.finditer(text), text):
        line = text[line_start:line_end]
        stripped = line.strip()
        if not stripped or stripped.startswith("Traceback (most recent call last)") or _is_code(line):
            continue
        keyword = _ERROR_KEYWORD.search(line)
        if keyword:
            found[line_start] = _cut(line, keyword.start(), max_chars)
    _coded_log_lines(text, max_chars, found)
    return sorted(found.items())


def _coded_log_lines(text: str, max_chars: int, found: dict[int, str]) -> None:
    """Add log records at warning or above that carry an error code (``upstream rejected … code=EPAY-4135``).

    Such a record names no exception, yet it is the failure someone asks about, and its
    words (the request rejected, the job that failed) say what it is about. Its stamp and
    level are left out; the rest is verbatim.
    """
    for match, line_start, line_end in _first_per_line(_ERROR_CODE.finditer(text), text):
        if line_start in found:
            continue
        line = text[line_start:line_end]
        if not _WARNING_LEVEL.search(line, 0, _LEVEL_WINDOW) or _is_code(line):
            continue
        record = without_log_prefix(line)
        if record:
            found[line_start] = _cut(record, match.start() - line_start - (len(line) - len(record)), max_chars)


def error_signature(line: str) -> str:
    """The kind of failure an error line reports: its error code, else its exception class, else its error keyword.

    Lines of one signature are one failure seen many times (a hundred ``TimeoutError`` lines
    in a log, each with its own id; a type checker's thirty ``error:`` lines); a signature
    seen once is news. A line with none of them is a kind of its own.
    """
    code = _ERROR_CODE.search(line)
    if code:
        return code.group(1) or code.group(2)
    classes = _EXCEPTION_CLASS.findall(line)
    if classes:
        return classes[-1]
    keyword = _ERROR_KEYWORD.search(line)
    return keyword.group().rstrip(":!] \t").lower() if keyword else line
