"""``foldgate bench api_matching``: the cost of finding a stateless API client's session by its resent history.

A client without the session header resends the whole conversation on every call. For a stored session of
1,000 and of 100,000 client-visible messages (an index entry at each of its answers, recorded through the
real write path), one request that continues it is matched over and over, and the wall time of each part is
reported as p50/p99 over the runs:

- ``hash``: the request's prefix chain (:func:`gateway.api.matching.conversation`), the client's messages
  hashed in this process; it grows with the request, since every message is read once;
- ``lookup``: the index lookup on a real Redis (the fast path: one script, one round trip), which must not
  grow with the session;
- ``together``: both, as a request pays them;
- ``edit lookup``: a request whose message 3 was edited, so the fast path misses and one HMGET of every
  earlier answered point finds where it forks (the slow path, only for edits).

The goal: matching at 100,000 messages in 2 ms or less. The lookup meets it whatever the size; the
request-side hashing is reported as it is, beside it.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from evals.redis_target import bench_redis
from evals.report import progress, publish

SIZES = (1_000, 100_000)
#: Timed runs per size (after one untimed warm-up run).
RUNS = 50
#: Runs of the slow path, which reads every earlier answered point of the request.
EDIT_RUNS = 10
GOAL_MS = 2.0
KEY_NAME = "bench-key"
#: Record calls in flight at once while the session's index is built.
RECORD_CONCURRENCY = 500

#: Sentences the generated messages are made of: plain replies with paragraphs, questions of one line.
_SENTENCES = (
    "The nightly backup finished at 03:12 and the checksum matched the one from yesterday.",
    "I looked at the deploy log; the second replica restarted twice before it became ready.",
    "Could you check whether the ledger service still retries on a 503 from the payments API?",
    "Here is the plan:\n\n1. drain the old node\n2. move the volume\n3. bring the new node up",
    "The migration touches 14 tables, and only two of them are large enough to need a batch.",
    "Nothing in the error budget moved this week, so the rollout can go on as scheduled.",
)


def quantile(values: Sequence[float], q: float) -> float:
    """Nearest-rank quantile (q in 0..1) of ``values``; 0 for an empty list."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def summary_ms(seconds: Sequence[float]) -> dict[str, float]:
    return {
        "p50": round(quantile(seconds, 0.50) * 1000, 3),
        "p99": round(quantile(seconds, 0.99) * 1000, 3),
        "mean": round(statistics.fmean(seconds) * 1000, 3) if seconds else 0.0,
    }


