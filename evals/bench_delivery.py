"""``foldgate bench delivery``: how soon a streamed reply shows on Telegram, and what a reply costs in calls.

The gateway runs as ``foldgate run`` builds it (real Redis, the shared send budget, the real
aiogram client) against the fake Bot API in this process, and the throughput benchmark's
model server in a child process, which streams each answer and writes, as the text of every
delta, its ``time.monotonic()`` just before writing it (a system-wide clock).

- *first preview*: ``concurrent`` private chats ask at once; for each, the time from the
  provider's first text byte (the first delta's stamp) to the fake Bot API accepting the
  reply's first draft. Telegram lets a bot send about 30 messages a second, and every draft
  counts, so with many chats starting together the budget, not the gateway, spaces the first
  frames: the benchmark runs once with ``delivery.telegram.per_bot_per_second`` at its default
  and once raised out of the way, to show which is which.
- *calls per reply*: one reply of :data:`LONG_REPLY_DELTAS` deltas (about a token each)
  streamed at :data:`LONG_REPLY_RATE` deltas a second; the drafts and final messages it cost.
"""

from __future__ import annotations

import os
import platform
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evals.bench_throughput import MODEL_NAME, ModelServer, _drop_prefix, local_redis_url, quantile
from evals.report import progress, publish

CONCURRENT = 100
PIECES = 20
PACE = 0.05
LONG_REPLY_DELTAS = 1000
LONG_REPLY_RATE = 50.0
GOAL_P99_MS = 300.0


async def _run(
    redis_url: str, base_url: str, chats: int, pieces: int, pace: float, bot_per_second: float, chat_ids_from: int
) -> dict[str, Any]:
    """``chats`` private chats ask at once; what the fake Bot API saw of their replies."""
    from agent.llm.client import ChatClient
    from gateway.config import Settings
    from gateway.platforms.telegram import TelegramAdapter
    from gateway.run.assembly import open_gateway
    from tests.fakes.bot_api import FakeBotAPI

    prefix = f"fgbench-{uuid.uuid4().hex[:8]}"
    headers = {"x-bench-stamp": "1", "x-bench-pieces": str(pieces), "x-bench-pace": str(pace)}
    try:
        with tempfile.TemporaryDirectory(prefix="fg-bench-", ignore_cleanup_errors=True) as home:
            async with FakeBotAPI() as api:
                settings = Settings(
                    redis={"url": redis_url, "key_prefix": prefix},
                    model={"name": MODEL_NAME, "provider": "custom", "base_url": base_url, "context_length": 128_000},
                    platforms={
                        "telegram": {"enabled": True, "token": api.token, "api_server": api.base_url},
                        "local": {"enabled": False},
                    },
                    gateway={"home": home, "max_concurrent_chats": chats + 8, "coalesce_backlog": False},
                    delivery={"telegram": {"per_bot_per_second": bot_per_second}},
                )
                adapter = TelegramAdapter(settings.platforms.telegram, poll_timeout=1, typing_interval=0)
                model = ChatClient(base_url, stream=True, headers=headers)
                gateway = await open_gateway(settings, {"tg": adapter}, chat_model=model)
                await adapter.start(gateway.runner.intake)
                try:
                    ids = [str(chat_ids_from + number) for number in range(chats)]
                    api.push(*(api.private_message(int(chat), "go") for chat in ids))
                    await api.wait_until(lambda: all(api.messages(chat) for chat in ids), timeout=300)
                    await gateway.runner.wait_idle(timeout=60)
                finally:
                    await gateway.close()
                first, shown, calls = [], [], []
                for chat in ids:
                    drafts, messages = api.drafts_in(chat), api.messages(chat)
                    stamp = float(messages[0].text.split()[0])  # every text starts with the first delta's stamp
                    if drafts:
                        first.append((drafts[0].at - stamp) * 1000)
                    shown.append((min([d.at for d in drafts[:1]] + [messages[0].sent_at]) - stamp) * 1000)
                    calls.append(len(drafts) + len(messages))
                return {
                    "first_preview_ms": first,
                    "first_shown_ms": shown,
                    "calls": calls,
                    "rate_limited": len(api.rate_limited),
                }
    finally:
        await _drop_prefix(redis_url, prefix)


