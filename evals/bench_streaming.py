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

Loads, each with ``concurrent`` streams:

- *steady* at several paces: ``concurrent`` conversations stream at once for ``seconds``,
  turn after turn, each answer :data:`PIECES` deltas a pace apart (from 5 deltas a second,
  a provider sending a few tokens per event, to 40, one token per event at a fast model's
  speed); the goal applies to the first delta of every turn. The process's CPU grows with
  the deltas per second of all streams together, and past about half of a core the deltas
  queue behind each other: the table shows where;
- *burst*: ``concurrent`` turns start in the same instant (every first byte arrives
  together, so the later ones queue behind the others' work): the worst case.

The first transport (foldgate's) runs every load; the others run the burst and the
middle pace, for comparison.
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
from evals.report import progress, publish

CONCURRENT = 200
SECONDS = 6.0
PIECES = 20
#: Seconds between two deltas of one stream, one steady load each.
PACES = (0.2, 0.1, 0.05, 0.025)
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
            return {
                "p50": round(quantile(values, 0.5), 3),
                "p99": round(quantile(values, 0.99), 3),
                "max": round(max(values, default=0.0), 3),
            }

        return {
            "turns": len(self.first),
            "deltas": len(self.every),
            "first_delta_ms": ms(self.first),
            "every_delta_ms": ms(self.every),
        }


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


async def _load(
    base_url: str, transport: str, concurrent: int, seconds: float, pace: float | None, seed: int
) -> dict[str, Any]:
    """One load on a fresh client: a warm-up burst, then the steady load at ``pace`` (None: a measured burst)."""
    from agent.llm.client import ChatClient
    from agent.llm.http import open_http_client

    headers = {"x-bench-stamp": "1", "x-bench-pieces": str(PIECES), "x-bench-pace": str(pace or PACES[-1])}
    http = open_http_client(transport=transport)  # type: ignore[arg-type]
    client = ChatClient(base_url, stream=True, http=http, headers=headers)
    try:
        await burst(client, concurrent)  # connections opened, caches warm
        started = time.process_time()
        if pace is None:
            row = {"load": "burst", **await burst(client, concurrent)}
            row["cpu_utilisation"] = None
        else:
            begun = time.monotonic()
            row = {
                "load": f"steady, {1 / pace:g} deltas/s per stream",
                **await steady(client, concurrent, seconds, random.Random(seed)),
            }
            row["deltas_per_second"] = round(row["deltas"] / (time.monotonic() - begun))
            row["cpu_utilisation"] = round((time.process_time() - started) / (time.monotonic() - begun), 3)
    finally:
        await http.aclose()
    return {"transport": transport, "pace_seconds": pace, **row}


async def measure(
    concurrent: int = CONCURRENT,
    seconds: float = SECONDS,
    transports: tuple[str, ...] = TRANSPORTS,
    paces: tuple[float, ...] = PACES,
    seed: int = 7,
    settle: bool = True,
) -> dict[str, Any]:
    """Every load for the first transport; the burst and the middle pace for the others.

    ``settle``: settle the process as ``foldgate run`` does (off in the test suite).
    """
    import agent.context_compressor
    import agent.loop  # noqa: F401
    from gateway.run.process import settle_process

    server = ModelServer()
    base_url = server.start()
    if settle:
        settle_process()
    rows: list[dict[str, Any]] = []
    try:
        loads = [
            (transport, pace)
            for position, transport in enumerate(transports)
            for pace in (*(paces if position == 0 else paces[len(paces) // 2 : len(paces) // 2 + 1]), None)
        ]
        with progress(len(loads), "load", "bench streaming") as bar:
            for transport, pace in loads:
                bar.update(len(rows), note=f"{transport}, {'burst' if pace is None else f'{1 / pace:g} deltas/s'}")
                rows.append(await _load(base_url, transport, concurrent, seconds, pace, seed))
            bar.update(len(rows), note="")
    finally:
        server.stop()
    ours = [row for row in rows if row["transport"] == transports[0] and row["pace_seconds"] is not None]
    return {
        "measured_at": time.strftime("%Y-%m-%d"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "event_loop": type(asyncio.get_running_loop()).__module__.split(".")[0],
        },
        "concurrent_streams": concurrent,
        "seconds": seconds,
        "pieces": PIECES,
        "goal_p99_ms": GOAL_P99_MS,
        "rows": rows,
        "verdict": {
            f"{1 / row['pace_seconds']:g} deltas/s per stream": row["first_delta_ms"]["p99"] <= GOAL_P99_MS
            for row in ours
        },
    }


def markdown(result: Mapping[str, Any]) -> str:
    lines = [
        f"Streaming latency, {result['machine']['cpus']} CPUs, Python {result['machine']['python']} "
        f"({result['machine']['event_loop']} loop): from the model server's write of a delta to the agent handing it "
        f"on, {result['concurrent_streams']} streams at once (steady: for {result['seconds']:g} s, turn after turn, "
        f"answers of {result['pieces']} deltas; burst: every turn started in the same instant).",
        "",
        "| transport under httpx | load | turns | deltas/s (all streams) | first delta p50 | first delta p99 "
        "| every delta p99 | max | gateway CPU |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        cpu = f"{row['cpu_utilisation']:.0%}" if row["cpu_utilisation"] is not None else "—"
        rate = f"{row['deltas_per_second']:,}" if "deltas_per_second" in row else "—"
        lines.append(
            f"| {row['transport']} | {row['load']} | {row['turns']:,} | {rate} | "
            f"{row['first_delta_ms']['p50']:.2f} ms | {row['first_delta_ms']['p99']:.2f} ms | "
            f"{row['every_delta_ms']['p99']:.2f} ms | {row['every_delta_ms']['max']:.1f} ms | {cpu} |"
        )
    verdicts = ", ".join(f"{load}: {'met' if met else 'MISSED'}" for load, met in result["verdict"].items())
    lines += ["", f"Goal: first-delta p99 ≤ {result['goal_p99_ms']:g} ms with foldgate's transport — {verdicts}."]
    return "\n".join(lines) + "\n"


def main(out_dir: str | Path, **options: Any) -> int:
    from gateway.run.process import run_gateway_loop

    result = run_gateway_loop(measure(**options))
    publish(out_dir, "bench_streaming", result, markdown(result))
    return 0
