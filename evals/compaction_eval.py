"""Compaction quality, measured: retained tokens against fact recall, closed-book and with recovery.

For each session and policy the session is compacted once, then every probe
(a planted fact) is scored three ways:

* closed-book — the probe's answer occurs literally in the compacted context
  (message text plus tool-call names and arguments: everything the model reads);
* attributed — closed-book, and the answer stands next to what it is about: one of
  the probe's subject alternatives occurs on the answer's line (outside the answer
  itself) or on the line before or after it (:func:`is_attributed`). A SHA kept in a
  bare list of identifiers is literal but not attributed; ``abc1234 fix(ledger):
  rework the ledger cutoff`` is both;
* recovery — closed-book, or the answer occurs in one of the top
  :data:`RECOVERY_HITS` :func:`agent.search.search_messages` hits (each at most
  :data:`RECOVERY_SNIPPET_CHARS` characters) for the probe's query, searched over
  the messages the compaction removed or replaced — what a model can get back with
  one ``session_search`` call.

Misses say why (the answer's message was folded into the summary or replaced by a
stub; the search ranked it too low or cut it out of the snippet), which is the
useful part for whoever tunes the compressor. Sessions and probes are plain JSONL:
any transcript in that format can be measured, not only generated ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import functools
import inspect
import json
import re
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TextIO

from agent.compaction.budgets import max_summary_tokens
from agent.messages import InvalidMessage, validate_message
from agent.search import message_search_text, search_messages
from agent.tokens import count_messages
from evals.listing_load import LOAD_HEADER, ListingLoad, is_listed, listing_load, load_cells
from gateway.progress import Progress, plural

RECOVERY_HITS = 4
RECOVERY_SNIPPET_CHARS = 2_500
#: How deep to look when explaining a recovery miss ("the answer's message ranked 9th").
_DIAGNOSTIC_DEPTH = 50
DEFAULT_POLICIES = ("uncompacted", "legacy", "lean")
#: ``--summarizer`` choices: no model (the deterministic notes), the bundled extractive stand-in, the configured model.
SUMMARIZERS = ("deterministic", "stand-in", "configured")
#: Subject alternatives this short must stand alone (no letter or digit touching either end): "bug" is not in "debug".
SHORT_SUBJECT_CHARS = 3
#: What separates a subject's words: ``ledger cutoff`` is also ``ledger_cutoff``, ``ledger-cutoff``, ``ledger/cutoff``.
_SUBJECT_SEPARATOR = r"[ \t_/-]+"
#: Query words that name the kind of fact asked for, not its subject (probe files without ``subject`` fall back on
#: the rest).
_QUERY_KIND_WORDS = frozenset(
    [
        "commit",
        "commits",
        "issue",
        "bug",
        "file",
        "error",
        "code",
        "port",
        "rate",
        "limit",
        "cost",
        "month",
        "timeout",
        "owns",
        "owner",
        "deployment",
        "decided",
        "use",
        "why",
        "instead",
        "run",
        "before",
        "never",
        "name",
        "format",
        "what",
        "which",
    ]
)


# --- inputs ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """One planted fact: the question a user asks later and the literal answer it needs."""

    session: str
    question: str
    answer: str
    query: str
    kind: str = "fact"
    where: str = "?"
    message_id: str | None = None
    at: float | None = None
    #: Alternatives naming what the fact is about (a line must hold one); empty: :attr:`about` falls back on the query.
    subject: tuple[str, ...] = ()

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Probe:
        missing = [key for key in ("session", "question", "answer", "query") if not record.get(key)]
        if missing:
            raise ValueError(f"probe {record!r} lacks {', '.join(missing)}")
        names = {item.name for item in dataclasses.fields(cls)}
        fields = {key: value for key, value in record.items() if key in names}
        subject = fields.get("subject") or ()
        fields["subject"] = (subject,) if isinstance(subject, str) else tuple(str(item) for item in subject)
        return cls(**fields)

    @property
    def about(self) -> tuple[str, ...]:
        """The subject alternatives attribution looks for: the probe's own, else each topic word of its query.

        The fallback (probe files written before ``subject`` existed) is lenient: any one
        query word that names no kind of fact and is not part of the answer counts.
        """
        if self.subject:
            return self.subject
        answer = self.answer.lower()
        words = [word for word in re.findall(r"[\w'-]+", self.query) if len(word) > SHORT_SUBJECT_CHARS]
        return tuple(word for word in words if word.lower() not in _QUERY_KIND_WORDS and word.lower() not in answer)


def _read_jsonl(path: Path) -> list[dict]:
    records = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as error:
                    raise ValueError(f"{path}:{number}: not JSON ({error.msg})") from None
    return records


def session_files(spec: str) -> list[Path]:
    """A directory (every ``*.jsonl`` but ``probes.jsonl``), a file, or comma-separated files."""
    files: list[Path] = []
    for part in (piece.strip() for piece in spec.split(",")):
        if not part:
            continue
        path = Path(part)
        if path.is_dir():
            files.extend(sorted(item for item in path.glob("*.jsonl") if item.name != "probes.jsonl"))
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"no session file or directory at {path}")
    return files


def load_session(path: Path) -> list[dict]:
    """A transcript file's messages, each validated and given an ``_id`` if it has none."""
    messages = _read_jsonl(path)
    for index, message in enumerate(messages):
        try:
            validate_message(message)
        except InvalidMessage as error:
            raise ValueError(f"{path}:{index + 1}: {error}") from None
        message.setdefault("_id", f"m{index:05d}")
    return messages


