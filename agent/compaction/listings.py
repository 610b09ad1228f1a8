"""Lines worth keeping from long tool output: the one commit, search hit, issue or setting among dozens.

The anchor index keeps identifiers, but an identifier from a listing is of little use
alone: a SHA means something next to its subject, a path next to the line a search
found in it, a number next to the key that says what it is. And a listing holds dozens
of them, all equally anchor-shaped. This module takes the lines a listing is made of —
``git log`` commits (one-line and full form), ``path:line:text`` search hits, rows of
issue and pull request lists, and ``key: value`` settings whose key names a setting
(port, timeout, limit, price …) — verbatim (clipped; a setting led by its section, a
list row's columns joined by ``|``), and scores them so a small budget keeps the telling
ones:

* a search hit that matches the pattern the search was made with beats the context
  lines around it;
* a line whose words are rare among the lines of its kind beats one made of words every
  listing repeats (the classic inverse-document-frequency salience of extractive
  summaries: routine, templated lines say little, the odd one out says something);
* a listing's best line beats its second best (each further line of one message counts
  for less), so one long listing cannot crowd out all the others.

Candidates are found once per message text (memoized); scoring a compaction's worth of
them is a pass over a few thousand short word sets.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
import shlex
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from agent import json_codec
from agent.compaction.config_sections import section_above
from agent.compaction.fitting import count_line
from agent.compaction.memo import TextMemo

#: Kinds of listing line, in the order the summary shows them.
KINDS = ("setting", "hit", "ref", "commit")
LABELS = {"commit": "Commits", "hit": "Search hits", "ref": "Issues and PRs", "setting": "Settings"}
#: Lines of each kind one round of :func:`render_listings` takes (a listing of commits is the longest).
ROUND_SHARES = {"commit": 2, "hit": 1, "ref": 1, "setting": 1}

#: Longest line kept whole; longer ones are cut (the identifier at the start stays verbatim).
MAX_LINE_CHARS = 120
#: A setting's value longer than this is not a setting but data.
MAX_VALUE_CHARS = 40
#: Lines of one listing that are scored at all (the k-th best counts 1/k, so later ones never make the cut).
LINES_PER_LISTING = 8
#: Score added to a search hit that matches its search's pattern.
MATCH_BONUS = 1.0
#: Score added to every setting: they are few, and a port or a limit is asked about by name.
SETTING_BONUS = 0.6

#: Words of a setting's key that say it is one (whole key parts, so "report" is not a port).
SETTING_WORDS = frozenset(
    [
        "port",
        "ports",
        "timeout",
        "timeouts",
        "limit",
        "limits",
        "rate",
        "ttl",
        "retries",
        "retry",
        "max",
        "min",
        "maximum",
        "minimum",
        "size",
        "interval",
        "price",
        "cost",
        "costs",
        "threshold",
        "budget",
        "workers",
        "replicas",
        "concurrency",
        "capacity",
        "deadline",
        "delay",
        "backoff",
        "usd",
        "eur",
        "seconds",
        "ms",
        "secs",
        "minutes",
        "hours",
        "days",
        "retention",
    ]
)

_ONELINE_COMMIT = re.compile(r"^[*|\\/ ]{0,8}([0-9a-f]{7,40}) (?! )(.{3,})$", re.M)
_FULL_COMMIT = re.compile(r"^commit ([0-9a-f]{40})\b", re.M)
_SUBJECT = re.compile(r"^ {4}(\S.*)$", re.M)
_REF_ROW = re.compile(r"^(#\d{1,6}|[A-Z][A-Z0-9]+-\d{1,6})[ \t]+(\S.*)$", re.M)
_COLUMNS = re.compile(r"\t+| {2,}")
_HIT = re.compile(r"^(?:\./)?((?:[\w.@+-]+/)*[\w.@+-]+\.\w+):(\d+)[:-](.*)$", re.M)
_SETTING = re.compile(
    r"^([ \t]*(?:- )?)[\"']?([A-Za-z_][\w.-]*)[\"']?[ \t]*[:=]"  # indent, key
    r"[ \t]*[\"']?([^\s\"',#;]+)[\"']?[ \t]*,?[ \t]*(?:#.*)?$",  # one value, maybe quoted, maybe a comment
    re.M,
)
_KEY_PARTS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
_WORD = re.compile(r"[a-z]{3,}")
_DIGIT = re.compile(r"\d")
_HEX_LETTER = re.compile(r"[a-f]")
_PATTERN_SYNTAX = re.compile(r"(?:\\[a-zA-Z]|\[[^\]]*\]|[\\^$.?*+()\[\]{}])+")
#: Words too common in any text to tell lines apart.
_STOPWORDS = frozenset(
    [
        "the",
        "and",
        "for",
        "with",
        "from",
        "that",
        "this",
        "into",
        "once",
        "when",
        "then",
        "than",
        "are",
        "was",
        "were",
        "has",
        "have",
        "had",
        "not",
        "but",
        "you",
        "your",
        "our",
        "its",
        "can",
        "will",
        "just",
        "also",
        "what",
        "which",
        "who",
        "why",
        "how",
        "all",
        "any",
        "out",
        "off",
        "get",
        "got",
        "let",
        "def",
        "self",
        "none",
        "true",
        "false",
        "return",
        "class",
        "import",
        "async",
        "await",
    ]
)
_QUERY_KEYS = ("pattern", "query", "regex", "search", "q")
_SEARCH_COMMANDS = frozenset({"grep", "egrep", "rg", "ag", "ack"})


class Record(NamedTuple):
    """One line of a listing as it will be shown, with what scoring needs."""

    kind: str  # one of KINDS
    text: str
    words: frozenset[str]
    matched: bool = False


def _clip(text: str) -> str:
    text = text.rstrip()
    return text if len(text) <= MAX_LINE_CHARS else text[: MAX_LINE_CHARS - 1].rstrip() + "…"


def _words(text: str) -> frozenset[str]:
    return frozenset(word for word in _WORD.findall(text.lower()) if word not in _STOPWORDS)


def query_fragments(pattern: str | None) -> tuple[tuple[str, ...], ...]:
    """The literal pieces of each alternative of a search pattern, lowercased.

    ``def .*rate_limiter`` → ``(("def ", "rate_limiter"),)``. A line matches when it
    holds every piece of some alternative: no regex from a tool call is ever run.
    """
    if not pattern:
        return ()
    alternatives = []
    for alternative in pattern.split("|"):
        pieces = tuple(piece.lower() for piece in _PATTERN_SYNTAX.split(alternative) if len(piece.strip()) >= 2)
        if pieces:
            alternatives.append(pieces)
    return tuple(alternatives)


def _matches(text: str, fragments: tuple[tuple[str, ...], ...]) -> bool:
    lowered = text.lower()
    return any(all(piece in lowered for piece in pieces) for pieces in fragments)


@functools.lru_cache(maxsize=8_192)
def _query_of_arguments(arguments: str) -> str | None:
    return search_query(arguments)


def search_query(arguments: Any) -> str | None:
    """The pattern a search tool call was made with: a ``pattern``-like argument, or a grep/rg command's pattern."""
    if isinstance(arguments, str):
        try:
            arguments = json_codec.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, Mapping):
        return None
    for key in _QUERY_KEYS:
        value = arguments.get(key)
        if isinstance(value, str) and value.strip():
            return value
    command = arguments.get("command") or arguments.get("cmd")
    if isinstance(command, str) and any(name in command for name in _SEARCH_COMMANDS):
        return _command_pattern(command)
    return None


