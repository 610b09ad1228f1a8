"""``foldgate bench streaming``: the latency streaming adds between a provider and the agent's watcher.

The model server (the throughput benchmark's, in a child process) streams each answer as
server-sent events and writes, as the text of every delta, its ``time.monotonic()`` taken
just before the delta is written (the clock is system-wide on Linux, so both processes read
the same one). The gateway side runs real agent turns (:class:`agent.loop.Agent` over
foldgate's :class:`agent.llm.client.ChatClient`); the turn's ``on_event`` sink reads each
delta's stamp against the clock. What is measured is everything between the provider's
write and the agent handing the delta on: the kernel's loopback, aiohttp's read, httpx,
httpx-sse's parser and foldgate's stream assembler — and the event loop serving every
other stream at that moment.

Two loads, for each transport under httpx:

- *steady*: ``concurrent`` conversations stream at once for ``seconds``, turn after turn, each
  answer :data:`PIECES` deltas :data:`PACE` seconds apart (an LLM writing ~40 tokens a
  second); the goal applies here, to the first delta of every turn;
- *burst*: ``concurrent`` turns start in the same instant (every first byte arrives
  together, so the later ones queue behind the others' work): the worst case, reported.
"""

from __future__ import annotations

import asyncio
import os
import platform
import random
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evals.bench_throughput import MODEL_NAME, ModelServer, quantile
from evals.report import publish

CONCURRENT = 200
SECONDS = 8.0
PIECES = 20
PACE = 0.025
GOAL_P99_MS = 5.0
TRANSPORTS = ("aiohttp", "httpx")


class Latencies:
    """First-delta and every-delta latencies (ms) of the turns run through it."""

    def __init__(self) -> None:
        self.first: list[float] = []
        self.every: list[float] = []

    async def turn(self, client: Any, number: int) -> None:
        from agent.context_compressor import ContextCompressor
        from agent.llm.stream import TextDelta
        from agent.loop import Agent

        seen = 0

        async def sink(event: Any) -> None:
            nonlocal seen
            if isinstance(event, TextDelta):
                latency = (time.monotonic() - float(event.text.split()[0])) * 1000
                self.every.append(latency)
                if not seen:
                    self.first.append(latency)
                seen += 1

        agent = Agent(client, ContextCompressor(MODEL_NAME, 128_000), model=MODEL_NAME)
        await agent.run_turn([], {"role": "user", "content": f"stream {number}"}, on_event=sink)

    def summary(self) -> dict[str, Any]:
        def ms(values: list[float]) -> dict[str, float]:
            return {"p50": round(quantile(values, 0.5), 3), "p99": round(quantile(values, 0.99), 3),
                    "max": round(max(values, default=0.0), 3)}

        return {"turns": len(self.first), "deltas": len(self.every), "first_delta_ms": ms(self.first),
                "every_delta_ms": ms(self.every)}


async def steady(client: Any, concurrent: int, seconds: float, rng: random.Random) -> dict[str, Any]:
    """``concurrent`` conversations, each starting at a random moment of the first second, turn after turn."""
    latencies = Latencies()
    deadline = time.monotonic() + seconds

    async def conversation(number: int) -> None:
        await asyncio.sleep(rng.random())
        turn = 0
        while time.monotonic() < deadline:
            await latencies.turn(client, number * 10_000 + turn)
            turn += 1

    await asyncio.gather(*(conversation(number) for number in range(concurrent)))
    return latencies.summary()


async def burst(client: Any, concurrent: int) -> dict[str, Any]:
    latencies = Latencies()
    await asyncio.gather(*(latencies.turn(client, number) for number in range(concurrent)))
    return latencies.summary()


async def measure(concurrent: int = CONCURRENT, seconds: float = SECONDS, transports: tuple[str, ...] = TRANSPORTS,
                  pieces: int = PIECES, pace: float = PACE, seed: int = 7) -> dict[str, Any]:
    """Per transport: a warm-up burst, the steady load, then a measured burst."""
    from agent.llm.client import ChatClient
    from agent.llm.http import open_http_client

    server = ModelServer()
    base_url = server.start()
    headers = {"x-bench-stamp": "1", "x-bench-pieces": str(pieces), "x-bench-pace": str(pace)}
    rows: list[dict[str, Any]] = []
    cpu_before = time.process_time()
    try:
        for transport in transports:
            http = open_http_client(transport=transport)  # type: ignore[arg-type]
            client = ChatClient(base_url, stream=True, http=http, headers=headers)
            try:
                await burst(client, concurrent)  # connections opened, caches warm
                started = time.process_time()
                row = {"transport": transport, "steady": await steady(client, concurrent, seconds, random.Random(seed))}
                row["steady"]["cpu_utilisation"] = round((time.process_time() - started) / seconds, 3)
                row["burst"] = await burst(client, concurrent)
            finally:
                await http.aclose()
            rows.append(row)
    finally:
        server.stop()
    first = rows[0]["steady"]["first_delta_ms"]
    return {
        "measured_at": time.strftime("%Y-%m-%d"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                    "event_loop": type(asyncio.get_running_loop()).__module__.split(".")[0]},
        "concurrent_streams": concurrent,
        "seconds": seconds,
        "pieces": pieces,
        "pace_seconds": pace,
        "cpu_seconds": round(time.process_time() - cpu_before, 2),
        "goal_p99_ms": GOAL_P99_MS,
        "rows": rows,
        "verdict": {"p99_goal_met": first["p99"] <= GOAL_P99_MS},
    }


def markdown(result: Mapping[str, Any]) -> str:
    lines = [
        f"Streaming latency, {result['machine']['cpus']} CPUs, Python {result['machine']['python']} "
        f"({result['machine']['event_loop']} loop): from the model server's write of a delta to the agent handing it "
        f"on. *steady*: {result['concurrent_streams']} conversations streaming at once for {result['seconds']:g} s, "
        f"answers of {result['pieces']} deltas {result['pace_seconds'] * 1000:g} ms apart; *burst*: "
        f"{result['concurrent_streams']} turns started in the same instant.",
        "",
        "| transport under httpx | load | turns | first delta p50 | first delta p99 | every delta p50 | every delta p99 | max | gateway CPU |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        for load in ("steady", "burst"):
            data = row[load]
            cpu = f"{data['cpu_utilisation']:.0%}" if "cpu_utilisation" in data else "—"
            lines.append(
                f"| {row['transport']} | {load} | {data['turns']:,} | {data['first_delta_ms']['p50']:.2f} ms | "
                f"{data['first_delta_ms']['p99']:.2f} ms | {data['every_delta_ms']['p50']:.2f} ms | "
                f"{data['every_delta_ms']['p99']:.2f} ms | {data['every_delta_ms']['max']:.1f} ms | {cpu} |")
    first = result["rows"][0]
    verdict = "met" if result["verdict"]["p99_goal_met"] else "MISSED"
    lines += ["", f"Goal: first-delta p99 ≤ {result['goal_p99_ms']:g} ms under the steady load with foldgate's "
                  f"transport ({first['transport']}): {first['steady']['first_delta_ms']['p99']:.2f} ms ({verdict})."]
    return "\n".join(lines) + "\n"


def main(out_dir: str | Path, **options: Any) -> int:
    from gateway.app import run_gateway_loop

    result = run_gateway_loop(measure(**options))
    publish(out_dir, "bench_streaming", result, markdown(result))
    return 0
