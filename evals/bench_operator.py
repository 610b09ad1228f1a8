"""``foldgate bench operator``: how fast the operator view answers with thousands of chats in Redis.

A gateway with the web chat and the operator view (as ``foldgate run`` starts them) answers one
message in each of 5,000 chats (a zero-latency fake model on loopback), so every chat has a
session, a meta, an activity log and totals written by the real message path. One chat also gets
a full activity log (1,000 turns and 40 compactions). Then the operator's pages are fetched over
HTTP, each several times, and the wall time of the whole answer is reported (median and worst):

- the list of chats, first page, sorted by latest activity (the index answers it: only the page's
  50 chats are read), and sorted by cost or by context (every chat's figures are read and sorted);
- the list's last page;
- one chat's page with a full log (charts, compactions, turn log) and its chart fragment.

The goal: the first page of the list renders in under a second with 5,000 chats.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

from evals.report import progress, publish

CHATS = 5_000
REPEATS = 7
INTAKE_BATCH = 250
FULL_LOG_TURNS = 1_000
GOAL_SECONDS = 1.0


async def _fill(web: Any, chats: int) -> None:
    """One message in each chat, answered by the running gateway."""
    from gateway.platforms.base import IncomingMessage

    runner = web.gateway.runner
    with progress(chats, "chat", "bench operator: filling") as bar:
        for start in range(0, chats, INTAKE_BATCH):
            batch = range(start, min(chats, start + INTAKE_BATCH))
            await asyncio.gather(
                *(
                    runner.intake(
                        IncomingMessage(
                            platform="web",
                            chat_id=f"bench-chat-{number:06d}",
                            update_id="1",
                            text=f"chat {number}: how is the nightly export doing?",
                        )
                    )
                    for number in batch
                )
            )
            await runner.wait_idle(timeout=600)
            bar.update(batch.stop)


async def _full_log(web: Any, chat: str) -> None:
    """A chat whose activity log is full: turns growing the context, a compaction every 25 turns."""
    from gateway.events import CompressEvent, TurnEvent

    log, now, context = web.gateway.activity, time.time() - FULL_LOG_TURNS * 30, 4_000
    for number in range(FULL_LOG_TURNS):
        context += 3_000
        await log.record(
            TurnEvent(
                platform="tg",
                chat=chat,
                session_id="s",
                prompt_tokens=context,
                completion_tokens=300,
                cache_read_tokens=int(context * 0.9),
                cache_write_tokens=300,
                latency_ms=900,
                model="claude-sonnet-4",
                cost_usd=0.01,
                saved_usd=0.02,
                ts=now + number * 30,
                context_tokens=context,
                context_window=200_000,
            )
        )
        if number % 25 == 24:
            await log.record(
                CompressEvent(
                    platform="tg",
                    chat=chat,
                    session_id="s",
                    old_session_id="",
                    in_place=True,
                    compression_count=number // 25 + 1,
                    trigger="in_loop",
                    tokens_before=context,
                    tokens_after=20_000,
                    summarizer="deterministic",
                    ts=now + number * 30 + 1,
                    summary_id="",
                    archived_ids=[str(i) for i in range(number * 4, number * 4 + 90)],
                )
            )
            context = 20_000


async def _recording_cost(web: Any, events: int = 5_000, together: int = 32) -> dict[str, float]:
    """Microseconds of gateway and of Redis CPU per recorded turn."""
    from gateway.events import TurnEvent

    log, redis = web.gateway.activity, web.gateway.redis

    async def redis_cpu() -> float:
        info = await redis.info("cpu")
        return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])

    turns = [
        TurnEvent(
            platform="web",
            chat=f"web:cost-chat-{number % 1000:06d}",
            session_id="s",
            prompt_tokens=1200,
            completion_tokens=40,
            cache_read_tokens=1000,
            latency_ms=900,
            model="m",
            cost_usd=0.002,
            context_tokens=5_000,
            context_window=200_000,
        )
        for number in range(events)
    ]
    server_before, process_before = await redis_cpu(), time.process_time()
    for start in range(0, events, together):
        await asyncio.gather(*(log.record(turn) for turn in turns[start : start + together]))
    process, server = time.process_time() - process_before, await redis_cpu() - server_before
    return {
        "gateway_us_per_turn": round(process / events * 1e6, 1),
        "redis_us_per_turn": round(server / events * 1e6, 1),
    }


async def _timed(client: Any, path: str) -> dict[str, Any]:
    seconds = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        response = await client.get(path)
        seconds.append(time.perf_counter() - started)
        assert response.status_code == 200, (path, response.status_code)
    return {
        "path": path,
        "median_s": round(statistics.median(seconds), 4),
        "max_s": round(max(seconds), 4),
        "bytes": len(response.content),
    }


async def measure(chats: int = CHATS, redis_url: str | None = None) -> dict[str, Any]:
    """``redis_url``: None picks 127.0.0.1:6379 when it answers; "" runs the embedded server."""
    import httpx

    from evals.bench_throughput import describe_redis, local_redis_url
    from gateway.store.keys import every_key_pattern
    from tests.fakes.llm_server import FakeLLMServer, Reply
    from tests.fakes.web import ADMIN_TOKEN, web_gateway, web_settings

    url = await local_redis_url() if redis_url is None else redis_url
    prefix = f"fgbench-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory(prefix="fg-bench-", ignore_cleanup_errors=True) as home:
        async with FakeLLMServer(default=Reply.answer("The export finished at 03:12 with 4,812 rows.")) as provider:
            settings = web_settings(
                url, prefix, provider.openai_base_url, gateway={"home": home}, delivery={"stream_replies": False}
            )
            async with web_gateway(settings) as web:
                try:
                    await _fill(web, chats)
                    full = "web:bench-chat-000000"
                    await _full_log(web, full)
                    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
                    async with httpx.AsyncClient(base_url=web.operator_url, headers=headers, timeout=60) as client:
                        pages = [
                            await _timed(client, path)
                            for path in (
                                "/admin",
                                "/admin?sort=cost&order=desc",
                                "/admin?sort=context&order=desc",
                                f"/admin?page={(chats + 49) // 50}",
                                "/admin/chats/" + quote(full, safe=""),
                                "/admin/chats/" + quote(full, safe="") + "/charts",
                            )
                        ]
                    recording = await _recording_cost(web)
                finally:
                    redis = web.gateway.redis
                    keys = [key async for key in redis.scan_iter(match=every_key_pattern(prefix), count=1000)]
                    for start in range(0, len(keys), 500):
                        await redis.delete(*keys[start : start + 500])
    return {
        "measured_at": time.strftime("%Y-%m-%d"),
        "redis": describe_redis(url),
        "chats": chats,
        "repeats": REPEATS,
        "goal_first_page_s": GOAL_SECONDS,
        "pages": pages,
        "recording": recording,
    }


def table(result: dict[str, Any]) -> str:
    lines = [
        f"The operator view with {result['chats']:,} chats in Redis ({result['redis']}); wall time of the whole HTTP "
        f"answer, {result['repeats']} fetches each. "
        f"Goal: the list's first page under {result['goal_first_page_s']:g} s.",
        "",
        "| page | median | worst | size |",
        "|---|---:|---:|---:|",
    ]
    for page in result["pages"]:
        lines.append(
            f"| `{page['path']}` | {page['median_s'] * 1000:,.0f} ms | {page['max_s'] * 1000:,.0f} ms | "
            f"{page['bytes'] / 1024:,.0f} KiB |"
        )
    cost = result["recording"]
    lines += [
        "",
        f"Recording one turn in the activity log: {cost['gateway_us_per_turn']:g} µs of the gateway's CPU and "
        f"{cost['redis_us_per_turn']:g} µs of Redis's (5,000 turns, 32 at a time; the first fetch of the list "
        "also indexed the chats stored before the index existed, once).",
    ]
    return "\n".join(lines) + "\n"


def main(out_dir: str | Path, **options: Any) -> int:
    result = asyncio.run(measure(**options))
    publish(out_dir, "bench_operator", result, table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "evals/out"))
