"""``foldgate bench compress``: compress() CPU time against session size, with a zero-latency summarizer.

The summarizer is the deterministic one (no LLM, no network), so what is measured is
foldgate's own work: pruning, boundaries, anchor extraction, assembly, and token
counting. Each size runs in the same process, side by side, and the table puts the
growth of CPU time next to the growth of the session: CPU ×10 for tokens ×10 means
linear. "warm" sessions carry their cached per-message token counts (as in the
agent loop); "cold" ones are counted from scratch inside compress().
"""

from __future__ import annotations

import asyncio
import copy
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from agent.tokens import count_messages
from evals.fixtures.session import generate_session, session_name
from evals.report import progress, publish

SIZES = (50_000, 200_000, 500_000)
RUNS = 5
TAIL_MODES = ("lean", "legacy")
SEED = 7
CONTEXT_LENGTH = 1_000_000


async def _compress_once(messages: list[dict], tail_mode: str, cold: bool) -> tuple[float, float, int, str]:
    """CPU seconds, wall seconds, retained tokens and outcome of one compress() on a fresh engine."""
    from evals.compaction_eval import compressor_policy

    policy = compressor_policy(tail_mode, CONTEXT_LENGTH)
    working = copy.deepcopy(messages)
    if cold:
        for message in working:
            message.pop("_tok", None)
    cpu, wall = time.process_time(), time.perf_counter()
    compaction = await policy.compact(working)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return cpu, wall, count_messages(compaction.messages), str(compaction.stats.get("outcome", "?"))


def measure(sizes: Sequence[int] = SIZES, runs: int = RUNS, tail_modes: Sequence[str] = TAIL_MODES) -> list[dict]:
    """One row per (tail mode, size): medians over ``runs`` compress() calls, warm and cold."""
    rows: list[dict] = []
    bar = progress(len(sizes) * len(tail_modes) * 2 * runs, "compress() call", "bench compress")
    for size in sizes:
        bar.update(advance=0, note=f"generating {size:,} tokens")
        session = generate_session(session_name(size, SEED), size, SEED)
        messages = session.messages
        tokens = count_messages(messages)
        for tail_mode in tail_modes:
            bar.update(advance=0, note=f"{session.name}, {tail_mode}")
            warm, cold = [], []
            for _ in range(runs):
                warm.append(asyncio.run(_compress_once(messages, tail_mode, cold=False)))
                bar.update()
            for _ in range(runs):
                cold.append(asyncio.run(_compress_once(messages, tail_mode, cold=True)))
                bar.update()
            rows.append(
                {
                    "tail_mode": tail_mode,
                    "session": session.name,
                    "tokens": tokens,
                    "messages": len(messages),
                    "runs": runs,
                    "cpu_seconds_warm": statistics.median(run[0] for run in warm),
                    "wall_seconds_warm": statistics.median(run[1] for run in warm),
                    "cpu_seconds_cold": statistics.median(run[0] for run in cold),
                    "retained_tokens": warm[0][2],
                    "outcome": warm[0][3],
                }
            )
    for tail_mode in tail_modes:
        mine = [row for row in rows if row["tail_mode"] == tail_mode]
        base = mine[0]
        for row in mine:
            row["tokens_ratio"] = round(row["tokens"] / base["tokens"], 2)
            row["cpu_ratio_warm"] = round(row["cpu_seconds_warm"] / max(base["cpu_seconds_warm"], 1e-9), 2)
            row["cpu_ratio_cold"] = round(row["cpu_seconds_cold"] / max(base["cpu_seconds_cold"], 1e-9), 2)
            row["cpu_ms_per_100k_tokens_warm"] = round(1000 * row["cpu_seconds_warm"] * 100_000 / row["tokens"], 2)
    bar.close()
    return rows


def table(rows: Sequence[dict]) -> str:
    lines = [
        "| tail | session | tokens | outcome | CPU warm (median) | CPU cold (median) | ms / 100K tok (warm) "
        "| tokens × | CPU × warm | CPU × cold | retained |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['tail_mode']} | {row['session']} | {row['tokens']:,} | {row['outcome']} | "
            f"{row['cpu_seconds_warm'] * 1000:.1f} ms | {row['cpu_seconds_cold'] * 1000:.1f} ms | "
            f"{row['cpu_ms_per_100k_tokens_warm']:.1f} | {row['tokens_ratio']:.2f} | "
            f"{row['cpu_ratio_warm']:.2f} | {row['cpu_ratio_cold']:.2f} | {row['retained_tokens']:,} |"
        )
    return "\n".join(lines)


def main(out: str | Path, sizes: Sequence[int] = SIZES, runs: int = RUNS) -> int:
    try:
        import agent.context_compressor  # noqa: F401
    except ImportError as error:
        print(f"foldgate bench compress: the compressor is not available ({error})", file=sys.stderr)
        return 2
    rows = measure(sizes, runs)
    publish(out, "bench_compress", {"context_length": CONTEXT_LENGTH, "seed": SEED, "rows": rows}, table(rows))
    return 0
