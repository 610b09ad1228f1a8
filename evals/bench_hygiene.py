"""``foldgate bench hygiene``: the cost of the gateway's hygiene decision against session size (B3).

The decision runs before every incoming message, so it must not grow with the session:
it reads the session meta (one HGETALL of a bounded hash) and compares counters. Both
sessions live in the same real Redis and are measured interleaved in one run, so the
machine's noise hits them alike; the figure that matters is the ratio of the p50s.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from pathlib import Path

from redis.asyncio import Redis

from gateway import hygiene
from gateway.redis_server import EmbeddedRedis
from gateway.store import SessionStore
from evals.report import publish

SIZES = (1_000, 500_000)
ITERATIONS = 3_000
CONTEXT_LENGTH = 1_000_000
#: One stored message of about 500 tokens of varied text.
_WORDS = "deploy canary rollback latency ledger billing token cache webhook retry shard replica".split()


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


async def measure(redis_url: str | None = None, iterations: int = ITERATIONS) -> list[dict]:
    embedded = None
    if redis_url is None:
        probe = Redis.from_url("redis://127.0.0.1:6379/0")
        try:
            await probe.ping()
            redis_url = "redis://127.0.0.1:6379/0"
        except Exception:
            embedded = EmbeddedRedis(Path("/tmp") / f"fg-bench-{uuid.uuid4().hex[:8]}")
            redis_url = await embedded.start()
        finally:
            await probe.aclose()
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
        for _ in range(iterations):
            for size, chat, sid, _stored in sessions:
                samples[size].append(await _decide(store, chat, sid))
        rows = []
        for size, chat, _sid, stored in sessions:
            values = sorted(samples[size])
            rows.append({
                "session_tokens": stored,
                "iterations": iterations,
                "p50_us": round(statistics.median(values) * 1e6, 1),
                "p99_us": round(values[int(len(values) * 0.99) - 1] * 1e6, 1),
            })
        base = rows[0]["p50_us"]
        for row in rows:
            row["p50_ratio"] = round(row["p50_us"] / base, 2)
        return rows
    finally:
        async for key in redis.scan_iter(match=f"{prefix}:*", count=1000):
            await redis.delete(key)
        await redis.aclose()
        if embedded:
            await embedded.stop()


def table(rows: list[dict]) -> str:
    lines = ["| session tokens | p50 | p99 | p50 × (vs smallest) |", "|---:|---:|---:|---:|"]
    for row in rows:
        lines.append(f"| {row['session_tokens']:,} | {row['p50_us']:.0f} µs | {row['p99_us']:.0f} µs | {row['p50_ratio']:.2f} |")
    return "\n".join(lines)


def main(out_dir: str) -> int:
    rows = asyncio.run(measure())
    report = "Hygiene decision latency (store.meta + decide), real Redis, interleaved:\n\n" + table(rows)
    publish(out_dir, "bench_hygiene", {"rows": rows, "measured_at": time.strftime("%Y-%m-%d")}, report)
    return 0
