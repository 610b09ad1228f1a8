"""``foldgate eval decay``: how planted facts fade, by their age, as one long night is compacted again and again.

``foldgate eval compaction`` compacts a session once. A real night in a small window is
compacted many times, each summary folding the last one in, and what is lost first is
what is oldest. This replays a session's messages in order into a growing list, as the
agent loop would send them; whenever the list passes the compressor's threshold just
before a model call (the next message is not a tool result), it is compacted
(``ContextCompressor.compress``) and the replay goes on from the compacted list. After
each compaction every probe whose message has been replayed is scored — literal
(closed-book) and attributed recall, as :mod:`evals.compaction_eval` scores them —
grouped by where its message sits in the session: first quarter … last quarter by
message position.
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from agent.search import message_search_text
from agent.tokens import count_message, count_messages
from evals.compaction_eval import (
    ATTRIBUTED_NOTE,
    Probe,
    context_text,
    literal_and_attributed,
    load_inputs,
    make_compressor,
    open_summarizer,
    summarizer_label,
)
from evals.listing_load import LOAD_HEADER, ListingLoad, listing_load, load_cells
from gateway.progress import Progress

DEFAULT_CONTEXT_LENGTH = 200_000
DEFAULT_POLICIES = ("legacy", "lean")
QUARTERS = ("first", "second", "third", "last")


@dataclass
class QuarterScore:
    """Facts of one quarter of the session replayed so far, and how many of them are still in the context."""

    probes: int = 0
    literal: int = 0
    attributed: int = 0


@dataclass
class Checkpoint:
    """One compaction in the replay and the recall right after it."""

    number: int
    replayed: int
    tokens_before: int
    tokens_after: int
    #: Who wrote the notes (``deterministic``, the summarizer's name, or ``fallback`` when it failed) and its calls.
    summary_by: str = "deterministic"
    summarizer_calls: int = 0
    quarters: list[QuarterScore] = field(default_factory=lambda: [QuarterScore() for _ in QUARTERS])


@dataclass
class DecayRun:
    """One session replayed under one policy."""

    session: str
    policy: str
    messages: int
    tokens: int
    probes: int
    threshold_tokens: int
    checkpoints: list[Checkpoint]
    wall_seconds: float
    cpu_seconds: float
    #: The listing lines of the whole night's tool output, and the first quarter's facts as ``(kind, where)``.
    listing: ListingLoad = field(default_factory=ListingLoad)
    first_facts: list[tuple[str, str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "compactions": len(self.checkpoints)}


def quarter_of(position: int, total: int) -> int:
    """0 … 3: which quarter of a ``total``-message session the message at ``position`` sits in."""
    return min(len(QUARTERS) - 1, len(QUARTERS) * position // max(1, total))


def probe_positions(messages: Sequence[Mapping[str, Any]], probes: Sequence[Probe]) -> list[tuple[Probe, int]]:
    """Each probe with the position of its message: by ``message_id``, else the first message holding the answer."""
    index = {message.get("_id"): position for position, message in enumerate(messages)}
    placed = []
    for probe in probes:
        position = index.get(probe.message_id)
        if position is None:
            position = next(
                (spot for spot, message in enumerate(messages) if probe.answer in message_search_text(message)), None
            )
        if position is not None:
            placed.append((probe, position))
    return placed


def before_model_call(messages: Sequence[Mapping[str, Any]], position: int) -> bool:
    """Whether the agent would send the prompt after ``position``: the next message is not a tool result."""
    return position + 1 >= len(messages) or messages[position + 1].get("role") != "tool"


def score_checkpoint(checkpoint: Checkpoint, context: str, placed: Sequence[tuple[Probe, int]], total: int) -> None:
    """Literal and attributed recall of every probe already replayed (position below ``checkpoint.replayed``)."""
    for probe, position in placed:
        if position >= checkpoint.replayed:
            continue
        literal, attributed = literal_and_attributed(probe, context)
        quarter = checkpoint.quarters[quarter_of(position, total)]
        quarter.probes += 1
        quarter.literal += literal
        quarter.attributed += attributed


async def replay(
    session: str,
    messages: Sequence[dict],
    probes: Sequence[Probe],
    policy: str,
    compressor: Any,
    bar: Progress | None = None,
) -> DecayRun:
    """Feed ``messages`` one by one, compacting at the threshold, and score after every compaction."""
    placed = probe_positions(messages, probes)
    working: list[dict] = []
    tokens = count_messages(working)
    checkpoints: list[Checkpoint] = []
    wall, cpu = time.perf_counter(), time.process_time()
    for position, message in enumerate(copy.deepcopy(list(messages))):
        working.append(message)
        tokens += count_message(message)
        if bar is not None:
            bar.update(advance=1)
        if not before_model_call(messages, position) or not compressor.should_compress(tokens):
            continue
        compacted = await compressor.compress(working)
        stats = compressor.last_compaction
        if getattr(stats, "outcome", "compacted") != "compacted":
            continue
        working = list(compacted)
        checkpoint = Checkpoint(
            len(checkpoints) + 1,
            position + 1,
            tokens,
            count_messages(working),
            summary_by=str(getattr(stats, "summarizer", "deterministic")),
            summarizer_calls=int(getattr(stats, "calls", 0) or 0),
        )
        score_checkpoint(checkpoint, context_text(working), placed, len(messages))
        checkpoints.append(checkpoint)
        tokens = checkpoint.tokens_after
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return DecayRun(
        session=session,
        policy=policy,
        messages=len(messages),
        tokens=count_messages(messages),
        probes=len(placed),
        threshold_tokens=compressor.threshold_tokens,
        checkpoints=checkpoints,
        wall_seconds=wall,
        cpu_seconds=cpu,
        listing=listing_load(messages),
        first_facts=[
            (probe.kind, probe.where) for probe, position in placed if quarter_of(position, len(messages)) == 0
        ],
    )


async def run_decay(
    sessions: Mapping[str, Sequence[dict]],
    probes: Sequence[Probe],
    policies: Sequence[str],
    context_length: int,
    summarizer: Any | None = None,
    progress: TextIO | None = None,
) -> list[DecayRun]:
    """Every session replayed under every policy, each with a fresh compressor (its summary state starts empty)."""
    by_session: dict[str, list[Probe]] = {}
    for probe in probes:
        by_session.setdefault(probe.session, []).append(probe)
    total = sum(len(messages) for messages in sessions.values()) * len(policies)
    runs = []
    with Progress(total, "message", progress, label="decay eval") as bar:
        for name, messages in sessions.items():
            for policy in policies:
                bar.update(advance=0, note=f"{name} × {policy}")
                compressor = make_compressor(policy, context_length, summarizer)
                runs.append(await replay(name, messages, by_session.get(name, []), policy, compressor, bar))
    return runs


# --- reporting -----------------------------------------------------------------------------------


def _cell(score: QuarterScore) -> str:
    if not score.probes:
        return "–"
    attributed, literal = 100 * score.attributed / score.probes, 100 * score.literal / score.probes
    return f"{attributed:.0f}% / {literal:.0f}% of {score.probes}"


def _summaries_by(run: DecayRun) -> str:
    """``deterministic ×12`` or ``stand-in ×11, fallback ×1``: who wrote the run's notes."""
    counts: dict[str, int] = {}
    for point in run.checkpoints:
        counts[point.summary_by] = counts.get(point.summary_by, 0) + 1
    return ", ".join(f"{source} ×{count}" for source, count in counts.items()) or "none"