def load_sessions(spec: str) -> dict[str, list[dict]]:
    return {path.stem: load_session(path) for path in session_files(spec)}


def load_probes(path: str | Path) -> list[Probe]:
    return [Probe.from_record(record) for record in _read_jsonl(Path(path))]


# --- policies ------------------------------------------------------------------------------------


@dataclass
class Compaction:
    """What a policy made of a session, and what it cost beyond time."""

    messages: list[dict]
    summarizer_calls: int | None = None
    stats: dict[str, Any] = field(default_factory=dict)


class Policy(Protocol):
    """A way to shrink a session: the built-in compressor, a plugin engine, or a baseline."""

    name: str

    async def compact(self, messages: list[dict]) -> Compaction: ...


@dataclass
class Uncompacted:
    """The whole session: recall must be 100%, a sanity check of the scorer."""

    name: str = "uncompacted"

    async def compact(self, messages: list[dict]) -> Compaction:
        return Compaction(list(messages), 0)


@dataclass
class SearchOnly:
    """Keep only the system prompt: recovery recall is then the search alone finding every fact."""

    name: str = "search-only"

    async def compact(self, messages: list[dict]) -> Compaction:
        return Compaction([message for message in messages[:1] if message.get("role") == "system"], 0)


def _plain(value: Any) -> Any:
    """Stats objects (dataclass, pydantic model, plain object) as JSON-friendly data."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain(dataclasses.asdict(value))
    if hasattr(value, "model_dump"):
        return _plain(value.model_dump())
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_plain(item) for item in value]
    if hasattr(value, "__dict__"):
        return {key: _plain(item) for key, item in vars(value).items() if not key.startswith("_")}
    return repr(value)


def _compact_stats(stats: dict[str, Any]) -> dict[str, Any]:
    """Stats without long id lists (a 500K session replaces ~1,000 ids): their counts instead."""
    return {
        key: ({"count": len(value)} if isinstance(value, list) and len(value) > 20 else value)
        for key, value in stats.items()
    }


def _summarizer_calls(stats: Mapping[str, Any]) -> int | None:
    for key in ("summarizer_calls", "summary_calls", "llm_calls", "calls"):
        if isinstance(stats.get(key), int):
            return stats[key]
    return None


@dataclass
class EnginePolicy:
    """Any context engine: ``compress(messages, force=True)`` and its ``last_compaction`` stats."""

    name: str
    engine: Any

    async def compact(self, messages: list[dict]) -> Compaction:
        result = self.engine.compress(messages, force=True)
        if inspect.isawaitable(result):
            result = await result
        stats = _plain(getattr(self.engine, "last_compaction", None)) or {}
        if not isinstance(stats, dict):
            stats = {"last_compaction": stats}
        return Compaction(list(result), _summarizer_calls(stats), _compact_stats(stats))


def summarizer_arguments(summarizer: Any | None) -> dict[str, Any]:
    """The engine keywords for a summarizer, as ``gateway.agents`` passes them (nothing for the deterministic notes)."""
    if summarizer is None:
        return {}
    return {"summarizer": summarizer, "summarizer_context_length": summarizer.context_length}


def make_compressor(tail_mode: str, context_length: int, summarizer: Any | None = None) -> Any:
    """The built-in ContextCompressor in ``legacy`` or ``lean`` tail mode; no summarizer means the deterministic
    notes."""
    from agent.context_compressor import ContextCompressor
    from agent.settings import CompressionSettings

    return ContextCompressor(
        model="eval-model",
        context_length=context_length,
        settings=CompressionSettings(tail_mode=tail_mode),
        **summarizer_arguments(summarizer),
    )


def compressor_policy(tail_mode: str, context_length: int, summarizer: Any | None = None) -> EnginePolicy:
    """:func:`make_compressor` as a policy named after its tail mode."""
    return EnginePolicy(tail_mode, make_compressor(tail_mode, context_length, summarizer))


def _named_engine(name: str, context_length: int, summarizer: Any | None = None) -> Any:
    """An engine resolved by name through ``agent.context_engine`` (plugin directory or registry).

    The gateway falls back to the built-in compressor for an unknown name; an evaluation
    must not, or a typo would be measured as the compressor under another label.
    """
    from agent.engine_registry import resolve_context_engine
    from agent.settings import CompressionSettings

    factory, warning = resolve_context_engine(name)
    if warning is not None:
        raise ValueError(f"unknown policy {name!r}: {warning}")
    parameters = list(inspect.signature(factory).parameters.values())

    def takes(keyword: str) -> bool:
        return any(p.name == keyword or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)

    extra = {"settings": CompressionSettings()} if takes("settings") else {}
    if takes("summarizer"):
        extra.update(summarizer_arguments(summarizer))
    return factory(model="eval-model", context_length=context_length, **extra)


def make_policy(name: str, context_length: int, summarizer: Any | None = None) -> Policy:
    """``uncompacted``, ``search-only``, ``legacy``, ``lean``, or an engine name ``agent.context_engine`` resolves.

    ``summarizer`` (a :class:`agent.compaction.summarizer.Summarizer`) goes to every engine
    that takes one; None keeps the deterministic notes.
    """
    if name == "uncompacted":
        return Uncompacted()
    if name == "search-only":
        return SearchOnly()
    if name in ("legacy", "lean"):
        return compressor_policy(name, context_length, summarizer)
    return EnginePolicy(name, _named_engine(name, context_length, summarizer))


@contextlib.asynccontextmanager
async def open_summarizer(choice: str, config: str | None = None) -> AsyncIterator[Any | None]:
    """The summarizer ``--summarizer`` names: None (deterministic), the stand-in, or the configured model.

    ``configured`` builds it as the gateway does (``gateway.agents.AgentBuilder``) from the
    config file and closes its client afterwards; a ValueError says so when no provider is set.
    """
    if choice == "deterministic":
        yield None
        return
    if choice == "stand-in":
        from evals.stand_in_summarizer import StandInSummarizer

        yield StandInSummarizer()
        return
    if choice != "configured":
        raise ValueError(f"unknown summarizer {choice!r}; choose one of {', '.join(SUMMARIZERS)}")
    from gateway.agents import AgentBuilder
    from gateway.config import ConfigError, load_settings

    try:
        builder = AgentBuilder(load_settings(config))
    except ConfigError as error:
        raise ValueError(f"--summarizer configured: {error}") from None
    try:
        if builder.summarizer is None:
            provider = builder.settings.model.provider
            raise ValueError(
                f"--summarizer configured: no summarizer model is configured (model.provider is {provider!r} "
                "and auxiliary.compression.base_url is null); set a provider in config.yaml or use stand-in"
            )
        yield builder.summarizer
    finally:
        await builder.aclose()


def summarizer_label(choice: str, summarizer: Any | None) -> str:
    """How the report names the summarizer: the ``--summarizer`` choice, with the model for ``configured``."""
    return f"{choice} ({summarizer.name})" if choice == "configured" and summarizer is not None else choice


# --- scoring -------------------------------------------------------------------------------------


def context_text(messages: Iterable[Mapping[str, Any]]) -> str:
    """Everything a model reads of a message list, as one string the answers are looked up in."""
    return "\n".join(message_search_text(message) for message in messages)


@functools.lru_cache(maxsize=4096)
def subject_pattern(subject: tuple[str, ...]) -> re.Pattern[str] | None:
    """One case-insensitive pattern for any of the alternatives (None when there are none).

    An alternative's words may be separated by any of space, ``_``, ``-`` or ``/``; one of at
    most :data:`SHORT_SUBJECT_CHARS` characters must not touch a letter or digit, a longer one
    may sit inside a longer word (``ledger cutoff`` is found in ``apply_ledger_cutoff``).
    """
    parts = []
    for alternative in subject:
        words = [re.escape(word) for word in re.split(_SUBJECT_SEPARATOR, alternative.strip()) if word]
        if not words:
            continue
        body = _SUBJECT_SEPARATOR.join(words)
        if len(alternative.strip()) <= SHORT_SUBJECT_CHARS:
            body = f"(?<![0-9a-z]){body}(?![0-9a-z])"
        parts.append(body)
    return re.compile("|".join(parts), re.IGNORECASE) if parts else None


def _neighbourhood(text: str, start: int, end: int) -> tuple[int, int]:
    """Where the line before ``text[start:end]``'s line begins and where the line after it ends."""
    line_start = text.rfind("\n", 0, start) + 1
    first = text.rfind("\n", 0, line_start - 1) + 1 if line_start else 0
    line_end = text.find("\n", end)
    last = text.find("\n", line_end + 1) if line_end >= 0 else -1
    return first, len(text) if last < 0 else last


