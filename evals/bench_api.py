"""``foldgate bench api``: the time the OpenAI-compatible API adds to a request, beside calling the provider directly.

A client of the API could call its provider itself; what it pays for foldgate in between (the key, the session,
the lock and inbox, the agent's turn, the commit to Redis, the answer in OpenAI's shape) is the difference
between the two. So one run sends the same prompt both ways to the same zero-latency fake provider (the
throughput benchmark's, in a child process) with the same client, OpenAI's own ``AsyncOpenAI``, at 1, 50 and
200 concurrent clients, whole and streamed:

- *direct*: the client calls the fake provider;
- *through foldgate*: the client calls a gateway built as ``foldgate run`` builds it (the fleet and its web
  serving, with the API on a loopback port, its defaults untouched), in a process of its own
  (:mod:`evals.child_process`), so neither the clients nor the provider take its CPU; it calls the provider.

Each request's wall time is taken in the client, to its last byte (for a stream, the usage chunk), and for a
stream also to its first text delta. Foldgate's added time is the through-foldgate figure minus the direct one,
percentile by percentile (p50 and p99). Each load runs in four parts, direct, foldgate, foldgate, direct, so a
drift of the machine's speed (other work shares it) weighs on both sides alike. Beside the times: the gateway
process's CPU per request over the load, and how many chunks a stream came in each way (foldgate joins the
provider's deltas as it relays them, and every chunk costs the client a parse).

The clients are closed loops (each sends its next request when the last is answered), so once the client
process or the cores are saturated a load's latency is its clients over its throughput, and the difference of
two such figures is a difference of throughput, not of work per request: read the 1-client rows for the time
foldgate adds, and the CPU column for what it costs under load.

Every request without a session header starts a session of its own, so no two wait on one chat's lock; the
run's keys are deleted afterwards. Below the table, the headline of ``foldgate bench api_matching`` at a small
size: the cost a stateless client's history match will add once it is on the request path.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import sys
import time
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evals.child_process import MeasuredChild
from evals.report import progress, publish

CONCURRENCY = (1, 50, 200)
#: Timed requests per load, by concurrent clients: enough for a p99 of a few samples, a few minutes in all.
REQUESTS = {1: 300, 50: 1_000, 200: 2_000}
#: Untimed requests through each side before the first load (code paths loaded, caches filled).
WARM_UP = 20
#: Sizes of the matching headline (messages of the stored session).
MATCHING_SIZES = (1_000,)
PROMPT = "Is the canary healthy after last night's deploy, and did the retry queue drain?"
SERVE_FLAG = "--serve-gateway"


# --------------------------------------------------------------------------- the gateway (child process)


async def _serve_gateway(config: Mapping[str, Any]) -> None:
    """Child process: the gateway on the fake provider until told to stop; prints its API address as JSON."""
    from gateway.config.models import GatewaySettings
    from gateway.run.process import settle_process
    from tests.fakes.api_gateway import api_gateway, api_settings

    # The test gateways' short lock is for tests that wait one out; here the deployed default stands.
    deployed_lock = GatewaySettings.model_fields["lock_ttl_seconds"].default
    settings = api_settings(
        config["redis_url"],
        config["prefix"],
        config["provider_url"],
        context_length=128_000,
        gateway={"lock_ttl_seconds": deployed_lock},
    )
    async with api_gateway(settings) as api:
        if config.get("settle", True):
            settle_process()
        print(json.dumps({"base_url": api.base_url, "max_concurrent_chats": settings.gateway.max_concurrent_chats}))
        sys.stdout.flush()
        # "cpu" asks for the CPU seconds this process has used (the gateway's cost per request); "stop" ends it.
        while (command := (await asyncio.to_thread(sys.stdin.readline)).strip()) not in ("stop", ""):
            if command == "cpu":
                print(json.dumps({"cpu_seconds": time.process_time()}), flush=True)


# --------------------------------------------------------------------------- the clients


@dataclass
class Samples:
    """One load's requests: seconds to the last byte and to the first text delta, the errors, the wrong replies."""

    total: list[float] = field(default_factory=list)
    first: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    wrong_replies: int = 0
    wall_seconds: float = 0.0
    #: Chunks the streamed answers came in, all together: fewer chunks cost the client less to parse.
    chunks: int = 0
    #: CPU seconds the serving process used over the timed requests (None: not measured, the fake provider's).
    server_cpu_seconds: float | None = None


