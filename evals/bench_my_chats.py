"""``foldgate bench my_chats``: ``session_search`` scope "my chats" latency, one person's 50 chats and 200K messages.

A person who talks to the bot in their private chat and in 49 groups asks, from the private chat, about
something said anywhere: ``session_search`` with ``scope: "my chats"`` reads every conversation of every one
of those chats (:class:`gateway.person_history.PersonHistory`, one ``ChatHistory`` a chat). This stores such a
person in Redis through :class:`gateway.store.SessionStore` — 200K messages cycled from everyday chats
(:mod:`tests.fakes.everyday`) and the committed engineering sessions (``evals/fixtures/data``), chats of
uneven sizes, a ``/new`` in every fifth, each conversation compacted in place so all but its last
messages sit in its archive, as a long-lived chat's do — and the person's list of chats
(:class:`gateway.store.person_chats.PersonChats`); another person's private chat, sharing the groups, holds a
word that must never be found. It then times the real ``session_search`` handler of
:func:`agent.tools.recovery.recovery_tools` on ~20 queries of several kinds (planted facts, words, an
identifier, a quoted phrase, a question, date phrases, a regex):

- ``cold``: the first search of the process (every chat's archive read from Redis and made ready);
- ``warm``: p50 / p99 of every later search (archives kept; each chat's conversations, live lists and archive
  marks still read from Redis on every call), per kind and over all;
- ``reading``: of a warm search, the part spent reading the chats (``search_pieces``), Redis round trips included;
- ``this chat``: the same queries with the default scope, for comparison.

It also reports how long storing took, the planted facts' ranks, and the process's resident memory.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evals.report import progress, publish

PERSON = "tg:1000"
STRANGER = "tg:2000"
CHATS = 50
MESSAGES = 200_000
#: Timed warm passes over the queries.
RUNS = 5
#: Messages one append stores; messages a compaction leaves live in each conversation.
APPEND_BATCH = 2_000
KEEP_LIVE = 40
START = 1_735_689_600.0  # 2025-01-01
SPAN_SECONDS = 180 * 86_400.0
#: (chat index, share of the way into it, text, query): facts said once, to be found from the private chat.
FACTS = (
    (0, 0.1, "the staging database password hint is heron-forty-two", "staging database password hint"),
    (17, 0.2, "my sister's boat is called Saltwater Jenny, she moors it in Cork", "Saltwater Jenny boat"),
    (33, 0.5, "INC-20931 was caused by the expired TLS cert on edge-3", "INC-20931"),
    (49, 0.9, "the team dinner moved to Tuesday at the Lebanese place on Dock Street", "team dinner Dock Street"),
)
#: Said only in the stranger's private chat: any hit for it is a leak.
STRANGER_WORD = "zanzibarquokka"
QUERIES: tuple[tuple[str, str], ...] = (
    *(("planted fact", fact[3]) for fact in FACTS),
    ("one word", "pottery"),
    ("one word", "rollback"),
    ("one word", "recipe"),
    ("one word", "birthday"),
    ("identifier", "8577e17"),
    ("identifier", "OOM"),
    ("quoted phrase", '"brake pads"'),
    ("quoted phrase", '"team dinner"'),
    ("question", "When did Maya start the pottery class?"),
    ("question", "what was the migration that failed?"),
    ("date phrase", "what did I do last Saturday"),
    ("date phrase", "dentist in May"),
    ("regex", "/trace(back)?\\s/i"),
    ("several words", "deploy rollback redis migration"),
    ("no hit", STRANGER_WORD),
    ("no hit", "xylophone quasar"),
)


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, int(q * len(ordered) + 0.999999) - 1))] if ordered else 0.0


def summary_ms(seconds: Sequence[float]) -> dict[str, float]:
    return {name: round(quantile(seconds, q) * 1000, 1) for name, q in (("p50", 0.5), ("p99", 0.99), ("max", 1.0))}


def chat_sizes(chats: int, messages: int) -> list[int]:
    """Uneven sizes adding up to ``messages``: the private chat and a few groups large, most groups small."""
    weights = [8.0 if index == 0 else 1.0 + 6.0 / (1 + index % 7) for index in range(chats)]
    sizes = [max(10, int(messages * weight / sum(weights))) for weight in weights]
    sizes[0] += messages - sum(sizes)
    return sizes


def fact_chat(index: int, chats: int) -> int:
    """The chat a fact is said in, at the same share of the list with fewer chats than :data:`CHATS`."""
    return index * chats // CHATS


def chat_key(index: int) -> str:
    return PERSON if index == 0 else f"tg:-100{index:07d}"


def unique(message: dict[str, Any], suffix: str) -> None:
    """``message``'s tool call ids (or the id its result answers) made unique with ``suffix``."""
    if message.get("tool_calls"):
        message["tool_calls"] = [{**call, "id": f"{call.get('id')}{suffix}"} for call in message["tool_calls"]]
    if message.get("role") == "tool":
        message["tool_call_id"] = f"{message.get('tool_call_id')}{suffix}"


