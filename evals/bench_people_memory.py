"""``foldgate bench people_memory``: what people's memory adds to each message's reads and each compaction's writes.

Every request of a turn carries the memory block of the person it answers (:mod:`gateway.memory.block`), and
every compaction keeps what the folded messages say about the people who wrote them
(:mod:`gateway.memory.folds`). Both are measured here on one Redis, through the pipelined channel the gateway
uses, side by side with what a turn and a compaction pay anyway, so the added cost reads as a ratio (a shared
machine drifts by tens of percent; its absolute figures do not carry over to another run).

- **Read, per message**, at 10 and 1,000 entries kept for the person in their private chat, in a group where
  the speaker has 1,000 entries learned there and the group 100 of its own, and in a group where the speaker
  has 1,000 private entries and only 10 learned there: one ``PING`` and one ``SessionStore.meta()`` (the
  baseline), the raw ``HGETALL`` of the entries the block reads and ``MemoryStore.entries()`` over the same
  keys (Redis's part against parsing and sorting), the steady-state ``MemoryReader.block()`` (the view chosen
  earlier in the session) and a session's first ``block()`` with the ``touch()`` of what it chose. One
  message's timings are taken one after another in a rotating order, so drift hits every column alike. The
  block's size in tokens is given beside them.
- **Write, per compaction**, folds of 200 and 2,000 messages of everyday chatter (:mod:`tests.fakes.everyday`)
  with five self-statements each, into a memory of 10 and 1,000 entries: ``fold_records`` over the fold (its
  per-text cache emptied first: a fold's messages are new to it), the compaction commit with the memory fields
  and without them (the baseline, in a chat of its own), and ``FoldMemory.publish`` of the records. What a
  publish added is removed afterwards (untimed), so the memory keeps its size from one compaction to the next.

p50 and p99 in milliseconds. Every key is under a fresh prefix, deleted at the end.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from evals.bench_search import quantile
from evals.report import progress, publish

#: Entries kept for the person in the private cases.
ENTRIES = (10, 1_000)
#: The group case: the speaker's entries learned in the group, and the group's own.
GROUP = (1_000, 100)
#: Messages a compaction folds.
FOLDS = (200, 2_000)
MESSAGES = 500
COMPACTIONS = 50
SEED = 7
WARM_UP = 10
#: The chat model's window the blocks are made for: large enough that memory.max_tokens alone bounds them.
WINDOW = 128_000
#: What people say about themselves that a fold keeps (:func:`agent.compaction.memory_notes.memory_notes`).
STATEMENTS = (
    "I'm vegetarian.",
    "Call me Dee.",
    "Please always answer in metric units.",
    "I'm allergic to peanuts.",
    "I prefer tea over coffee.",
    "My daughter is called Mira.",
    "I live in Porto.",
    "I work as a nurse.",
    "I never eat pork.",
)
_THINGS = ("tea", "jazz", "Porto", "cycling", "the night shift", "spicy food", "Mira", "pottery", "metric units")
_SAYINGS = (
    "I'm fond of {}.",
    "Please keep answers short when I ask about {}.",
    "I can't stand {}.",
    "Remind me that I like {}.",
    "I'm learning more about {} this year.",
    "My partner loves {}.",
    "I always mention {} at dinner.",
    "Never suggest {} to me.",
)
_GROUP_CHATS = ("-1009001", "-1009002")
_BASELINE_CHAT = "tg:-1009900"


def summary_ms(nanos: Sequence[int]) -> dict[str, float]:
    seconds = [value / 1e9 for value in nanos]
    return {"p50": round(quantile(seconds, 0.5) * 1000, 3), "p99": round(quantile(seconds, 0.99) * 1000, 3)}


@dataclass(frozen=True)
class ReadCase:
    """Whose entries a message's block reads, and how many each key holds."""

    name: str
    user: str
    chat_id: str
    private: int = 0
    here: int = 0
    group_own: int = 0


def read_cases(entries: Sequence[int], group: tuple[int, int]) -> list[ReadCase]:
    cases = [ReadCase(f"private, {n:,} entries", f"{101 + i}", f"{101 + i}", private=n) for i, n in enumerate(entries)]
    cases.append(ReadCase(f"group, {group[0]:,} speaker's + {group[1]:,} group's", "201", _GROUP_CHATS[0], 0, *group))
    few, many = min(entries), max(entries)
    name = f"group, speaker has {many:,} private + {few:,} here"
    cases.append(ReadCase(name, "202", _GROUP_CHATS[1], many, few, few))
    return cases