def answer_neighbourhoods(text: str, answer: str) -> Iterator[str]:
    """For each occurrence of ``answer``: its line with the lines before and after, every copy of the answer
    blanked out."""
    start = text.find(answer) if answer else -1
    while start >= 0:
        end = start + len(answer)
        first, last = _neighbourhood(text, start, end)
        yield text[first:last].replace(answer, "\0" * len(answer))
        start = text.find(answer, end)


def is_attributed(text: str, answer: str, subject: Sequence[str]) -> bool:
    """Whether an occurrence of ``answer`` has a subject alternative on its line (outside the answer) or a
    neighbouring one."""
    pattern = subject_pattern(tuple(subject))
    if pattern is None:
        return False
    return any(pattern.search(window) for window in answer_neighbourhoods(text, answer))


def removed_messages(original: Sequence[dict], compacted: Sequence[Mapping[str, Any]]) -> list[dict]:
    """Input messages whose ``_id`` no longer appears in the compacted list (dropped or replaced)."""
    kept = {message.get("_id") for message in compacted if message.get("_id") is not None}
    return [message for message in original if message.get("_id") not in kept]


@dataclass
class ProbeResult:
    probe: Probe
    closed_book: bool
    recovered: bool
    reason: str | None = None
    #: Closed-book with its subject beside it (see :func:`is_attributed`).
    attributed: bool = False
    #: For a fact kept literally but not attributed: the line it stood on.
    line: str | None = None