def open_client(base_url: str, api_key: str, concurrency: int) -> Any:
    """``AsyncOpenAI`` with a connection kept for every concurrent client, the same options whichever side."""
    import httpx
    import openai

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    http = openai.DefaultAsyncHttpxClient(limits=limits)
    return openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=120.0, http_client=http)


async def request(client: Any, model: str, stream: bool, expected: str, samples: Samples | None) -> None:
    """One completion; timed into ``samples`` unless that is None (a warm-up)."""
    import openai

    started = time.perf_counter()
    first = 0.0
    counted = 0
    try:
        messages = [{"role": "user", "content": PROMPT}]
        if stream:
            pieces: list[str] = []
            chunks = await client.chat.completions.create(
                model=model, messages=messages, stream=True, stream_options={"include_usage": True}
            )
            async for chunk in chunks:
                counted += 1
                if chunk.choices and chunk.choices[0].delta.content:
                    first = first or time.perf_counter() - started
                    pieces.append(chunk.choices[0].delta.content)
            text = "".join(pieces)
        else:
            text = (await client.chat.completions.create(model=model, messages=messages)).choices[0].message.content
    except openai.APIError as error:
        if samples is not None:
            samples.errors[f"{type(error).__name__} {getattr(error, 'status_code', '')}".strip()] += 1
        return
    elapsed = time.perf_counter() - started
    if samples is not None:
        samples.total.append(elapsed)
        samples.first.append(first or elapsed)
        samples.chunks += counted
        samples.wrong_replies += text != expected