def _command_pattern(command: str) -> str | None:
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    for start, word in enumerate(words):
        if word.rsplit("/", 1)[-1] in _SEARCH_COMMANDS:
            for argument in words[start + 1 :]:
                if argument in ("|", "&&", ";"):
                    return None
                if not argument.startswith("-"):
                    return argument
    return None


def _commits(text: str, out: list[Record]) -> None:
    for match in _ONELINE_COMMIT.finditer(text):
        sha, subject = match.groups()
        if _HEX_LETTER.search(sha) and _DIGIT.search(sha):
            out.append(Record("commit", _clip(f"{sha} {subject.strip()}"), _words(subject)))
    for match in _FULL_COMMIT.finditer(text):
        subject = _SUBJECT.search(text, match.end(), match.end() + 600)
        line = subject.group(1) if subject else ""
        out.append(Record("commit", _clip(f"{match.group(1)} {line}"), _words(line)))


def _ref_rows(text: str, out: list[Record]) -> None:
    """Rows of an issue or pull request list (``gh pr list``): the number and its title, columns kept apart."""
    for match in _REF_ROW.finditer(text):
        ref, rest = match.groups()
        columns = [column.strip() for column in _COLUMNS.split(rest) if column.strip()]
        out.append(Record("ref", _clip(" | ".join((ref, *columns))), _words(" ".join(columns))))


def _hits(text: str, fragments: tuple[tuple[str, ...], ...], out: list[Record]) -> None:
    for match in _HIT.finditer(text):
        path, _, found = match.groups()
        if "/" not in path and not _WORD.search(path.lower()):
            continue
        out.append(Record("hit", _clip(match.group().strip()), _words(found), _matches(found, fragments)))


def _is_setting_key(key: str) -> bool:
    return any(part.lower() in SETTING_WORDS for part in _KEY_PARTS.findall(key))


def _settings(text: str, out: list[Record]) -> None:
    for match in _SETTING.finditer(text):
        indent, key, value = match.groups()
        if len(value) > MAX_VALUE_CHARS or not _DIGIT.search(value) or not _is_setting_key(key):
            continue
        section = section_above(text, match.start(), len(indent.expandtabs()))
        name = f"{section}.{key}" if section and "." not in key else key
        out.append(Record("setting", _clip(f"{name}: {value}"), _words(name.replace("_", " "))))


def _records(text: str, query: str | None) -> tuple[Record, ...]:
    out: list[Record] = []
    _commits(text, out)
    if "#" in text or "-" in text:
        _ref_rows(text, out)
    if ":" in text:
        _hits(text, query_fragments(query), out)
    if ":" in text or "=" in text:
        _settings(text, out)
    return tuple(out)


