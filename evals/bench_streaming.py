"""``foldgate bench streaming``: the latency streaming adds between a provider and the agent's watcher.

The model server (the throughput benchmark's, in a child process) streams each answer as
server-sent events and writes, as the first text delta, its ``time.monotonic()`` taken just
before the answer's first body byte (the clock is system-wide on Linux, so both processes
read the same one). The gateway side runs real agent turns (:class:`agent.loop.Agent` over
foldgate's :class:`agent.llm.client.ChatClient`) many at once; the turn's ``on_event`` sink
takes the first delta's stamp from the clock. What is measured is everything between the
provider's write and the agent handing the delta on: the kernel's loopback, aiohttp's
read, httpx, httpx-sse's parser and foldgate's stream assembler — and the event loop
serving every other stream at the same moment.
"""

from __future__ import annotations

import asyncio
import os
import platform
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evals.bench_throughput import MODEL_NAME, ModelServer, quantile
from evals.report import publish

CONCURRENT = 200
ROUNDS = 5
GOAL_P99_MS = 5.0
TRANSPORTS = ("aiohttp", "httpx")


async def _round(client: Any, concurrent: int) -> list[float]:
    """Milliseconds from the server's first byte to the first delta, for ``concurrent`` turns at once."""
    from agent.context_compressor import ContextCompressor
    from agent.llm.stream import TextDelta
    from agent.loop import Agent

    latencies: list[float] = []

    async def turn(number: int) -> None:
        first: list[float] = []

        async def sink(event: Any) -> None:
            if isinstance(event, TextDelta) and not first:
                first.append((time.monotonic() - float(event.text.split()[0])) * 1000)

        agent = Agent(client, ContextCompressor(MODEL_NAME, 128_000), model=MODEL_NAME)
        await agent.run_turn([], {"role": "user", "content": f"stream {number}"}, on_event=sink)
        latencies.extend(first)

    await asyncio.gather(*(turn(number) for number in range(concurrent)))
    return latencies


async def measure(concurrent: int = CONCURRENT, rounds: int = ROUNDS, transports: tuple[str, ...] = TRANSPORTS) -> dict[str, Any]:
    """Per transport: one warm-up round, then ``rounds`` rounds of ``concurrent`` streams at once."""
    from agent.llm.client import ChatClient
    from agent.llm.http import open_http_client

    server = ModelServer()
    base_url = server.start()
    rows: list[dict[str, Any]] = []
    try:
        for transport in transports:
            http = open_http_client(transport=transport)  # type: ignore[arg-type]
            client = ChatClient(base_url, stream=True, http=http, headers={"x-bench-stamp": "1"})
            try:
                await _round(client, concurrent)  # connections opened, caches warm
                samples: list[float] = []
                for _ in range(rounds):
                    samples += await _round(client, concurrent)
            finally:
                await http.aclose()
            rows.append({
                "transport": transport,
                "streams": len(samples),
                "p50_ms": round(quantile(samples, 0.5), 3),
                "p99_ms": round(quantile(samples, 0.99), 3),
                "max_ms": round(max(samples), 3),
            })
    finally:
        server.stop()
    return {
        "measured_at": time.strftime("%Y-%m-%d"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                    "event_loop": type(asyncio.get_running_loop()).__module__.split(".")[0]},
        "concurrent_streams": concurrent,
        "rounds": rounds,
        "goal_p99_ms": GOAL_P99_MS,
        "rows": rows,
        "verdict": {"p99_goal_met": rows[0]["p99_ms"] <= GOAL_P99_MS},
    }


def markdown(result: Mapping[str, Any]) -> str:
    lines = [
        f"Streaming latency: {result['concurrent_streams']} streams at once, {result['rounds']} rounds after a "
        f"warm-up, {result['machine']['cpus']} CPUs, Python {result['machine']['python']} "
        f"({result['machine']['event_loop']} loop). Measured from the model server's first body byte to the "
        "first text delta handed to the agent's watcher.",
        "",
        "| transport under httpx | streams | p50 | p99 | max |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        lines.append(f"| {row['transport']} | {row['streams']:,} | {row['p50_ms']:.2f} ms | {row['p99_ms']:.2f} ms | "
                     f"{row['max_ms']:.2f} ms |")
    first = result["rows"][0]
    verdict = "met" if result["verdict"]["p99_goal_met"] else "MISSED"
    lines += ["", f"Goal: p99 ≤ {result['goal_p99_ms']:g} ms with foldgate's transport ({first['transport']}): "
                  f"{first['p99_ms']:.2f} ms ({verdict})."]
    return "\n".join(lines) + "\n"


def main(out_dir: str | Path, **options: Any) -> int:
    from gateway.app import run_gateway_loop

    result = run_gateway_loop(measure(**options))
    publish(out_dir, "bench_streaming", result, markdown(result))
    return 0