async def load(
    client: Any,
    model: str,
    stream: bool,
    concurrency: int,
    requests: int,
    samples: Samples,
    server: MeasuredChild | None = None,
) -> None:
    """``concurrency`` clients, each sending its share of ``requests`` one after another, into ``samples``, with
    ``server``'s CPU over them when given. A first untimed round opens every client's connection."""
    from evals.bench_throughput import MODEL_REPLY

    await asyncio.gather(*(request(client, model, stream, MODEL_REPLY, None) for _ in range(concurrency)))
    shares = [requests // concurrency + (index < requests % concurrency) for index in range(concurrency)]

    async def one_client(share: int) -> None:
        for _ in range(share):
            await request(client, model, stream, MODEL_REPLY, samples)

    cpu = (await server.ask("cpu"))["cpu_seconds"] if server is not None else 0.0
    begun = time.perf_counter()
    await asyncio.gather(*(one_client(share) for share in shares))
    samples.wall_seconds += time.perf_counter() - begun
    if server is not None:
        samples.server_cpu_seconds = (
            (samples.server_cpu_seconds or 0.0) + (await server.ask("cpu"))["cpu_seconds"] - cpu
        )


# --------------------------------------------------------------------------- figures


def ms(seconds: Sequence[float]) -> dict[str, float]:
    from evals.bench_throughput import quantile

    return {"p50": round(quantile(seconds, 0.50) * 1000, 3), "p99": round(quantile(seconds, 0.99) * 1000, 3)}


def side(samples: Samples) -> dict[str, Any]:
    answered, wall, cpu = len(samples.total), samples.wall_seconds, samples.server_cpu_seconds
    return {
        "answered": answered,
        "total_ms": ms(samples.total),
        "first_delta_ms": ms(samples.first),
        "requests_per_second": round(answered / wall, 1) if wall else 0.0,
        "server_cpu_ms_per_request": round(cpu * 1000 / answered, 3) if cpu is not None and answered else None,
        "server_cpu_utilisation": round(cpu / wall, 3) if cpu is not None and wall else None,
        "chunks_per_stream": round(samples.chunks / answered, 1) if samples.chunks and answered else None,
        "errors": dict(samples.errors),
        "wrong_replies": samples.wrong_replies,
    }


def row(
    concurrency: int, stream: bool, requests: int, direct: dict[str, Any], foldgate: dict[str, Any]
) -> dict[str, Any]:
    """One load's figures both ways, and foldgate's added time per percentile."""

    def added(part: str) -> dict[str, float]:
        return {q: round(foldgate[part][q] - direct[part][q], 3) for q in ("p50", "p99")}

    return {
        "concurrency": concurrency,
        "stream": stream,
        "requests": requests,
        "direct": direct,
        "foldgate": foldgate,
        "added_ms": added("total_ms"),
        "added_first_delta_ms": added("first_delta_ms") if stream else None,
    }


# --------------------------------------------------------------------------- the run


def halves(requests: int) -> tuple[int, int, int, int]:
    """How many of a load's requests each of its four parts (direct, foldgate, foldgate, direct) sends."""
    return requests // 2, requests // 2, requests - requests // 2, requests - requests // 2


@dataclass
class Sides:
    """Where the two sides' requests go, and the model name each answers to."""

    provider_url: str
    gateway_url: str
    api_key: str
    gateway: MeasuredChild

    def both(self) -> list[tuple[str, str, str, str]]:
        """(side, base URL, key, model) of each side, direct first."""
        from evals.bench_throughput import MODEL_NAME

        return [
            ("direct", self.provider_url, "unused-by-the-fake-provider", MODEL_NAME),
            ("foldgate", self.gateway_url, self.api_key, "any"),
        ]


async def run_loads(
    sides: Sides, concurrency: Sequence[int], requests: Mapping[int, int], warm_up: int
) -> list[dict[str, Any]]:
    """Every load both ways, on fresh clients of equal options, in halves ordered direct, foldgate, foldgate,
    direct: the machine's speed drifts (and other work shares it), and this order gives both sides the same
    share of a steady drift."""
    from evals.bench_throughput import MODEL_REPLY

    for _, base_url, key, model in sides.both():
        client = open_client(base_url, key, 1)
        try:
            for stream in (False, True):
                for _ in range(warm_up):
                    await request(client, model, stream, MODEL_REPLY, None)
        finally:
            await client.close()
    rows = []
    loads = [(clients, stream) for clients in concurrency for stream in (False, True)]
    with progress(len(loads), "load", "bench api") as bar:
        for clients, stream in loads:
            bar.update(len(rows), note=f"{clients} clients, {'streamed' if stream else 'whole'}")
            samples = {"direct": Samples(), "foldgate": Samples()}
            direct, foldgate = sides.both()
            parts = zip((direct, foldgate, foldgate, direct), halves(requests[clients]), strict=True)
            for (name, base_url, key, model), count in parts:
                client = open_client(base_url, key, clients)
                try:
                    server = sides.gateway if name == "foldgate" else None
                    await load(client, model, stream, clients, count, samples[name], server)
                finally:
                    await client.close()
            figures = {name: side(taken) for name, taken in samples.items()}
            rows.append(row(clients, stream, requests[clients], figures["direct"], figures["foldgate"]))
        bar.update(len(rows), note="")
    return rows


async def measure(
    redis_url: str | None = None,
    concurrency: Sequence[int] = CONCURRENCY,
    requests: Mapping[int, int] | None = None,
    warm_up: int = WARM_UP,
    matching_sizes: Sequence[int] = MATCHING_SIZES,
    settle: bool = True,
) -> dict[str, Any]:
    """The fake provider and the gateway in child processes, every load from this one, then the matching
    headline. ``settle``: settle the gateway's process as ``foldgate run`` does (off in the test suite)."""
    from evals.bench_throughput import ModelServer
    from evals.redis_target import bench_redis
    from tests.fakes.api_gateway import KEYS

    requests = dict(requests or REQUESTS)
    prefix = f"fgbench-api-{uuid.uuid4().hex[:12]}"
    provider = ModelServer()
    provider_url = provider.start()
    try:
        async with bench_redis(redis_url) as url:
            config = {"redis_url": url, "prefix": prefix, "provider_url": provider_url, "settle": settle}
            gateway = MeasuredChild("evals.bench_api", SERVE_FLAG, config)
            try:
                started = await gateway.ask()
                sides = Sides(provider_url, started["base_url"], KEYS["alice"], gateway)
                rows = await run_loads(sides, concurrency, requests, warm_up)
            finally:
                gateway.stop()
                await _drop_prefix(url, prefix)
            matching = await _matching_headline(url, matching_sizes)
    finally:
        provider.stop()
    return _result(rows, matching, started["max_concurrent_chats"])


async def _matching_headline(redis_url: str, sizes: Sequence[int]) -> list[dict[str, Any]]:
    """``bench api_matching``'s hash-and-lookup figure at ``sizes`` (none: skipped)."""
    if not sizes:
        return []
    from evals import bench_api_matching

    result = await bench_api_matching.measure(redis_url, sizes=sizes, runs=bench_api_matching.RUNS)
    return [{"messages": r["messages"], "together_ms": r["together_ms"]} for r in result["rows"]]


async def _drop_prefix(redis_url: str, prefix: str) -> None:
    """Delete the sessions the run opened (one per request) from a shared server."""
    from redis.asyncio import Redis

    from gateway.store.keys import every_key_pattern

    client = Redis.from_url(redis_url, decode_responses=True)
    try:
        keys = [key async for key in client.scan_iter(match=every_key_pattern(prefix), count=1000)]
        for start in range(0, len(keys), 500):
            await client.delete(*keys[start : start + 500])
    finally:
        await client.aclose()


def _result(rows: list[dict[str, Any]], matching: list[dict[str, Any]], max_chats: int) -> dict[str, Any]:
    import openai

    return {
        "measured_at": time.strftime("%Y-%m-%d"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "client": f"openai (Python) {openai.__version__}, AsyncOpenAI",
        "gateway_max_concurrent_chats": max_chats,
        "prompt": PROMPT,
        "rows": rows,
        "matching": matching,
    }


# --------------------------------------------------------------------------- report


def _pair(figures: Mapping[str, float]) -> str:
    return f"{figures['p50']:.2f} / {figures['p99']:.2f}"


def _cpu(figures: Mapping[str, Any]) -> str:
    if figures["server_cpu_ms_per_request"] is None:
        return "—"
    return f"{figures['server_cpu_ms_per_request']:.2f} ms ({figures['server_cpu_utilisation']:.0%})"


def _errors(row: Mapping[str, Any]) -> str:
    counted = sum(sum(row[name]["errors"].values()) + row[name]["wrong_replies"] for name in ("direct", "foldgate"))
    return str(counted) if counted else "0"


def markdown(result: Mapping[str, Any]) -> str:
    machine = result["machine"]
    lines = [
        f"The time foldgate's OpenAI-compatible API adds per request, {machine['cpus']} CPUs, Python "
        f"{machine['python']}: {result['client']} calling the fake provider directly and through a gateway "
        f"(its own process, max_concurrent_chats {result['gateway_max_concurrent_chats']}), p50 / p99 in ms; "
        "added = through foldgate minus direct, per percentile.",
        "",
        "| clients | streamed | requests | direct | through foldgate | added p50 | added p99 "
        "| first delta added p50 / p99 | chunks per stream direct / foldgate | requests/s direct / foldgate "
        "| gateway CPU per request (busy) | errors |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        first = _pair(row["added_first_delta_ms"]) if row["stream"] else "—"
        chunks = (
            f"{row['direct']['chunks_per_stream']:g} / {row['foldgate']['chunks_per_stream']:g}"
            if row["stream"]
            else "—"
        )
        lines.append(
            f"| {row['concurrency']} | {'yes' if row['stream'] else 'no'} | {row['requests']:,} "
            f"| {_pair(row['direct']['total_ms'])} | {_pair(row['foldgate']['total_ms'])} "
            f"| {row['added_ms']['p50']:.2f} | {row['added_ms']['p99']:.2f} | {first} | {chunks} "
            f"| {row['direct']['requests_per_second']:,.0f} / {row['foldgate']['requests_per_second']:,.0f} "
            f"| {_cpu(row['foldgate'])} | {_errors(row)} |"
        )
    for match in result["matching"]:
        lines += [
            "",
            f"Matching a stateless client's resent history (`foldgate bench api_matching`, not yet on the request "
            f"path), {match['messages']:,} messages: hash and lookup {_pair(match['together_ms'])} ms.",
        ]
    return "\n".join(lines) + "\n"


def main(out_dir: str | Path, **options: Any) -> int:
    from gateway.run.process import run_gateway_loop  # the loop `foldgate run` uses, on both sides of the wire

    result = run_gateway_loop(measure(**options))
    publish(out_dir, "bench_api", result, markdown(result))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == SERVE_FLAG:
        from gateway.run.process import run_gateway_loop

        run_gateway_loop(_serve_gateway(json.loads(sys.argv[2])))
    else:
        sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "evals/out"))