# The memo passes any hashable option; this one is only ever given the query (a str or None).
_MEMO: TextMemo[tuple[Record, ...]] = TextMemo(_records)  # type: ignore[arg-type]


def records_in(text: str, query: str | None = None) -> tuple[Record, ...]:
    """The listing lines of one tool output (memoized per text and query)."""
    return _MEMO(text, query) if text else ()


def search_queries(messages: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """``tool_call_id -> pattern`` for the search calls among the messages' tool calls."""
    queries: dict[str, str] = {}
    for message in messages:
        for call in message.get("tool_calls") or ():
            if not isinstance(call, Mapping) or not isinstance(call.get("id"), str):
                continue
            arguments = (call.get("function") or {}).get("arguments")
            query = _query_of_arguments(arguments) if isinstance(arguments, str) else search_query(arguments)
            if query:
                queries[call["id"]] = query
    return queries


class Scored(NamedTuple):
    score: float
    seq: int
    message_id: str | None
    record: Record


def rank(found: Iterable[tuple[int, str | None, Sequence[Record]]]) -> list[Scored]:
    """The records of ``(seq, message id, records)`` scored (see the module docstring), best first.

    The distinctiveness of a line is the mean inverse document frequency of its words
    among all lines of its kind here, scaled to 0–1. Only a listing's
    :data:`LINES_PER_LISTING` best lines are returned: further ones score too little to
    ever be shown.
    """
    batches = [(seq, ident, records) for seq, ident, records in found if records]
    weights = _word_weights(record for _, _, records in batches for record in records)
    scored: list[Scored] = []
    for seq, ident, records in batches:
        local = [_line_score(record, weights.get(record.kind)) for record in records]
        order = sorted(range(len(records)), key=local.__getitem__, reverse=True)[:LINES_PER_LISTING]
        for place, index in enumerate(order):
            scored.append(Scored(local[index] / (1 + place), seq, ident, records[index]))
    scored.sort(key=lambda item: (item.score, item.seq), reverse=True)
    return scored


def _word_weights(records: Iterable[Record]) -> dict[str, dict[str, float]]:
    """Per kind, each word's inverse document frequency among that kind's lines, scaled to 0–1 (a kind with a
    single line has none: nothing to be distinct from)."""
    words_by_kind: dict[str, list[frozenset[str]]] = {kind: [] for kind in KINDS}
    for record in records:
        words_by_kind[record.kind].append(record.words)
    weights: dict[str, dict[str, float]] = {}
    for kind, of_kind in words_by_kind.items():
        total = len(of_kind)
        if total > 1:
            frequency = Counter(itertools.chain.from_iterable(of_kind))
            scale = math.log(total)
            weights[kind] = {word: math.log(total / count) / scale for word, count in frequency.items()}
    return weights


def _line_score(record: Record, weight: Mapping[str, float] | None) -> float:
    """One line's score before its place in its listing counts: how distinct its words are, plus its bonus.

    The words are a set, iterated in an order that changes with the process's hash seed; ``fsum`` is exact, so the
    score (and which of two close lines is kept) is the same in every process."""
    distinct = math.fsum(map(weight.__getitem__, record.words)) / len(record.words) if weight and record.words else 0.0
    bonus = MATCH_BONUS if record.matched else SETTING_BONUS if record.kind == "setting" else 0.0
    return distinct + bonus


class _Shown(Protocol):
    kind: str
    text: str


def render_listings(lines: Sequence[_Shown], budget_tokens: int) -> tuple[str, int]:
    """``(text, tokens used)``: lines taken round-robin across kinds (``lines`` come best first), grouped by kind.

    Round-robin (:data:`ROUND_SHARES` per kind and round) keeps the many lines of one
    kind — every search of a session has its best hit — from crowding out the others.
    """
    queues = {kind: [line.text for line in lines if line.kind == kind] for kind in KINDS}
    positions = dict.fromkeys(KINDS, 0)
    chosen: dict[str, list[str]] = {kind: [] for kind in KINDS}
    used = 0

    def take_next(kind: str) -> bool:
        nonlocal used
        queue = queues[kind]
        while positions[kind] < len(queue):
            text = queue[positions[kind]]
            positions[kind] += 1
            cost = count_line(text) + 2 + (0 if chosen[kind] else _KIND_HEADER_TOKENS)
            if used + cost <= budget_tokens:
                chosen[kind].append(text)
                used += cost
                return True
        return False

    active = [kind for kind in KINDS if queues[kind]]
    while active and used < budget_tokens:
        active = [kind for kind in active if all(take_next(kind) for _ in range(ROUND_SHARES[kind]))]
    parts = [
        f"- {LABELS[kind]}:\n" + "\n".join(f"  - {text}" for text in chosen[kind]) for kind in KINDS if chosen[kind]
    ]
    return "\n".join(parts), used


#: Tokens a kind's heading costs ("- Search hits:").
_KIND_HEADER_TOKENS = 5