def _entry_text(number: int, created: float, rng: random.Random) -> tuple[str, str]:
    """An entry as the store would hold it: a compaction's quoted sentence with its day, or a person's own line."""
    saying = _SAYINGS[number % len(_SAYINGS)].format(_THINGS[(number // len(_SAYINGS)) % len(_THINGS)])
    if rng.random() < 0.6:
        return f'"{saying}" (said {time.strftime("%Y-%m-%d", time.gmtime(created))})', "compaction"
    return f"{saying.rstrip('.')} (noted {time.strftime('%d %b %Y', time.gmtime(created))})", "remember"


async def fill(ctx: Bench, person: str, scope: str, count: int, chat: str) -> None:
    """Keep ``count`` entries for ``person`` in ``scope``, created hours apart over the past months."""
    from gateway.store.memory import MemoryStore

    rng = random.Random(f"{SEED}:{person}:{scope}")
    start = time.time() - 3 * 3600.0 * (count + 1)
    made = iter(start + 3 * 3600.0 * i for i in range(count))
    store = MemoryStore(ctx.channel, ctx.prefix, clock=lambda: next(made))
    calls: list[Awaitable[Any]] = []
    for number in range(count):
        text, source = _entry_text(number, start + 3 * 3600.0 * number, rng)
        calls.append(store.add(person, scope, text, source=source, chat=chat, message_id=str(number)))  # type: ignore[arg-type]
    for first in range(0, count, 200):
        await asyncio.gather(*calls[first : first + 200])
    kept = len(await store.entries(person, scope))
    if kept != count:
        raise RuntimeError(f"{person} keeps {kept} entries in {scope}, not {count}: the generated texts repeat")


@dataclass
class Bench:
    """The run's Redis, stores and prefix."""

    redis: Any
    channel: Any
    prefix: str
    store: Any
    memory: Any
    max_tokens: int

    async def drop_chat(self, chat: str) -> None:
        from gateway.store.keys import glob_escape

        base = self.store.keys(chat).base
        keys = [key async for key in self.redis.scan_iter(match=f"{glob_escape(base)}:*", count=1000)]
        if keys:
            await self.redis.delete(*keys)


async def _timed_rounds(probes: Mapping[str, Callable[[], Awaitable[Any]]], rounds: int) -> dict[str, list[int]]:
    """Each probe once per round, in an order rotating from round to round."""
    names = list(probes)
    timings: dict[str, list[int]] = {name: [] for name in names}
    for round_number in range(rounds + WARM_UP):
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            started = time.perf_counter_ns()
            await probes[name]()
            if round_number >= WARM_UP:
                timings[name].append(time.perf_counter_ns() - started)
    return timings


async def measure_read(ctx: Bench, case: ReadCase, messages: int) -> dict[str, Any]:
    from gateway.access.roles import person_of
    from gateway.memory.block import MemoryReader
    from gateway.memory.scopes import is_private, scope_of
    from gateway.platforms.base import IncomingMessage
    from gateway.store.memory import PRIVATE
    from gateway.store.meta import SessionMeta

    message = IncomingMessage(
        platform="tg", chat_id=case.chat_id, user_id=case.user, user_name="Ana", update_id="1", text="hi"
    )
    person, scope, chat = person_of(message), scope_of(message), message.chat
    await fill(ctx, person, PRIVATE, case.private, chat if is_private(message) else f"tg:{case.user}")
    if not is_private(message):
        await fill(ctx, person, scope, case.here, chat)
        await fill(ctx, "", scope, case.group_own, chat)
    reader = MemoryReader(ctx.memory, ctx.max_tokens)
    sid = await ctx.store.current_session(chat)
    lock = await ctx.store.acquire_lock(chat, 600)
    if lock is None:
        raise RuntimeError(f"{chat} is locked by another process")
    try:
        said = [{"role": "user", "content": "hi", "_user": person}, {"role": "assistant", "content": "Hello Ana!"}]
        await ctx.store.append(chat, sid, said, lock=lock)
        first = await reader.block(message, await ctx.store.meta(chat, sid), WINDOW)
        await ctx.store.update_meta(chat, sid, lock=lock, memory_view=first.view)
    finally:
        await ctx.store.release_lock(lock)
    steady_meta = await ctx.store.meta(chat, sid)
    steady = await reader.block(message, steady_meta, WINDOW)
    reads = [(person, scope)] if is_private(message) else [("", scope), (person, scope)]
    hashes = [ctx.memory.keys(owner, where)[0] for owner, where in reads]

    async def first_call() -> None:
        await reader.used(await reader.block(message, SessionMeta(session_id=sid), WINDOW))

    async def hgetall() -> None:
        for key in hashes:
            await ctx.channel.call("HGETALL", key)

    async def entries() -> None:
        for owner, where in reads:
            await ctx.memory.entries(owner, where)

    probes: dict[str, Callable[[], Awaitable[Any]]] = {
        "ping": lambda: ctx.channel.call("PING"),
        "meta": lambda: ctx.store.meta(chat, sid),
        "hgetall": hgetall,
        "entries": entries,
        "steady": lambda: reader.block(message, steady_meta, WINDOW),
        "first": first_call,
    }
    timings = await _timed_rounds(probes, messages)
    ms = {name: summary_ms(values) for name, values in timings.items()}
    base = ms["meta"]["p50"] or 1e-9
    return {
        "case": case.name,
        # What the block's reads parse: every entry of each hash read, of any scope.
        "entries_parsed": sum([int(await ctx.channel.call("HLEN", key)) for key in hashes]),
        "messages": messages,
        "ms": ms,
        "steady_per_ping": round(ms["steady"]["p50"] / (ms["ping"]["p50"] or 1e-9), 1),
        "steady_per_meta": round(ms["steady"]["p50"] / base, 1),
        "first_per_meta": round(ms["first"]["p50"] / base, 1),
        "tokens_steady": steady.tokens,
        "tokens_first": first.tokens,
        "shown": len(first.chosen),
        "left_out": steady.left_out,
    }


def fold_messages(pool: Sequence[Mapping[str, Any]], size: int, offset: int, person: str) -> list[dict[str, Any]]:
    """``size`` messages of chatter from ``offset`` in ``pool``, the person's carrying ``_user``, with five
    self-statements spread through them; as a person and a bot hand them to the store (no store fields)."""
    out: list[dict[str, Any]] = []
    for i in range(size):
        message = {k: v for k, v in pool[(offset + i) % len(pool)].items() if k not in ("_id", "_ts", "_tok")}
        if message["role"] == "user":
            message["_user"] = person
        out.append(message)
    for n in range(5):
        statement = STATEMENTS[(offset + n) % len(STATEMENTS)]
        out[(n * 2 + 1) * size // 10] = {"role": "user", "content": f"oh and {statement}", "_user": person}
    return out


async def _session(ctx: Bench, chat: str, messages: list[dict[str, Any]]) -> tuple[str, Any]:
    sid = await ctx.store.current_session(chat)
    lock = await ctx.store.acquire_lock(chat, 600)
    if lock is None:
        raise RuntimeError(f"{chat} is locked by another process")
    for first in range(0, len(messages), 200):
        await ctx.store.append(chat, sid, messages[first : first + 200], lock=lock)
    return sid, lock


def _compacted(live: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    from agent.messages import SUMMARY_KEY

    summary = {"role": "user", "content": "[Summary of the earlier conversation: everyday chatter.]"}
    return [{**summary, SUMMARY_KEY: True}, *(dict(message) for message in live)]


def _as_new_texts() -> None:
    """Empty the per-text cache of :func:`~agent.compaction.memory_notes.memory_notes`: a compaction folds each
    message once, so its texts are new to it, while the generated chatter repeats its phrases far more than
    people do (and the folds of one row overlap)."""
    from agent.compaction import memory_notes

    clear = getattr(getattr(memory_notes, "_statements", None), "cache_clear", None)
    if clear is not None:
        clear()


async def compaction_round(ctx: Bench, fold: list[dict[str, Any]], person: str, chat: str) -> dict[str, int]:
    """One compaction of ``fold`` in ``chat`` with memory, and one in the baseline chat without; timings in ns."""
    import copy

    from gateway.events import EventBus
    from gateway.memory.folds import FoldMemory, fold_records, pending_after
    from gateway.store.memory import PRIVATE

    spent: dict[str, int] = {}
    live = [
        {"role": "user", "content": "so what's new?", "_user": person},
        {"role": "assistant", "content": "Not much."},
    ]
    for where in (chat, _BASELINE_CHAT):
        messages = [*copy.deepcopy(fold), *copy.deepcopy(live)]
        sid, lock = await _session(ctx, where, messages)
        folded, tail = messages[: len(fold)], messages[len(fold) :]
        try:
            fields: dict[str, Any] = {"engine_state": {"compression_count": 1}}
            if where == chat:
                _as_new_texts()
                started = time.perf_counter_ns()
                records = fold_records(cast(list[Any], folded), chat=chat, scope=PRIVATE)
                spent["fold_records"] = time.perf_counter_ns() - started
                spent["records"] = len(records)
                meta = await ctx.store.meta(chat, sid)
                fields |= {"memory_pending": pending_after(meta, records), "memory_view": None}
            started = time.perf_counter_ns()
            await ctx.store.commit_compaction(
                where, sid, _compacted(tail), lock=lock, in_place=True, compaction_id="bench", meta=fields
            )
            spent["commit_memory" if where == chat else "commit_baseline"] = time.perf_counter_ns() - started
            if where == chat:
                started = time.perf_counter_ns()
                spent["added"] = await FoldMemory(ctx.store, ctx.memory, EventBus()).publish(chat, sid, lock, "tg")
                spent["publish"] = time.perf_counter_ns() - started
                for record in records:  # the memory keeps its size for the next compaction
                    await ctx.memory.remove(person, record["text"], PRIVATE)
        finally:
            await ctx.store.release_lock(lock)
            await ctx.drop_chat(where)
    return spent


async def measure_write(
    ctx: Bench, pool: Sequence[Mapping[str, Any]], fold_size: int, user: str, kept: int, compactions: int
) -> dict[str, Any]:
    person, chat = f"tg:{user}", f"tg:{user}"
    runs: list[dict[str, int]] = []
    for number in range(compactions + 1):  # the first warms up (compiled patterns, loaded scripts), untimed
        fold = fold_messages(pool, fold_size, number * 37, person)
        runs.append(await compaction_round(ctx, fold, person, chat))
    runs = runs[1:]
    ms = {name: summary_ms([run[name] for run in runs]) for name in runs[0] if name not in ("records", "added")}
    added = ms["fold_records"]["p50"] + ms["commit_memory"]["p50"] - ms["commit_baseline"]["p50"] + ms["publish"]["p50"]
    return {
        "folded_messages": fold_size,
        "entries_kept": kept,
        "entries_after": await ctx.memory.count(person),
        "compactions": compactions,
        "records": round(sum(run["records"] for run in runs) / len(runs), 1),
        "new_entries": round(sum(run["added"] for run in runs) / len(runs), 1),
        "ms": ms,
        "added_ms_p50": round(added, 3),
        "added_per_commit": round(added / (ms["commit_baseline"]["p50"] or 1e-9), 2),
    }


def chatter_pool(messages: int) -> list[dict[str, Any]]:
    """Everyday conversations, one after another, until there are ``messages`` of them."""
    from tests.fakes.everyday import conversation

    pool: list[dict[str, Any]] = []
    seed = 1
    while len(pool) < messages:
        pool += conversation(seed).messages
        seed += 1
    return pool


async def measure(
    redis_url: str | None = None,
    *,
    entries: Sequence[int] = ENTRIES,
    group: tuple[int, int] = GROUP,
    folds: Sequence[int] = FOLDS,
    messages: int = MESSAGES,
    compactions: int = COMPACTIONS,
) -> dict[str, Any]:
    """``redis_url``: None takes 127.0.0.1:6379 when it answers, else an embedded server for the run."""
    from redis.asyncio import Redis

    from evals.bench_throughput import describe_redis
    from evals.redis_target import bench_redis
    from gateway.config.memory import MemorySettings
    from gateway.store import SessionStore
    from gateway.store.channel import channel_for
    from gateway.store.keys import every_key_pattern
    from gateway.store.memory import MemoryStore

    async with bench_redis(redis_url) as url:
        redis = Redis.from_url(url, decode_responses=True)
        channel = channel_for(redis)
        prefix = f"fgbench-{uuid.uuid4().hex[:8]}"
        store = SessionStore(redis, prefix, channel=channel)
        memory = MemoryStore(channel, prefix, max_entry_chars=MemorySettings().max_entry_chars)
        ctx = Bench(redis, channel, prefix, store, memory, MemorySettings().max_tokens)
        try:
            info = await redis.info("server")
            result: dict[str, Any] = {
                "measured_at": time.strftime("%Y-%m-%d"),
                "redis": f"{describe_redis(url)}, version {info.get('redis_version', '?')}",
                "channel": type(channel).__name__,
                "max_tokens": ctx.max_tokens,
                "read": await _reads(ctx, read_cases(entries, group), messages),
            }
            result["write"] = await _writes(ctx, entries, folds, compactions)
            return result
        finally:
            stale = [key async for key in redis.scan_iter(match=every_key_pattern(prefix), count=1000)]
            for first in range(0, len(stale), 500):
                await redis.delete(*stale[first : first + 500])
            await channel.aclose()
            await redis.aclose()


async def _reads(ctx: Bench, cases: Sequence[ReadCase], messages: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with progress(len(cases), "case", "bench people_memory: read") as bar:
        for case in cases:
            bar.update(len(rows), note=case.name)
            rows.append(await measure_read(ctx, case, messages))
            await ctx.drop_chat(f"tg:{case.chat_id}")
        bar.update(len(rows), note="")
    return rows


async def _writes(ctx: Bench, entries: Sequence[int], folds: Sequence[int], compactions: int) -> list[dict[str, Any]]:
    pool = chatter_pool(max(folds) * 2)
    rows: list[dict[str, Any]] = []
    with progress(len(folds) * len(entries), "case", "bench people_memory: write") as bar:
        for fold in folds:
            for index, kept in enumerate(entries):  # the private cases' people, their entries still kept
                bar.update(len(rows), note=f"{fold:,} folded, {kept:,} kept")
                rows.append(await measure_write(ctx, pool, fold, f"{101 + index}", kept, compactions))
        bar.update(len(rows), note="")
    return rows


def _cell(value: Mapping[str, float]) -> str:
    return f"{value['p50']:.2f} / {value['p99']:.2f}"


def table(result: Mapping[str, Any]) -> str:
    lines = [
        "# People's memory: the cost of reading and writing it",
        "",
        f"p50 / p99 in ms, {result['redis']}, through {result['channel']}; memory.max_tokens {result['max_tokens']:,}.",
        "",
        "Read, per message (the timings of one message taken in turn):",
        "",
        "| case | entries parsed | PING | meta() | HGETALL | entries() | block, steady | block + touch, first "
        "| steady / PING | steady / meta | first / meta | tokens | shown / left out |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["read"]:
        ms = row["ms"]
        lines.append(
            f"| {row['case']} | {row['entries_parsed']:,} | {_cell(ms['ping'])} | {_cell(ms['meta'])} | "
            f"{_cell(ms['hgetall'])} | {_cell(ms['entries'])} | {_cell(ms['steady'])} | {_cell(ms['first'])} | "
            f"{row['steady_per_ping']}× | {row['steady_per_meta']}× | {row['first_per_meta']}× | "
            f"{row['tokens_steady']:,} | {row['shown']} / {row['left_out']:,} |"
        )
    lines += [
        "",
        "Write, per compaction (added = fold_records + commit with memory − commit without + publish, at p50):",
        "",
        "| folded | entries kept | records | new | fold_records | commit, no memory | commit, with memory | publish "
        "| added | added / commit |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["write"]:
        ms = row["ms"]
        lines.append(
            f"| {row['folded_messages']:,} | {row['entries_kept']:,} | {row['records']} | {row['new_entries']} | "
            f"{_cell(ms['fold_records'])} | {_cell(ms['commit_baseline'])} | {_cell(ms['commit_memory'])} | "
            f"{_cell(ms['publish'])} | {row['added_ms_p50']:.2f} | {row['added_per_commit']}× |"
        )
    return "\n".join(lines) + "\n"


def main(out_dir: str | Path, **options: Any) -> int:
    result = asyncio.run(measure(**options))
    publish(out_dir, "bench_people_memory", result, table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "evals/out"))
