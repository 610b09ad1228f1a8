"""``foldgate bench hygiene``: the cost of the gateway's hygiene decision against session size.

The decision runs before every incoming message, so it must not grow with the session:
it reads the session meta (one HGETALL of a bounded hash) and compares counters. Both
sessions live in the same real Redis and are measured interleaved in one run, so the
machine's noise hits them alike; the figure that matters is the ratio of the p50s.

A turn then reads the live transcript (``SessionStore.snapshot``). That read does grow with
the session unless the process holds the transcript already (``TranscriptCache``); the
second table times it after each simulated turn (two messages appended), with the cache off
and on, interleaved, through the pipelined channel the gateway uses.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid

from redis.asyncio import Redis

from evals.redis_target import bench_redis
from evals.report import progress, publish
from gateway.store import SessionStore
from gateway.store.channel import PipelinedConnection
from gateway.store.keys import every_key_pattern
from gateway.worker import hygiene

SIZES = (1_000, 500_000)
ITERATIONS = 3_000
TURN_READS = 30
CONTEXT_LENGTH = 1_000_000
#: One stored message of about 500 tokens of varied text.
_WORDS = [
    "deploy",
    "canary",
    "rollback",
    "latency",
    "ledger",
    "billing",
    "token",
    "cache",
    "webhook",
    "retry",
    "shard",
    "replica",
]


def _message(index: int) -> dict:
    words = " ".join(_WORDS[(index * 7 + k) % len(_WORDS)] + str(k % 97) for k in range(320))
    return {"role": "user" if index % 2 == 0 else "assistant", "content": f"note {index}: {words}"}


async def _fill(store: SessionStore, chat: str, tokens: int) -> int:
    """A session of about ``tokens`` tokens; returns its real stored total."""
    sid = await store.current_session(chat)
    lock = await store.acquire_lock(chat, 60)
    assert lock is not None
    batch: list[dict] = []
    total = 0
    index = 0
    while total < tokens:
        message = _message(index)
        batch.append(message)
        index += 1
        if len(batch) == 200 or total + 500 * len(batch) >= tokens:
            await store.append(chat, sid, batch, lock=lock)
            total = (await store.meta(chat, sid)).tokens
            batch = []
    await store.release_lock(lock)
    return total


async def _decide(store: SessionStore, chat: str, sid: str) -> float:
    started = time.perf_counter()
    meta = await store.meta(chat, sid)
    hygiene.decide(meta, CONTEXT_LENGTH, enabled=True)
    return time.perf_counter() - started


async def _turn_reads(redis: Redis, prefix: str, sessions: list[tuple[int, str, str, int]], reads: int) -> list[dict]:
    """p50 of a turn's transcript read per session size, with the transcript cache off and on."""
    channel = PipelinedConnection.like(redis)
    stores = {
        "off": SessionStore(redis, prefix, channel=channel),
        "on": SessionStore(redis, prefix, channel=channel, transcript_cache_tokens=2_000_000),
    }
    rows = []
    try:
        for _size, chat, sid, stored in sessions:
            lock = await stores["off"].acquire_lock(chat, 60)
            assert lock is not None
            await stores["on"].snapshot(chat)  # held, as in a gateway that served this chat before
            samples: dict[str, list[float]] = {mode: [] for mode in stores}
            for turn in range(reads):
                for mode, store in stores.items():
                    await store.append(chat, sid, [_message(2 * turn), _message(2 * turn + 1)], lock=lock)
                    started = time.perf_counter()
                    await store.snapshot(chat)
                    samples[mode].append(time.perf_counter() - started)
            await stores["off"].release_lock(lock)
            off, on = (statistics.median(samples[mode]) * 1e3 for mode in ("off", "on"))
            rows.append(
                {
                    "session_tokens": stored,
                    "reads": reads,
                    "cache_off_p50_ms": round(off, 2),
                    "cache_on_p50_ms": round(on, 2),
                    "speedup": round(off / on, 1),
                }
            )
    finally:
        await channel.aclose()
    return rows


async def measure(redis_url: str | None = None, iterations: int = ITERATIONS) -> dict[str, list[dict]]:
    async with bench_redis(redis_url) as url:
        return await _measure(url, iterations)