def generated(pool: Sequence[Mapping[str, Any]], index: int, size: int, chats: int) -> list[dict[str, Any]]:
    """Chat ``index``'s ``size`` messages cycled from ``pool`` (from its own offset), spread over the span; the
    person's lines and other members' lines marked as the gateway marks them, and its facts said in their place."""
    out = []
    offset = index * 977
    for number in range(size):
        cycle, at = divmod(offset + number, len(pool))
        message = {k: v for k, v in pool[at].items() if k not in ("_id", "_ts", "_tok")}
        if cycle or index:  # a tool call's id is the provider's own, never made twice: so it is here
            unique(message, f"-{index}.{cycle}")
        message["_ts"] = START + SPAN_SECONDS * number / size
        if message.get("role") == "user":
            who = PERSON if index == 0 or number % 3 == 0 else f"tg:{3000 + number % 5}"
            message["_user"], message["_from"] = who, "Pat" if who == PERSON else f"Member {who[-1]}"
        out.append(message)
    for chat, share, text, _query in FACTS:
        if fact_chat(chat, chats) == index and out:
            at = min(len(out) - 1, int(len(out) * share))
            out[at] = {"role": "user", "content": text, "_ts": out[at]["_ts"], "_user": PERSON, "_from": "Pat"}
    return out


async def store_conversation(store: Any, chat: str, sid: str, messages: list[dict[str, Any]]) -> None:
    """Append ``messages`` in batches, then fold all but the last few into the archive, as compaction does."""
    lock = await store.acquire_lock(chat, 600)
    if lock is None:
        raise RuntimeError(f"{chat} is locked by another process")
    try:
        for start in range(0, len(messages), APPEND_BATCH):
            await store.append(chat, sid, messages[start : start + APPEND_BATCH], lock=lock)
        if len(messages) > KEEP_LIVE:
            summary = {"role": "user", "content": "[summary] what was said before", "_synthetic": "summary"}
            kept = [summary, *messages[-KEEP_LIVE:]]
            await store.commit_compaction(chat, sid, kept, lock=lock, in_place=True, compaction_id=f"bench-{sid}")
    finally:
        await store.release_lock(lock)