def run_table(run: DecayRun) -> list[str]:
    """The run's table: one row per compaction, one column per quarter of the session."""
    lines = [
        f"## {run.session} × {run.policy}",
        "",
        f"{run.messages:,} messages, {run.tokens:,} tokens, {run.probes} facts; compacted at "
        f"{run.threshold_tokens:,} tokens, {len(run.checkpoints)} times ({run.wall_seconds:.1f} s wall); "
        f"notes by {_summaries_by(run)}.",
        "",
        "| compaction | after message | tokens before → after | "
        + " | ".join(f"{quarter} quarter" for quarter in QUARTERS)
        + " |",
        "|---:|---:|---:|" + "---:|" * len(QUARTERS),
    ]
    for point in run.checkpoints:
        cells = " | ".join(_cell(score) for score in point.quarters)
        lines.append(
            f"| {point.number} | {point.replayed:,} | {point.tokens_before:,} → {point.tokens_after:,} | {cells} |"
        )
    if not run.checkpoints:
        lines.append("| – | – | never reached the threshold | " + " | ".join("–" for _ in QUARTERS) + " |")
    return lines


def markdown_report(runs: Sequence[DecayRun], context_length: int, summarizer: str) -> str:
    lines = [
        f"# Decay eval (context window {context_length:,} tokens)",
        "",
        f"Summarizer: {summarizer}. Each cell: attributed% / literal% of the facts of that quarter of the session "
        "(by message position) replayed so far, right after the compaction.",
        "",
        ATTRIBUTED_NOTE,
        "",
        "| session | policy | compactions | "
        + " | ".join(f"{quarter} quarter at the end" for quarter in QUARTERS)
        + " |",
        "|---|---|---:|" + "---:|" * len(QUARTERS),
    ]
    for run in runs:
        last = run.checkpoints[-1].quarters if run.checkpoints else [QuarterScore() for _ in QUARTERS]
        lines.append(
            f"| {run.session} | {run.policy} | {len(run.checkpoints)} | "
            + " | ".join(_cell(score) for score in last)
            + " |"
        )
    lines += _first_quarter_listings(runs, context_length)
    for run in runs:
        lines += ["", *run_table(run)]
    return "\n".join(lines) + "\n"