async def _measure(redis_url: str, iterations: int) -> dict[str, list[dict]]:
    redis = Redis.from_url(redis_url, decode_responses=True)
    prefix = f"fgbench-{uuid.uuid4().hex[:8]}"
    store = SessionStore(redis, prefix)
    try:
        sessions = []
        for size in SIZES:
            chat = f"bench:{size}"
            stored = await _fill(store, chat, size)
            sessions.append((size, chat, await store.current_session(chat), stored))
        samples: dict[int, list[float]] = {size: [] for size in SIZES}
        with progress(iterations, "round", "bench hygiene") as bar:
            for number in range(iterations):
                for size, chat, sid, _stored in sessions:
                    samples[size].append(await _decide(store, chat, sid))
                bar.update(number + 1)  # between rounds, outside the timed decisions
        rows = []
        for size, _chat, _sid, stored in sessions:
            values = sorted(samples[size])
            rows.append(
                {
                    "session_tokens": stored,
                    "iterations": iterations,
                    "p50_us": round(statistics.median(values) * 1e6, 1),
                    "p99_us": round(values[int(len(values) * 0.99) - 1] * 1e6, 1),
                }
            )
        base = rows[0]["p50_us"]
        for row in rows:
            row["p50_ratio"] = round(row["p50_us"] / base, 2)
        return {"rows": rows, "turn_reads": await _turn_reads(redis, prefix, sessions, TURN_READS)}
    finally:
        async for key in redis.scan_iter(match=every_key_pattern(prefix), count=1000):
            await redis.delete(key)
        await redis.aclose()


def table(rows: list[dict]) -> str:
    lines = ["| session tokens | p50 | p99 | p50 × (vs smallest) |", "|---:|---:|---:|---:|"]
    for row in rows:
        lines.append(
            f"| {row['session_tokens']:,} | {row['p50_us']:.0f} µs | {row['p99_us']:.0f} µs | {row['p50_ratio']:.2f} |"
        )
    return "\n".join(lines)


def reads_table(rows: list[dict]) -> str:
    lines = ["| session tokens | cache off p50 | cache on p50 | × |", "|---:|---:|---:|---:|"]
    for row in rows:
        lines.append(
            f"| {row['session_tokens']:,} | {row['cache_off_p50_ms']:.2f} ms | {row['cache_on_p50_ms']:.2f} ms "
            f"| {row['speedup']:.1f} |"
        )
    return "\n".join(lines)


#: Runs of the older commit with ``--baseline``, each between two runs of this checkout (noise and the
#: order of runs then fall on both sides alike).
BASELINE_ROUNDS = 3


def _medians(runs: list[dict]) -> list[tuple[str, float]]:
    """``(measurement, median p50 over the runs)`` for every measurement of :func:`measure`."""
    first = runs[0]
    out = [
        (
            f"hygiene decision, {row['session_tokens']:,} tokens, µs",
            statistics.median(run["rows"][i]["p50_us"] for run in runs),
        )
        for i, row in enumerate(first["rows"])
    ]
    for i, row in enumerate(first["turn_reads"]):
        for key, label in (("cache_off_p50_ms", "cache off"), ("cache_on_p50_ms", "cache on")):
            out.append(
                (
                    f"transcript read, {row['session_tokens']:,} tokens, {label}, ms",
                    statistics.median(run["turn_reads"][i][key] for run in runs),
                )
            )
    return out


def baseline_table(current: list[dict], older: list[dict], commit: str) -> str:
    """The median p50 of this checkout's runs beside that of ``commit``'s, measured alternately."""
    lines = [
        f"| measurement | this checkout ({len(current)} runs) | {commit} ({len(older)} runs) | × |",
        "|---|---:|---:|---:|",
    ]
    for (label, now), (_, then) in zip(_medians(current), _medians(older)):
        lines.append(f"| {label} | {now:.2f} | {then:.2f} | {now / then:.2f} |")
    return "\n".join(lines)


def main(out_dir: str, *, baseline: str | None = None) -> int:
    """The measurement; with ``baseline``, that commit's code measured alternately with this checkout's."""
    result = asyncio.run(measure())
    report = (
        "Hygiene decision latency (store.meta + decide), real Redis, interleaved:\n\n"
        + table(result["rows"])
        + "\n\nA turn's transcript read (snapshot after a turn appended two messages), "
        "transcript cache off and on, interleaved:\n\n" + reads_table(result["turn_reads"])
    )
    if baseline:
        from evals.baseline import run_at

        current, older = [result], []
        for _ in range(BASELINE_ROUNDS):
            older.append(run_at(baseline, "bench_hygiene"))
            current.append(asyncio.run(measure()))
        result["baseline"] = {"commit": baseline, "runs": older, "current_runs": current[1:]}
        report += (
            f"\n\nMedian p50s of this checkout and of {baseline}, run alternately in this command:\n\n"
            + baseline_table(current, older, baseline)
        )
    publish(out_dir, "bench_hygiene", {**result, "measured_at": time.strftime("%Y-%m-%d")}, report)
    return 0