def session_messages(size: int) -> list[dict[str, Any]]:
    """A conversation of ``size`` client-visible messages: a system prompt, then questions and answers."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are the operations assistant."}]
    for index in range(1, size):
        if index % 2:
            text = f"Question {index}: {_SENTENCES[index % 3 + 2]}"
            messages.append({"role": "user", "content": text})
        else:
            body = " ".join(_SENTENCES[(index + offset) % len(_SENTENCES)] for offset in range(3))
            messages.append({"role": "assistant", "content": f"Answer {index}. {body}"})
    return messages


async def _fill_index(index: Any, messages: list[dict[str, Any]], sid: str) -> int:
    """Record every answer of ``messages`` as the gateway does after each turn; returns the entries written."""
    from gateway.api.matching import conversation

    request = conversation(messages)
    points = [(position, request.at(position)) for position in request.answered]
    for start in range(0, len(points), RECORD_CONCURRENCY):
        batch = points[start : start + RECORD_CONCURRENCY]
        await asyncio.gather(*(index.record(KEY_NAME, sid, point) for point in batch))
    return len(points)


async def _timed(step: Callable[[], Awaitable[Any]], runs: int) -> tuple[list[float], Any]:
    result = await step()  # warm-up: scripts loaded, caches filled
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        result = await step()
        seconds.append(time.perf_counter() - started)
    return seconds, result


async def _measure_size(index: Any, channel: Any, size: int, runs: int, edit_runs: int) -> dict[str, Any]:
    from gateway.api.matching import conversation

    messages = session_messages(size)
    sid = f"s_{size}"
    entries = await _fill_index(index, messages, sid)
    request = [*messages, {"role": "user", "content": "And what about tonight?"}]
    chained = conversation(request)

    async def hash_only() -> Any:
        return conversation(request)

    async def together() -> Any:
        return await index.lookup(KEY_NAME, conversation(request))

    hashing, _ = await _timed(hash_only, runs)
    await index.lookup(KEY_NAME, chained)  # the script loaded: the count below is of warm lookups only
    before = channel.commands
    lookup, match = await _timed(lambda: index.lookup(KEY_NAME, chained), runs)
    trips = (channel.commands - before) / (runs + 1)
    both, _ = await _timed(together, runs)
    edited = [*request[:3], {"role": "user", "content": "Question 3, asked another way"}, *request[4:]]
    edited_chain = conversation(edited)
    edit_lookup, edit_match = await _timed(lambda: index.lookup(KEY_NAME, edited_chain), edit_runs)
    return {
        "messages": size,
        "index_entries": entries,
        "chars_per_message": round(sum(len(message["content"]) for message in request) / len(request)),
        "match": {"kind": match.kind, "position": match.position},
        "edit_match": {"kind": edit_match.kind, "position": edit_match.position},
        "lookup_round_trips": trips,
        "hash_ms": summary_ms(hashing),
        "hash_us_per_message": round(statistics.median(hashing) / len(request) * 1e6, 3),
        "lookup_ms": summary_ms(lookup),
        "together_ms": summary_ms(both),
        "edit_lookup_ms": summary_ms(edit_lookup),
    }


async def measure(
    redis_url: str | None = None, sizes: Sequence[int] = SIZES, runs: int = RUNS, edit_runs: int = EDIT_RUNS
) -> dict[str, Any]:
    from redis.asyncio import Redis

    from gateway.store.api_sessions import ApiSessionIndex
    from gateway.store.channel import PipelinedConnection
    from gateway.store.keys import every_key_pattern

    prefix = f"fgbench-{uuid.uuid4().hex[:12]}"
    rows = []
    async with bench_redis(redis_url) as url:
        redis = Redis.from_url(url, decode_responses=True)
        channel = PipelinedConnection.like(redis)
        index = ApiSessionIndex(channel, prefix)
        bar = progress(len(sizes), "session size", "bench api_matching")
        try:
            for size in sizes:
                bar.update(advance=0, note=f"{size:,} messages")
                rows.append(await _measure_size(index, channel, size, runs, edit_runs))
                rows[-1]["index_bytes_per_entry"] = await _bytes_per_entry(redis, index, rows[-1]["index_entries"])
                await index.forget(KEY_NAME)
                bar.update()
        finally:
            stale = [key async for key in redis.scan_iter(match=every_key_pattern(prefix), count=1000)]
            if stale:
                await redis.delete(*stale)
            await channel.aclose()
            await redis.aclose()
    largest = max(rows, key=lambda row: row["messages"])
    return {
        "runs": runs,
        "goal_ms": GOAL_MS,
        "rows": rows,
        "verdict": {
            "lookup_goal_met": largest["lookup_ms"]["p99"] <= GOAL_MS,
            "together_goal_met": largest["together_ms"]["p99"] <= GOAL_MS,
        },
    }


async def _bytes_per_entry(redis: Any, index: Any, entries: int) -> float:
    used = await redis.memory_usage(index.keys(KEY_NAME).chains, samples=0)
    return round((used or 0) / max(1, entries), 1)


def table(result: dict[str, Any]) -> str:
    lines = [
        "# Matching a stateless client's history to its session",
        "",
        f"p50 / p99 over {result['runs']} runs, in ms; the goal is {result['goal_ms']:g} ms at the largest size.",
        "",
        "| messages | chars/msg | hash | µs/msg | lookup | round trips | together | edit lookup | index bytes/entry |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:

        def cell(name: str, row: dict[str, Any] = row) -> str:
            return f"{row[name]['p50']:.3f} / {row[name]['p99']:.3f}"

        lines.append(
            f"| {row['messages']:,} | {row['chars_per_message']} | {cell('hash_ms')} | {row['hash_us_per_message']} "
            f"| {cell('lookup_ms')} | {row['lookup_round_trips']:g} | {cell('together_ms')} "
            f"| {cell('edit_lookup_ms')} | {row['index_bytes_per_entry']:g} |"
        )
    verdict = result["verdict"]
    lines += [
        "",
        f"- lookup within the goal at the largest size: {'yes' if verdict['lookup_goal_met'] else 'NO'}",
        f"- hash and lookup together within the goal: {'yes' if verdict['together_goal_met'] else 'no'} "
        "(hashing reads every message of the request once, so it grows with the request, not the stored session)",
    ]
    return "\n".join(lines) + "\n"


def main(out_dir: str | Path, **options: Any) -> int:
    result = asyncio.run(measure(**options))
    publish(out_dir, "bench_api_matching", result, table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "evals/out"))
