"""``foldgate bench memory``: Redis memory per stored token, for the live transcript and for the archive.

Sessions of a few sizes (generated tool-heavy sessions, the same generator as the
compaction eval) are stored through :class:`gateway.store.SessionStore`, measured, then
compacted once in place by the built-in compressor (default lean tail, deterministic
summary) and measured again. Memory is ``MEMORY USAGE key SAMPLES 0`` (exact, every
element) summed over the chat's keys, so other clients of a shared server do not
disturb it.

Message bodies live in one hash per session and are never rewritten, so after a
compaction the archived messages' bodies are the same bytes as before; the hash's
memory is attributed to archived and live messages in proportion to their stored
JSON length, and the id lists are counted where they belong (``active`` to the
transcript, ``archive`` to the archive).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agent.tokens import count_message
from evals.report import progress, publish

SIZES = (20_000, 100_000, 500_000)
SEED = 7
CONTEXT_LENGTH = 200_000
APPEND_BATCH = 100


async def _memory(redis: Any, key: str) -> int:
    return int(await redis.memory_usage(key, samples=0) or 0)


async def chat_memory(redis: Any, store: Any, chat: str, sid: str) -> dict[str, Any]:
    """Bytes held by each of the chat's keys, and the stored bodies' JSON length by id."""
    keys = store.keys(chat)
    named = {
        "meta": keys.meta(sid),
        "msg": keys.msg(sid),
        "active": keys.active(sid),
        "archive": keys.archive(sid),
        "session": keys.session,
        "fence": keys.fence,
    }
    sizes = {name: await _memory(redis, key) for name, key in named.items()}
    every = [key async for key in redis.scan_iter(match=f"{keys.base}:*", count=1000)]
    sizes["all_keys"] = sum([await _memory(redis, key) for key in every])
    bodies = await redis.hgetall(keys.msg(sid))
    return {
        "bytes": sizes,
        "body_chars": {message_id: len(body.encode()) for message_id, body in bodies.items()},
        "msg_encoding": await redis.object("encoding", keys.msg(sid)),
    }


def _stored(message: Mapping[str, Any]) -> dict[str, Any]:
    """A generated message as a person or the agent would hand it to the store (no store metadata)."""
    return {key: value for key, value in message.items() if key not in ("_id", "_ts", "_tok")}


async def measure_session(
    redis: Any, prefix: str, size: int, seed: int = SEED, context_length: int = CONTEXT_LENGTH
) -> dict[str, Any]:
    """Store one generated session, measure, compact in place once, measure again."""
    from agent.context_compressor import ContextCompressor
    from agent.settings import CompressionSettings
    from evals.fixtures.session import generate_session, session_name
    from gateway.store import SessionStore

    session = generate_session(session_name(size, seed), size, seed)
    store = SessionStore(redis, prefix)
    chat = f"bench:{session.name}"
    sid = await store.current_session(chat)
    lock = await store.acquire_lock(chat, 600)
    if lock is None:
        raise RuntimeError(f"{chat} is locked by another process")
    try:
        messages = [_stored(message) for message in session.messages]
        for start in range(0, len(messages), APPEND_BATCH):
            await store.append(chat, sid, messages[start : start + APPEND_BATCH], lock=lock)
        meta = await store.meta(chat, sid)
        before = await chat_memory(redis, store, chat, sid)

        engine = ContextCompressor(model="bench-model", context_length=context_length, settings=CompressionSettings())
        active = await store.active(chat, sid)
        compacted = await engine.compress(active, force=True)
        if [m.get("_id") for m in compacted] == [m["_id"] for m in active]:
            raise ValueError(
                f"{session.name}: the compressor kept the session whole at a {context_length:,}-token "
                "window; measure a larger session or a smaller window"
            )
        commit = await store.commit_compaction(
            chat, sid, compacted, lock=lock, in_place=True, compaction_id="bench-memory"
        )
        after_meta = await store.meta(chat, sid)
        after = await chat_memory(redis, store, chat, sid)
        archived = await store.archive(chat, sid)
    finally:
        await store.release_lock(lock)

    def per_token(nbytes: float, tokens: int) -> float | None:
        return round(nbytes / tokens, 2) if tokens else None

    transcript_bytes = before["bytes"]["msg"] + before["bytes"]["active"]
    raw_before = sum(before["body_chars"].values())
    archived_ids = set(commit.archived_ids)
    archived_tokens = sum(int(message.get("_tok") or count_message(message)) for message in archived)
    archived_raw = sum(n for message_id, n in after["body_chars"].items() if message_id in archived_ids)
    live_raw = sum(n for message_id, n in after["body_chars"].items() if message_id in set(commit.active_ids))
    raw_after = sum(after["body_chars"].values())
    msg_after = after["bytes"]["msg"]
    archive_bytes = msg_after * archived_raw / raw_after + after["bytes"]["archive"]
    live_bytes = msg_after * live_raw / raw_after + after["bytes"]["active"]
    return {
        "session": session.name,
        "messages": meta.count,
        "tokens": meta.tokens,
        "msg_encoding": before["msg_encoding"],
        "before": {
            "bytes": before["bytes"],
            "stored_json_bytes": raw_before,
            "transcript_bytes_per_token": per_token(transcript_bytes, meta.tokens),
            "chat_bytes_per_token": per_token(before["bytes"]["all_keys"], meta.tokens),
            "json_bytes_per_token": per_token(raw_before, meta.tokens),
        },
        "after": {
            "bytes": after["bytes"],
            "active_messages": after_meta.count,
            "active_tokens": after_meta.tokens,
            "archived_messages": len(archived),
            "archived_tokens": archived_tokens,
            "new_messages": len([i for i in commit.active_ids if i not in before["body_chars"]]),
            "stored_json_bytes": raw_after,
            "transcript_bytes_per_token": per_token(live_bytes, after_meta.tokens),
            "archive_bytes_per_token": per_token(archive_bytes, archived_tokens),
            "chat_bytes_per_stored_token": per_token(after["bytes"]["all_keys"], archived_tokens + after_meta.tokens),
            "compaction_added_bytes": after["bytes"]["all_keys"] - before["bytes"]["all_keys"],
        },
    }


async def measure(
    sizes: Sequence[int] = SIZES, seed: int = SEED, context_length: int = CONTEXT_LENGTH, redis_url: str | None = None
) -> dict[str, Any]:
    """``redis_url``: None picks 127.0.0.1:6379 when it answers; "" runs the embedded server."""
    from evals.bench_throughput import local_redis_url
    from gateway.server.lifecycle import connect_or_embed

    url = await local_redis_url() if redis_url is None else redis_url
    with tempfile.TemporaryDirectory(prefix="fg-bench-", ignore_cleanup_errors=True) as home:
        redis, embedded = await connect_or_embed(url or None, Path(home))
        try:
            return await _measure_sizes(redis, url, sizes, seed, context_length)
        finally:
            await redis.aclose()
            if embedded is not None:
                await embedded.stop()


async def _measure_sizes(redis: Any, url: str, sizes: Sequence[int], seed: int, context_length: int) -> dict[str, Any]:
    from evals.bench_throughput import describe_redis
    from gateway.store.keys import every_key_pattern

    prefix = f"fgbench-{uuid.uuid4().hex[:8]}"
    try:
        info = await redis.info("server")
        rows = []
        with progress(len(sizes), "session", "bench memory") as bar:
            for size in sizes:
                bar.update(len(rows), note=f"{size:,} tokens")
                rows.append(await measure_session(redis, prefix, size, seed, context_length))
            bar.update(len(rows), note="")
        return {
            "measured_at": time.strftime("%Y-%m-%d"),
            "redis": f"{describe_redis(url)}, version {info.get('redis_version', '?')}",
            "context_length": context_length,
            "seed": seed,
            "compressor": "ContextCompressor, lean tail (default), deterministic summary, in place",
            "rows": rows,
        }
    finally:
        keys = [key async for key in redis.scan_iter(match=every_key_pattern(prefix), count=1000)]
        for start in range(0, len(keys), 500):
            await redis.delete(*keys[start : start + 500])


def table(result: Mapping[str, Any]) -> str:
    lines = [
        f"Redis memory per stored token ({result['redis']}; MEMORY USAGE … SAMPLES 0 over the chat's keys; "
        f"one in-place compaction by {result['compressor']}, {result['context_length']:,}-token window).",
        "",
        "| session | messages | tokens | JSON B/token | before: transcript B/token | after: live tokens "
        "| after: live B/token | archived tokens | archive B/token | compaction added | chat total after |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        before, after = row["before"], row["after"]
        lines.append(
            f"| {row['session']} | {row['messages']:,} | {row['tokens']:,} | {before['json_bytes_per_token']:.2f} | "
            f"{before['transcript_bytes_per_token']:.2f} | {after['active_tokens']:,} | "
            f"{after['transcript_bytes_per_token']:.2f} | {after['archived_tokens']:,} | "
            f"{after['archive_bytes_per_token']:.2f} | {after['compaction_added_bytes'] / 1024:,.1f} KiB | "
            f"{after['bytes']['all_keys'] / 1024 / 1024:,.2f} MiB |"
        )
    return "\n".join(lines) + "\n"


def main(out_dir: str | Path, **options: Any) -> int:
    result = asyncio.run(measure(**options))
    publish(out_dir, "bench_memory", result, table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "evals/out"))