def _first_quarter_listings(runs: Sequence[DecayRun], context_length: int) -> list[str]:
    """The night's listing lines against the summary cap, and the first-quarter recall to expect from that."""
    rows = [run for run in runs if run.listing.lines]
    if not rows:
        return []
    lines = [
        "",
        "The night's commit and issue/PR listing lines against the summary cap. A fact on a line nothing in its "
        "listing singles out stays only if its line does; a summary holding nothing but listing lines, and favouring "
        "no hour of the night over another, could keep the share shown. Expected recall = every other first-quarter "
        "fact kept and the listed ones at that share, what a compressor that cannot tell their lines apart can expect.",
        "",
        f"| session | policy | {LOAD_HEADER} (first quarter) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for run in rows:
        lines.append(f"| {run.session} | {run.policy} | {load_cells(run.listing, context_length, run.first_facts)} |")
    return lines


def write_report(runs: Sequence[DecayRun], out: Path, context_length: int, summarizer: str) -> dict[str, Path]:
    """``decay_eval.json`` and ``decay_eval.md`` under ``out``; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "decay_eval.json", "markdown": out / "decay_eval.md"}
    document = {
        "context_length": context_length,
        "summarizer": summarizer,
        "quarters": list(QUARTERS),
        "runs": [run.as_dict() for run in runs],
    }
    paths["json"].write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    paths["markdown"].write_text(markdown_report(runs, context_length, summarizer), encoding="utf-8")
    return paths


def main(
    sessions: str,
    probes: str,
    policies: Sequence[str],
    context_length: int,
    out: str,
    progress: TextIO | None = None,
    summarizer: str = "deterministic",
    config: str | None = None,
) -> tuple[list[DecayRun], dict[str, Path]]:
    """Load, replay every session under every policy, write the report: what ``foldgate eval decay`` does."""
    unknown = [name for name in policies if name not in ("legacy", "lean")]
    if unknown:
        raise ValueError(f"eval decay replays the built-in compressor, legacy and lean; not {', '.join(unknown)}")
    loaded, wanted = load_inputs(sessions, probes)

    async def measure() -> tuple[list[DecayRun], str]:
        async with open_summarizer(summarizer, config) as model:
            runs = await run_decay(loaded, wanted, policies, context_length, model, progress)
            return runs, summarizer_label(summarizer, model)

    runs, label = asyncio.run(measure())
    return runs, write_report(runs, Path(out), context_length, label)