def literal_and_attributed(probe: Probe, context: str) -> tuple[bool, bool]:
    """Closed-book recall of one probe and whether the answer also stands next to its subject."""
    literal = probe.answer in context
    return literal, literal and is_attributed(context, probe.answer, probe.about)


def answer_line(context: str, answer: str, width: int = 160) -> str | None:
    """The first line holding ``answer`` (clipped around it), to show what an unattributed fact looked like."""
    start = context.find(answer)
    if start < 0:
        return None
    line_start = context.rfind("\n", 0, start) + 1
    line_end = context.find("\n", start)
    line = context[line_start : len(context) if line_end < 0 else line_end]
    offset = start - line_start
    if len(line) <= width:
        return line
    left = max(0, offset - width // 2)
    return ("…" if left else "") + line[left : left + width] + ("…" if left + width < len(line) else "")


def _closed_book_reason(probe: Probe, original: Sequence[dict], compacted: Sequence[Mapping[str, Any]]) -> str:
    """Where a planted answer went: folded into the summary, or its message replaced (e.g. by a stub)."""
    homes = [message.get("_id") for message in original if probe.answer in message_search_text(message)]
    replaced = {message.get("_orig_id") for message in compacted if message.get("_orig_id") is not None}
    kept = {message.get("_id") for message in compacted if message.get("_id") is not None}
    if not homes:
        return "answer not in the session"
    if any(home in kept for home in homes):
        return "message kept under its id but edited in place"
    if any(home in replaced for home in homes):
        return "message replaced (stub or pruned copy)"
    return "not kept (summarized or dropped)"


#: A ranking by meaning for the recovery search (``--embeddings-python``): the ids of ``messages`` closest to
#: ``query``, best first. None: keywords alone, as the tool searches with ``memory.embeddings`` off.
Meaning = Callable[[Sequence[dict], str], list[Any]]


def _recovery_search(removed: Sequence[dict], query: str, limit: int, meaning: Meaning | None) -> list[Any]:
    similar = meaning(removed, query) if meaning is not None else None
    return search_messages(removed, query, limit=limit, snippet_chars=RECOVERY_SNIPPET_CHARS, similar=similar)


def _recovery_reason(probe: Probe, removed: Sequence[dict], meaning: Meaning | None = None) -> str:
    homes = {message.get("_id") for message in removed if probe.answer in message_search_text(message)}
    if not homes:
        return "answer in no removed message"
    deep = _recovery_search(removed, probe.query, _DIAGNOSTIC_DEPTH, meaning)
    ranks = [rank for rank, hit in enumerate(deep, 1) if hit.message_id in homes]
    if not ranks:
        return f"search: answer's message not in the top {_DIAGNOSTIC_DEPTH}"
    if ranks[0] <= RECOVERY_HITS:
        return f"search: ranked {ranks[0]} but the snippet missed the answer"
    return f"search: answer's message ranked {ranks[0]}"


def score_probe(
    probe: Probe,
    context: str,
    removed: Sequence[dict],
    original: Sequence[dict] = (),
    compacted: Sequence[Mapping[str, Any]] = (),
    meaning: Meaning | None = None,
) -> ProbeResult:
    """Closed-book, attributed and recovery recall of one probe, with the reason for a miss."""
    literal, attributed = literal_and_attributed(probe, context)
    if literal:
        line = None if attributed else answer_line(context, probe.answer)
        return ProbeResult(probe, True, True, attributed=attributed, line=line)
    hits = _recovery_search(removed, probe.query, RECOVERY_HITS, meaning)
    recovered = any(probe.answer in hit.snippet for hit in hits)
    reason = _closed_book_reason(probe, original, compacted) if original else None
    if not recovered:
        missed = _recovery_reason(probe, removed, meaning)
        reason = f"{reason}; {missed}" if reason else missed
    return ProbeResult(probe, False, recovered, reason)


# --- running -------------------------------------------------------------------------------------


@dataclass
class Run:
    """One session compacted by one policy, and how well its facts survived."""

    session: str
    policy: str
    tokens_before: int
    messages_before: int
    retained_tokens: int
    messages_after: int
    removed: int
    results: list[ProbeResult]
    wall_seconds: float
    cpu_seconds: float
    search_seconds: float
    summarizer_calls: int | None
    stats: dict[str, Any]
    #: The listing lines among the removed messages (:mod:`evals.listing_load`).
    listing: ListingLoad = field(default_factory=ListingLoad)

    @property
    def closed_book(self) -> int:
        return sum(result.closed_book for result in self.results)

    @property
    def recovered(self) -> int:
        return sum(result.recovered for result in self.results)

    @property
    def attributed(self) -> int:
        return sum(result.attributed for result in self.results)

    def as_dict(self) -> dict[str, Any]:
        probes = len(self.results) or 1
        return {
            "session": self.session,
            "policy": self.policy,
            "tokens_before": self.tokens_before,
            "messages_before": self.messages_before,
            "retained_tokens": self.retained_tokens,
            "messages_after": self.messages_after,
            "retained_ratio": round(self.retained_tokens / max(1, self.tokens_before), 4),
            "removed_messages": self.removed,
            "probes": len(self.results),
            "closed_book_hits": self.closed_book,
            "attributed_hits": self.attributed,
            "recovery_hits": self.recovered,
            "closed_book_recall": round(self.closed_book / probes, 4),
            "attributed_recall": round(self.attributed / probes, 4),
            "recovery_recall": round(self.recovered / probes, 4),
            "wall_seconds": round(self.wall_seconds, 4),
            "cpu_seconds": round(self.cpu_seconds, 4),
            "search_seconds": round(self.search_seconds, 4),
            "summarizer_calls": self.summarizer_calls,
            "stats": self.stats,
            "listing_lines_removed": self.listing.lines,
            "listing_tokens_removed": self.listing.tokens,
            "misses": [
                {
                    "question": r.probe.question,
                    "answer": r.probe.answer,
                    "kind": r.probe.kind,
                    "where": r.probe.where,
                    "at": r.probe.at,
                    "closed_book": r.closed_book,
                    "recovered": r.recovered,
                    "reason": r.reason,
                }
                for r in self.results
                if not r.closed_book
            ],
            "unattributed": [
                {
                    "question": r.probe.question,
                    "answer": r.probe.answer,
                    "kind": r.probe.kind,
                    "subject": list(r.probe.about),
                    "line": r.line,
                }
                for r in self.results
                if r.closed_book and not r.attributed
            ],
        }


async def evaluate(
    session: str, messages: Sequence[dict], probes: Sequence[Probe], policy: Policy, meaning: Meaning | None = None
) -> Run:
    """Compact one session with one policy and score every probe against the result."""
    working = copy.deepcopy(list(messages))
    wall, cpu = time.perf_counter(), time.process_time()
    compaction = await policy.compact(working)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    compacted = compaction.messages
    removed = removed_messages(messages, compacted)
    context = context_text(compacted)
    started = time.perf_counter()
    results = [score_probe(probe, context, removed, messages, compacted, meaning) for probe in probes]
    return Run(
        session=session,
        policy=policy.name,
        tokens_before=count_messages(messages),
        messages_before=len(messages),
        retained_tokens=count_messages(compacted),
        messages_after=len(compacted),
        removed=len(removed),
        results=results,
        wall_seconds=wall,
        cpu_seconds=cpu,
        search_seconds=time.perf_counter() - started,
        summarizer_calls=compaction.summarizer_calls,
        stats=compaction.stats,
        listing=listing_load(removed),
    )


async def run_eval(
    sessions: Mapping[str, Sequence[dict]],
    probes: Sequence[Probe],
    policies: Sequence[Policy],
    progress: TextIO | None = None,
    meaning: Meaning | None = None,
) -> list[Run]:
    """Every session under every policy, sessions in the given order, policies side by side.

    ``progress`` (stderr from the command line) counts the runs, since a 500K session takes a while.
    """
    by_session: dict[str, list[Probe]] = {}
    for probe in probes:
        by_session.setdefault(probe.session, []).append(probe)
    runs = []
    with Progress(len(sessions) * len(policies), "run", progress, label="compaction eval") as bar:
        for name, messages in sessions.items():
            for policy in policies:
                bar.update(len(runs), note=f"{name} × {policy.name}")
                runs.append(await evaluate(name, messages, by_session.get(name, []), policy, meaning))
        bar.update(len(runs), note="")
    return runs


# --- reporting -----------------------------------------------------------------------------------


def summarize(runs: Sequence[Run]) -> dict[str, dict[str, Any]]:
    """Per policy: total retained tokens and recall over all probes of all sessions."""
    table: dict[str, dict[str, Any]] = {}
    for run in runs:
        row = table.setdefault(
            run.policy,
            {
                "sessions": 0,
                "tokens_before": 0,
                "retained_tokens": 0,
                "probes": 0,
                "closed_book_hits": 0,
                "attributed_hits": 0,
                "recovery_hits": 0,
                "by_kind": {},
            },
        )
        row["sessions"] += 1
        row["tokens_before"] += run.tokens_before
        row["retained_tokens"] += run.retained_tokens
        row["probes"] += len(run.results)
        row["closed_book_hits"] += run.closed_book
        row["attributed_hits"] += run.attributed
        row["recovery_hits"] += run.recovered
        for result in run.results:
            kind = row["by_kind"].setdefault(result.probe.kind, [0, 0, 0, 0])
            kind[0] += 1
            kind[1] += result.closed_book
            kind[2] += result.recovered
            kind[3] += result.attributed
    for row in table.values():
        probes = row["probes"] or 1
        row["closed_book_recall"] = round(row["closed_book_hits"] / probes, 4)
        row["attributed_recall"] = round(row["attributed_hits"] / probes, 4)
        row["recovery_recall"] = round(row["recovery_hits"] / probes, 4)
    return table


def _percent(hits: int, total: int) -> str:
    return f"{100 * hits / total:.0f}% ({hits}/{total})" if total else "–"


#: What the attributed column means, for every report that shows one.
ATTRIBUTED_NOTE = (
    "Attributed = closed-book, and a word of what the fact is about (its probe's subject) stands on the "
    "answer's line or the line before or after it."
)


def markdown_report(runs: Sequence[Run], context_length: int, summarizer: str = "deterministic") -> str:
    lines = [
        f"# Compaction eval (context window {context_length:,} tokens)",
        "",
        f"Summarizer: {summarizer}.",
        "",
        ATTRIBUTED_NOTE,
        f"Recovery = closed-book, or the answer in the top {plural(RECOVERY_HITS, 'search hit')} "
        f"(≤{RECOVERY_SNIPPET_CHARS:,} characters each) over the removed messages.",
        "",
        "| session | policy | outcome | tokens before | retained | kept | closed-book recall | attributed recall "
        "| recovery recall | wall s | CPU s | summary by | summarizer calls |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for run in runs:
        probes = len(run.results)
        lines.append(
            f"| {run.session} | {run.policy} | {run.stats.get('outcome', '–')} | {run.tokens_before:,} | "
            f"{run.retained_tokens:,} | "
            f"{100 * run.retained_tokens / max(1, run.tokens_before):.1f}% | {_percent(run.closed_book, probes)} | "
            f"{_percent(run.attributed, probes)} | {_percent(run.recovered, probes)} | {run.wall_seconds:.2f} | "
            f"{run.cpu_seconds:.2f} | {run.stats.get('summarizer', '–')} | "
            f"{'–' if run.summarizer_calls is None else run.summarizer_calls} |"
        )
    totals = summarize(runs)
    kinds = sorted({kind for row in totals.values() for kind in row["by_kind"]})
    lines += [
        "",
        "## Recall by kind of fact (all sessions)",
        "",
        "Closed-book: the answer is in the compacted context. Attributed: closed-book, with its subject beside it. "
        "Recovery: closed-book, or found by one search.",
        "",
        "| kind | facts | "
        + " | ".join(f"{policy} closed-book | {policy} attributed | {policy} recovery" for policy in totals)
        + " |",
        "|---|---:|" + "---:|---:|---:|" * len(totals),
    ]
    for kind in kinds:
        facts = max(row["by_kind"].get(kind, [0])[0] for row in totals.values())
        cells = []
        for row in totals.values():
            total, closed, recovered, attributed = row["by_kind"].get(kind, [0, 0, 0, 0])
            cells += [_percent(closed, total), _percent(attributed, total), _percent(recovered, total)]
        lines.append(f"| {kind} | {facts} | " + " | ".join(cells) + " |")
    lines += _unattributed_examples(runs)
    lines += _listing_section(runs, context_length)
    reasons: dict[tuple[str, str, str], int] = {}
    for run in runs:
        for result in run.results:
            if not result.closed_book:
                cause = (result.reason or "").split("; ")[0]
                reasons[(run.session, run.policy, cause)] = reasons.get((run.session, run.policy, cause), 0) + 1
    if reasons:
        lines += [
            "",
            "## Why facts left the context",
            "",
            "| session | policy | what happened to the answer's message | facts missed closed-book |",
            "|---|---|---|---:|",
        ]
        lines += [
            f"| {session} | {policy} | {cause} | {count} |" for (session, policy, cause), count in reasons.items()
        ]
    lost = [(run, result) for run in runs for result in run.results if not result.recovered]
    if lost:
        lines += [
            "",
            "## Facts lost even with recovery search",
            "",
            "| session | policy | kind | where | at | answer | query | why |",
            "|---|---|---|---|---:|---|---|---|",
        ]
        for run, result in lost:
            probe = result.probe
            at = f"{probe.at:.2f}" if probe.at is not None else "?"
            answer = probe.answer if len(probe.answer) <= 48 else probe.answer[:45] + "…"
            lines.append(
                f"| {run.session} | {run.policy} | {probe.kind} | {probe.where} | {at} | `{answer}` | "
                f"{probe.query} | {result.reason or ''} |"
            )
    return "\n".join(lines) + "\n"


def _listing_section(runs: Sequence[Run], context_length: int) -> list[str]:
    """How many listing lines each compaction folded against the summary cap, and the recall that allows."""
    rows = [run for run in runs if run.listing.lines]
    if not rows:
        return []
    lines = [
        "",
        "## Facts on the lines of long listings",
        "",
        "A commit or a PR row that nothing in its listing singles out stays closed-book only if its line does. "
        "A summary holding nothing but the listing lines this compaction folded (commits, issue and PR rows) could "
        f"keep the share shown (the summary cap at this window is {max_summary_tokens(context_length):,} tokens); "
        "expected recall = every other fact kept and the listed ones at that share, what a compressor that cannot tell "
        "the listed facts' lines from their neighbours can expect.",
        "",
        f"| session | policy | {LOAD_HEADER} | listed facts attributed | attributed recall |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for run in rows:
        facts = [(result.probe.kind, result.probe.where) for result in run.results]
        listed = [result for result in run.results if is_listed(result.probe.kind, result.probe.where)]
        lines.append(
            f"| {run.session} | {run.policy} | {load_cells(run.listing, context_length, facts)} | "
            f"{_percent(sum(result.attributed for result in listed), len(listed))} | "
            f"{_percent(run.attributed, len(run.results))} |"
        )
    return lines


def _unattributed_examples(runs: Sequence[Run], per_kind: int = 2) -> list[str]:
    """A few facts per policy and kind that were kept literally but away from their subject, with the line they
    stood on."""
    shown: dict[tuple[str, str], int] = {}
    rows = []
    for run in runs:
        for result in run.results:
            key = (run.policy, result.probe.kind)
            if not result.closed_book or result.attributed or shown.get(key, 0) >= per_kind:
                continue
            shown[key] = shown.get(key, 0) + 1
            line = (result.line or "").replace("|", "\\|").replace("`", "'")
            rows.append(f"| {run.policy} | {result.probe.kind} | {' / '.join(result.probe.about)} | `{line}` |")
    if not rows:
        return []
    return [
        "",
        f"## Kept but not attributed (up to {per_kind} per policy and kind)",
        "",
        "| policy | kind | subject | the line the answer stood on |",
        "|---|---|---|---|",
        *rows,
    ]


def _short_tokens(value: float) -> str:
    """``11.7K``, ``497K``, ``1.2M``: tick labels that fit beside each other."""
    if value >= 1_000_000:
        return f"{value / 1_000_000:.1f}M"
    if value >= 100_000:
        return f"{value / 1000:.0f}K"
    if value >= 1000:
        return f"{value / 1000:.1f}K"
    return f"{value:.0f}"


def _side_by_side(values: Sequence[float], ratio: float = 1.08) -> list[float]:
    """Offsets in points (0, or spread around 0) for values so close on a log axis that their markers would cover
    each other."""
    order = sorted(range(len(values)), key=lambda index: values[index])
    groups: list[list[int]] = []
    for index in order:
        if groups and values[index] <= values[groups[-1][-1]] * ratio:
            groups[-1].append(index)
        else:
            groups.append([index])
    offsets = [0.0] * len(values)
    for group in groups:
        for position, index in enumerate(group):
            offsets[index] = (position - (len(group) - 1) / 2) * 12.0
    return offsets


def _ticks_at(values: Sequence[float], ratio: float = 1.25) -> list[float]:
    """One tick per data value, except where two are so close that their labels would overlap."""
    ticks: list[float] = []
    for value in sorted(set(values)):
        if not ticks or value > ticks[-1] * ratio:
            ticks.append(value)
    return ticks


def figure_of(runs: Sequence[Run], context_length: int | None = None) -> Any:
    """The chart as a matplotlib Figure: one panel per session, tokens each policy kept against the facts still
    answerable.

    Sessions differ in size, so each gets its own panel instead of a line joining them as
    if they were one trend. In a panel every policy is a marker shape and colour: the
    filled marker is closed-book recall, the ring recovery recall (a ring around the dot
    when they are equal), a thin stem between them. Policies that kept about the same
    number of tokens are drawn a few points apart so that none hides another; the ticks
    stand at the tokens kept.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator
    from matplotlib.transforms import offset_copy

    sessions = list(dict.fromkeys(run.session for run in runs))
    policies = list(dict.fromkeys(run.policy for run in runs))
    columns = max(1, min(3, len(sessions)))
    rows = max(1, -(-len(sessions) // columns))
    figure, axes = plt.subplots(
        rows, columns, figsize=(4.4 * columns, 3.8 * rows + 1.0), sharey=True, squeeze=False, layout="constrained"
    )
    colours = plt.get_cmap("tab10")
    markers = ["o", "s", "^", "D", "v", "P", "X", "*", "h", "<"]
    style = {policy: (colours(number % 10), markers[number % len(markers)]) for number, policy in enumerate(policies)}
    for axis, session in zip(axes.flat, sessions):
        mine = [run for run in runs if run.session == session]
        kept = [float(max(1, run.retained_tokens)) for run in mine]
        for run, x, shift in zip(mine, kept, _side_by_side(kept)):
            colour, marker = style[run.policy]
            probes = max(1, len(run.results))
            closed, recovered = 100 * run.closed_book / probes, 100 * run.recovered / probes
            where = offset_copy(axis.transData, fig=figure, x=shift, y=0, units="points")
            axis.plot([x, x], [closed, recovered], color=colour, linewidth=1.2, alpha=0.5, transform=where, zorder=2)
            axis.plot(
                [x], [closed], linestyle="none", marker=marker, markersize=7, color=colour, transform=where, zorder=4
            )
            axis.plot(
                [x],
                [recovered],
                linestyle="none",
                marker=marker,
                markersize=13,
                markerfacecolor="none",
                markeredgecolor=colour,
                markeredgewidth=1.5,
                transform=where,
                zorder=3,
            )
            if closed < recovered:
                axis.annotate(
                    f"{closed:.0f}%",
                    (x, closed),
                    xycoords=where,
                    textcoords="offset points",
                    xytext=(11, -4),
                    fontsize=8,
                    color=colour,
                )
        axis.set_xscale("log")
        axis.set_xlim(min(kept) / 1.8, max(kept) * 1.8)
        axis.xaxis.set_major_locator(FixedLocator(_ticks_at(kept)))
        axis.xaxis.set_major_formatter(FuncFormatter(lambda value, _position: _short_tokens(value)))
        axis.xaxis.set_minor_locator(NullLocator())
        axis.tick_params(axis="x", labelsize=8)
        axis.set_ylim(-5, 108)
        axis.grid(True, alpha=0.3)
        before = mine[0].tokens_before if mine else 0
        axis.set_title(f"{session} ({before:,} tokens)", fontsize=10)
        axis.set_xlabel("tokens kept (log scale)")
    for axis in axes[:, 0]:
        axis.set_ylabel("facts recalled (%)")
    for axis in list(axes.flat)[len(sessions) :]:
        axis.set_visible(False)
    handles = [Line2D([], [], linestyle="none", marker=style[p][1], color=style[p][0], label=p) for p in policies]
    handles += [
        Line2D([], [], linestyle="none", marker="o", color="0.3", markersize=7, label="closed-book recall (filled)"),
        Line2D(
            [],
            [],
            linestyle="none",
            marker="o",
            markersize=12,
            markerfacecolor="none",
            markeredgecolor="0.3",
            markeredgewidth=1.5,
            label="recovery recall (ring)",
        ),
    ]
    figure.legend(
        handles=handles,
        loc="outside lower center",
        ncol=min(len(handles), 5),
        frameon=False,
        fontsize=9,
        title="policies that kept about as many tokens are drawn side by side",
        title_fontsize=8,
    )
    window = f", {context_length:,}-token window" if context_length else ""
    figure.suptitle(f"Tokens kept against planted facts recalled{window}", fontsize=11)
    return figure


def plot(runs: Sequence[Run], path: Path, context_length: int | None = None) -> None:
    """The chart as a PNG at ``path``; ``bbox_inches="tight"`` keeps every label inside the image."""
    figure = figure_of(runs, context_length)  # selects the Agg backend before pyplot is imported here
    import matplotlib.pyplot as plt

    try:
        figure.savefig(path, dpi=110, bbox_inches="tight")
    finally:
        plt.close(figure)


def _matplotlib_missing(error: ImportError) -> bool:
    return (error.name or "").split(".")[0] == "matplotlib"


def write_report(
    runs: Sequence[Run], out: Path, context_length: int, summarizer: str = "deterministic"
) -> dict[str, Path]:
    """``compaction_eval.json``, ``.md`` and ``.png`` under ``out``; returns their paths.

    Without matplotlib (the ``evals`` extra) the PNG is skipped, and absent from the result:
    the numbers do not need it.
    """
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": out / "compaction_eval.json",
        "markdown": out / "compaction_eval.md",
        "plot": out / "compaction_eval.png",
    }
    document = {
        "context_length": context_length,
        "summarizer": summarizer,
        "recovery_hits": RECOVERY_HITS,
        "recovery_snippet_chars": RECOVERY_SNIPPET_CHARS,
        "policies": summarize(runs),
        "runs": [run.as_dict() for run in runs],
    }
    paths["json"].write_text(json.dumps(document, indent=2, ensure_ascii=False, default=repr) + "\n", encoding="utf-8")
    paths["markdown"].write_text(markdown_report(runs, context_length, summarizer), encoding="utf-8")
    try:
        plot(runs, paths["plot"], context_length)
    except ImportError as error:
        if not _matplotlib_missing(error):
            raise
        # A plot left by an earlier run would not show these numbers.
        paths.pop("plot").unlink(missing_ok=True)
    return paths


def load_inputs(sessions: str, probes: str) -> tuple[dict[str, list[dict]], list[Probe]]:
    """The sessions, smallest first, and the probes of those sessions."""
    loaded = load_sessions(sessions)
    if not loaded:
        raise ValueError(f"no sessions found in {sessions}")
    loaded = dict(sorted(loaded.items(), key=lambda item: count_messages(item[1])))
    return loaded, [probe for probe in load_probes(probes) if probe.session in loaded]


def main(
    sessions: str,
    probes: str,
    policies: Sequence[str],
    context_length: int,
    out: str,
    progress: TextIO | None = None,
    summarizer: str = "deterministic",
    config: str | None = None,
    meaning: Meaning | None = None,
) -> tuple[list[Run], dict[str, Path]]:
    """Load, run every policy, write the report: what ``foldgate eval compaction`` does (``meaning``: the
    recovery search fused with a ranking by meaning, as the tool's is with ``memory.embeddings`` on)."""
    loaded, wanted = load_inputs(sessions, probes)

    async def measure() -> tuple[list[Run], str]:
        async with open_summarizer(summarizer, config) as model:
            built = [make_policy(name, context_length, model) for name in policies]
            return await run_eval(loaded, wanted, built, progress, meaning), summarizer_label(summarizer, model)

    runs, label = asyncio.run(measure())
    if meaning is not None:
        label += "; recovery search fused with a ranking by meaning"
    return runs, write_report(runs, Path(out), context_length, label)
