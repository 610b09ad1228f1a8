"""``foldgate bench tools``: what an MCP tool call adds to a turn, and what listing 50 tools costs one.

*Latency per call.* The same tool (``lookup``, a dictionary read) called through foldgate's
:class:`~agent.tools.mcp.McpTools` — the official SDK over stdio (a child process) and over
streamable HTTP (uvicorn on loopback, in this process) — and, as the yardstick, as a plain
in-process tool of the same registry. Calls are sequential, after a warm-up; the figures are the
wall time of the handler the agent awaits, p50 and p99 (nearest rank), and what each transport adds
to the in-process call. The three are measured interleaved, round by round, so the machine's drift
falls on all of them alike.

*A turn's CPU with 50 tools.* One agent turn (its tools listed, a user message, one request to the
fake provider of tests/fakes/llm_server.py on loopback, its answer) with the 50 tools of one stdio
server offered against the same turn with none: the CPU time of the thread that runs the turn (the
fake provider runs on a thread of its own, the server in its own process), the median of the
rounds, alternating. The difference is what the tools cost the gateway: listing them, building,
counting and encoding their schemas.
"""

from __future__ import annotations

import asyncio
import platform
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

from agent.context_compressor import ContextCompressor
from agent.llm.client import ChatClient
from agent.loop import Agent
from agent.tools import Tool, ToolRegistry
from agent.tools.mcp import McpServerSpec, McpTools
from evals.bench_throughput import quantile
from evals.report import progress, publish
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.mcp_server import TICKET, serve_http, stdio_command

ROOT = str(Path(__file__).resolve().parents[1])
TOKEN = "bench-tools-token"


async def _lookup(arguments: dict[str, Any]) -> str:
    return TICKET if str(arguments.get("ticket")) in ("42", "TICKET-42") else "no ticket"


async def call_latency(calls: int) -> dict[str, dict[str, float]]:
    command, args = stdio_command()
    in_process = Tool("lookup", "Look a ticket up.", {"type": "object"}, _lookup)
    async with serve_http(TOKEN) as (url, _guard):
        mcp = McpTools(
            [
                McpServerSpec("stdio", command=command, args=tuple(args), cwd=ROOT),
                McpServerSpec("http", url=url, headers={"Authorization": f"Bearer {TOKEN}"}),
            ]
        )
        try:
            tools = {tool.name: tool for tool in await mcp.tools(["stdio", "http"], None)}
            handlers = {
                "in-process": in_process.handler,
                "stdio": tools["stdio__lookup"].handler,
                "http": tools["http__lookup"].handler,
            }
            times: dict[str, list[float]] = {name: [] for name in handlers}
            for handler in handlers.values():  # warm-up: sessions open, code paths run once
                for _ in range(20):
                    await handler({"ticket": "42"})
            with progress(calls, "call", "tool calls") as bar:
                for _ in range(calls):
                    for name, handler in handlers.items():
                        started = time.perf_counter()
                        await handler({"ticket": "42"})
                        times[name].append((time.perf_counter() - started) * 1000)
                    bar.update()
        finally:
            await mcp.aclose()
    base = {q: quantile(times["in-process"], q) for q in (0.5, 0.99)}
    return {
        name: {
            "p50_ms": quantile(values, 0.5),
            "p99_ms": quantile(values, 0.99),
            "added_p50_ms": quantile(values, 0.5) - base[0.5],
            "added_p99_ms": quantile(values, 0.99) - base[0.99],
        }
        for name, values in times.items()
    }


class ProviderThread:
    """The fake provider on an event loop of its own thread, so this thread's CPU time is the agent's alone."""

    def __init__(self) -> None:
        self.ready = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.server: FakeLLMServer | None = None
        self.thread = threading.Thread(target=self._run, name="fake-provider", daemon=True)

    def _run(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.server = FakeLLMServer(handler=lambda request: Reply.answer("done"))
        self.loop.run_until_complete(self.server.start())
        self.ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(self.server.stop())

    def __enter__(self) -> FakeLLMServer:
        self.thread.start()
        self.ready.wait(30)
        assert self.server is not None
        return self.server

    def __exit__(self, *exc_info: object) -> None:
        assert self.loop is not None
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)


async def turn_cpu(turns: int, listed: int) -> dict[str, Any]:
    command, args = stdio_command()
    mcp = McpTools(
        [
            McpServerSpec(
                "inv",
                command=command,
                args=tuple(args),
                cwd=ROOT,
                env={"FAKE_MCP_MANY": str(listed)},
                include=frozenset(f"tool_{number:02d}" for number in range(listed)),
            )
        ]
    )
    cpu: dict[str, list[float]] = {"none": [], f"{listed} tools": []}
    bodies: dict[str, int] = {}
    try:
        with ProviderThread() as llm:
            async with ChatClient(llm.openai_base_url, api_key="k", route="custom") as client:
                offered = await mcp.tools(["inv"], None)
                assert len(offered) == listed, f"the server offered {len(offered)} tools, not {listed}"
                with progress(turns, "turn", "turns") as bar:
                    for round_number in range(turns):
                        for name in cpu if round_number % 2 == 0 else reversed(list(cpu)):
                            started = time.thread_time()  # listing the tools is part of every turn
                            registry = ToolRegistry()
                            if name != "none":
                                for tool in await mcp.tools(["inv"], None):
                                    registry.add(tool)
                            agent = Agent(
                                client,
                                ContextCompressor(model="test-model", context_length=128_000),
                                model="test-model",
                                tools=registry,
                            )
                            await agent.run_turn([], {"role": "user", "content": f"turn {round_number}: anything new?"})
                            cpu[name].append((time.thread_time() - started) * 1000)
                            bodies[name] = len(llm.requests[-1].raw)
                        bar.update()
    finally:
        await mcp.aclose()
    return {
        name: {
            "cpu_ms_median": statistics.median(values),
            "cpu_ms_p90": quantile(values, 0.9),
            "request_bytes": bodies[name],
        }
        for name, values in cpu.items()
    }


async def measure(*, calls: int = 500, turns: int = 200, listed: int = 50) -> dict[str, Any]:
    return {
        "machine": {"python": sys.version.split()[0], "platform": platform.platform()},
        "calls": calls,
        "turns": turns,
        "listed": listed,
        "latency": await call_latency(calls),
        "turn_cpu": await turn_cpu(turns, listed),
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# foldgate bench tools",
        "",
        f"{result['calls']} sequential calls of one tool per transport, interleaved (wall time of the handler):",
        "",
        "| transport | p50 | p99 | added p50 | added p99 |",
        "|---|---|---|---|---|",
    ]
    for name, row in result["latency"].items():
        lines.append(
            f"| {name} | {row['p50_ms']:.3f} ms | {row['p99_ms']:.3f} ms | {row['added_p50_ms']:.3f} ms | "
            f"{row['added_p99_ms']:.3f} ms |"
        )
    lines += [
        "",
        f"One turn's CPU (the thread that runs it), {result['turns']} turns each, alternating:",
        "",
        "| tools offered | CPU per turn (median) | p90 | request body |",
        "|---|---|---|---|",
    ]
    for name, row in result["turn_cpu"].items():
        lines.append(
            f"| {name} | {row['cpu_ms_median']:.2f} ms | {row['cpu_ms_p90']:.2f} ms | {row['request_bytes']:,} bytes |"
        )
    return "\n".join(lines) + "\n"


def main(out_dir: str | Path, **options: Any) -> int:
    result = asyncio.run(measure(**options))
    publish(out_dir, "bench_tools", result, markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "evals/out"))