async def store_chat(store: Any, chats: Any, index: int, messages: list[dict[str, Any]]) -> None:
    """One chat: one conversation, or two (a ``/new`` partway) in every fifth; the person's chats noted."""
    chat = chat_key(index)
    parts = [messages[: len(messages) * 2 // 5], messages[len(messages) * 2 // 5 :]] if index % 5 == 4 else [messages]
    for number, part in enumerate(parts):
        if number:
            lock = await store.acquire_lock(chat, 60)
            await store.new_session(chat, lock=lock)
            await store.release_lock(lock)
        await store_conversation(store, chat, await store.current_session(chat), part)
    await chats.note(PERSON, chat, private=index == 0, when=float(messages[-1]["_ts"]))


async def store_world(store: Any, chats: Any, pool: Sequence[Mapping[str, Any]], count: int, total: int) -> float:
    """Every chat of the person, and the stranger's private chat; how long storing took, in seconds."""
    started = time.perf_counter()
    with progress(count, "chat", "bench my_chats: storing") as bar:
        for index, size in enumerate(chat_sizes(count, total)):
            await store_chat(store, chats, index, generated(pool, index, size, count))
            bar.update(index + 1)
    secret = [{"role": "user", "content": f"my PIN word is {STRANGER_WORD}", "_user": STRANGER, "_ts": START}]
    await store_conversation(store, STRANGER, await store.current_session(STRANGER), secret)
    await chats.note(STRANGER, STRANGER, private=True, when=START)
    for index in range(1, min(count, 4)):  # the stranger shares groups with the person
        await chats.note(STRANGER, chat_key(index), private=False, when=START)
    return time.perf_counter() - started


async def timed(tool: Any, args: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    result = json.loads(await tool.handler(args))
    return time.perf_counter() - started, result


def fact_ranks(results: Mapping[str, dict[str, Any]], chats: int) -> list[dict[str, Any]]:
    """Where each planted fact came in its query's hits (1: first), and from which chat."""
    ranks = []
    for index, _share, text, query in FACTS:
        hits = results.get(query, {}).get("hits", [])
        rank = next((n for n, hit in enumerate(hits, 1) if text[:40] in hit["snippet"]), None)
        chat = hits[rank - 1].get("chat") if rank else None
        ranks.append({"query": query, "said_in": chat_key(fact_chat(index, chats)), "rank": rank, "found_in": chat})
    return ranks


async def measure_searches(store: Any, chats: Any, count: int, runs: int) -> dict[str, Any]:
    from agent.tools.recovery import recovery_tools
    from evals.bench_search import rss_mb
    from gateway.person_history import PersonHistory
    from gateway.session_source import ChatHistory

    sid = await store.current_session(PERSON)
    everywhere = PersonHistory(store, chats, PERSON, PERSON, sid)
    search = recovery_tools(ChatHistory(store, PERSON, sid, every_session=True), everywhere=everywhere)[0]
    row: dict[str, Any] = {"rss_mb_before": rss_mb()}
    cold, first = await timed(search, {"query": QUERIES[0][1], "scope": "my chats"})
    row["cold_ms"], row["cold_hits"] = round(cold * 1000, 1), len(first["hits"])
    row["rss_mb_after_cold"] = rss_mb()
    by_kind: dict[str, list[float]] = {}
    results: dict[str, dict[str, Any]] = {}
    for _ in range(runs):
        for kind, query in QUERIES:
            seconds, results[query] = await timed(search, {"query": query, "scope": "my chats"})
            by_kind.setdefault(kind, []).append(seconds)
    reading = []
    for _ in range(runs):
        started = time.perf_counter()
        await everywhere.search_pieces()
        reading.append(time.perf_counter() - started)
    here = [(await timed(search, {"query": query}))[0] for _ in range(runs) for _kind, query in QUERIES]
    row["warm_ms"] = summary_ms([s for seconds in by_kind.values() for s in seconds])
    row["warm_by_kind_ms"] = {kind: summary_ms(seconds) for kind, seconds in by_kind.items()}
    row["hits_by_query"] = {query: len(result.get("hits", [])) for query, result in results.items()}
    row["reading_ms"] = summary_ms(reading)
    row["this_chat_ms"] = summary_ms(here)
    row["facts"] = fact_ranks(results, count)
    row["leaked_hits"] = len(results[STRANGER_WORD].get("hits", []))
    row["rss_mb_after"] = rss_mb()
    return row


async def measure(
    chats: int = CHATS, messages: int = MESSAGES, runs: int = RUNS, redis_url: str | None = None
) -> dict[str, Any]:
    """``redis_url``: None picks 127.0.0.1:6379 when it answers; "" runs the embedded server."""
    from evals.bench_throughput import local_redis_url
    from gateway.server.lifecycle import connect_or_embed

    url = await local_redis_url() if redis_url is None else redis_url
    with tempfile.TemporaryDirectory(prefix="fg-bench-", ignore_cleanup_errors=True) as home:
        redis, embedded = await connect_or_embed(url or None, Path(home))
        try:
            return await _measure_on(redis, url, chats, messages, runs)
        finally:
            await redis.aclose()
            if embedded is not None:
                await embedded.stop()


async def _measure_on(redis: Any, url: str, count: int, total: int, runs: int) -> dict[str, Any]:
    from evals.bench_search import message_pool
    from evals.bench_throughput import describe_redis
    from gateway.store import SessionStore
    from gateway.store.channel import channel_for
    from gateway.store.keys import every_key_pattern
    from gateway.store.person_chats import PersonChats

    prefix = f"fgbench-{uuid.uuid4().hex[:8]}"
    channel = channel_for(redis)
    try:
        store = SessionStore(redis, prefix, channel=channel)
        chats = PersonChats(channel, prefix)
        pool = message_pool()
        stored_seconds = await store_world(store, chats, pool, count, total)
        info = await redis.info("server")
        row = await measure_searches(store, chats, count, runs)
        return {
            "measured_at": time.strftime("%Y-%m-%d"),
            "redis": f"{describe_redis(url)}, version {info.get('redis_version', '?')}",
            "chats": count,
            "messages": sum(chat_sizes(count, total)),
            "runs": runs,
            "queries": len(QUERIES),
            "store_seconds": round(stored_seconds, 1),
            "store_messages_per_second": round(sum(chat_sizes(count, total)) / max(stored_seconds, 1e-9)),
            **row,
        }
    finally:
        keys = [key async for key in redis.scan_iter(match=every_key_pattern(prefix), count=1000)]
        for start in range(0, len(keys), 500):
            await redis.delete(*keys[start : start + 500])
        await channel.aclose()


def table(result: Mapping[str, Any]) -> str:
    def cell(value: Mapping[str, float]) -> str:
        return f"{value['p50']:.1f} / {value['p99']:.1f}"

    lines = [
        "# session_search, scope “my chats”",
        "",
        f"{result['messages']:,} messages in {result['chats']} chats of one person ({result['redis']}); "
        f"stored in {result['store_seconds']} s ({result['store_messages_per_second']:,} messages/s). "
        f"{result['queries']} queries, {result['runs']} warm passes. Times in ms, p50 / p99.",
        "",
        "| search | ms |",
        "|---|---:|",
        f"| cold (first of the process) | {result['cold_ms']:.1f} |",
        f"| warm, every query | {cell(result['warm_ms'])} |",
        f"| warm, reading the chats (search_pieces) | {cell(result['reading_ms'])} |",
        f"| this chat only (default scope), warm | {cell(result['this_chat_ms'])} |",
        "",
        "| kind | warm ms |",
        "|---|---:|",
        *(f"| {kind} | {cell(value)} |" for kind, value in result["warm_by_kind_ms"].items()),
        "",
        "| planted fact | said in | rank | found in |",
        "|---|---|---:|---|",
        *(f"| {f['query']} | {f['said_in']} | {f['rank'] or '—'} | {f['found_in'] or '—'} |" for f in result["facts"]),
        "",
        f"Hits for the word said only in another person's private chat: {result['leaked_hits']}. "
        f"Resident memory: {result['rss_mb_before']} MB before, {result['rss_mb_after_cold']} MB after the cold "
        f"search, {result['rss_mb_after']} MB at the end.",
    ]
    return "\n".join(lines) + "\n"


def main(out_dir: str | Path, **options: Any) -> int:
    result = asyncio.run(measure(**options))
    publish(out_dir, "bench_my_chats", result, table(result))
    return 0 if result["leaked_hits"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "evals/out"))