def _ms(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(quantile(values, 0.5), 1),
        "p99": round(quantile(values, 0.99), 1),
        "max": round(max(values, default=0.0), 1),
    }


async def measure(
    concurrent: int = CONCURRENT,
    long_deltas: int = LONG_REPLY_DELTAS,
    long_rate: float = LONG_REPLY_RATE,
    redis_url: str | None = None,
) -> dict[str, Any]:
    if redis_url is None:
        redis_url = await local_redis_url()
    server = ModelServer()
    base_url = server.start()
    rows = []
    try:
        bar = progress(3, "run", "bench delivery")
        for label, per_bot in (("Telegram's 30/s per bot", 30.0), ("per-bot limit raised to 10,000/s", 10_000.0)):
            bar.update(len(rows), note=label)
            seen = await _run(redis_url, base_url, concurrent, PIECES, PACE, per_bot, 10_000)
            rows.append(
                {
                    "budget": label,
                    "chats": concurrent,
                    "with_a_preview": len(seen["first_preview_ms"]),
                    "first_preview_ms": _ms(seen["first_preview_ms"]),
                    "first_shown_ms": _ms(seen["first_shown_ms"]),
                    "rate_limited": seen["rate_limited"],
                }
            )
        bar.update(len(rows), note=f"one reply of {long_deltas:,} deltas")
        long = await _run(redis_url, base_url, 1, long_deltas, 1 / long_rate, 30.0, 20_000)
        bar.update(3, note="")
        bar.close()
    finally:
        server.stop()
    seconds = long_deltas / long_rate
    return {
        "measured_at": time.strftime("%Y-%m-%d"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "goal_first_preview_p99_ms": GOAL_P99_MS,
        "first_preview": rows,
        "long_reply": {
            "deltas": long_deltas,
            "deltas_per_second": long_rate,
            "stream_seconds": seconds,
            "platform_calls": long["calls"][0],
            "calls_per_second_of_stream": round(long["calls"][0] / seconds, 2),
        },
    }


def markdown(result: Mapping[str, Any]) -> str:
    lines = [
        f"Streamed delivery to the fake Bot API (real aiogram client, shared send budget in Redis), "
        f"{result['machine']['cpus']} CPUs, Python {result['machine']['python']}.",
        "",
        "| send budget | chats at once | replies with a preview | first preview p50 | p99 "
        "| first shown (preview or message) p50 | p99 | 429s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["first_preview"]:
        first, shown = row["first_preview_ms"], row["first_shown_ms"]
        lines.append(
            f"| {row['budget']} | {row['chats']} | {row['with_a_preview']} | {first['p50']:.0f} ms | "
            f"{first['p99']:.0f} ms | {shown['p50']:.0f} ms | {shown['p99']:.0f} ms | {row['rate_limited']} |"
        )
    long = result["long_reply"]
    lines += [
        "",
        f"First preview: from the provider's first text byte to the Bot API accepting the reply's first draft. "
        f"Goal p99 ≤ {result['goal_first_preview_p99_ms']:g} ms, bounded by the budget's first-frame allowance: "
        + "; ".join(
            f"{row['budget']}: {row['first_preview_ms']['p99']:.0f} ms "
            f"({'met' if row['first_preview_ms']['p99'] <= result['goal_first_preview_p99_ms'] else 'MISSED'})"
            for row in result["first_preview"]
        )
        + ".",
        "",
        f"A reply of {long['deltas']:,} deltas streamed over {long['stream_seconds']:g} s cost "
        f"{long['platform_calls']} platform calls (drafts and final messages), "
        f"{long['calls_per_second_of_stream']} a second of streaming.",
    ]
    return "\n".join(lines) + "\n"


def main(out_dir: str | Path, **options: Any) -> int:
    from gateway.run.process import run_gateway_loop

    result = run_gateway_loop(measure(**options))
    publish(out_dir, "bench_delivery", result, markdown(result))
    return 0
