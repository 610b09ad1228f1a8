"""``foldgate bench bots``: memory and CPU per added bot, with 1, 10 and 50 Telegram bots in one process.

One gateway process (a child process, so its memory and CPU are its own) opens a fleet of N bots as
``foldgate run`` opens ``bots:`` (:class:`gateway.bots.Fleet`, real Redis, one key prefix per bot), each
bot a Telegram bot polling its own fake Bot API (tests/fakes/bot_api.py, a different token each) with
the long poll as deployed (``getUpdates`` timeout 25 s) while it holds its polling lease
(gateway/store/leases.py, renewed every second), and the model ``provider: custom`` pointed at the fake
OpenAI-compatible server of tests/fakes/llm_server.py. The fakes run in this (the parent) process, so
their CPU is not the measured process's.

Per run, in the child:

- *start*: the seconds from ``Fleet.open`` until every bot receives (``start_receiving`` returned and
  every polling lease is held), and the CPU they took; the parent also times its spawn until every
  fake Bot API saw its first ``getUpdates`` (the interpreter start and imports included);
- *idle*: after a short settle, the process's CPU time (``time.process_time``, every thread) over
  :data:`IDLE_SECONDS` of doing nothing but polling and renewing leases, its resident set (``VmRSS``
  of ``/proc/self/status``) then, and the Redis commands it sent (counted in the process, on its
  channels and redis-py clients: the server may be shared);
- *load*: one message per bot first (the warm-up: every code path run once, sessions created), then
  :data:`MESSAGES_PER_BOT` private messages per bot, each from a chat of its own, pushed to every
  fake at once; the CPU time from just before the push until every one was answered and every
  runner idle, per message, and the resident set after.

Each size runs in a fresh process, the sizes interleaved and their order reversed every other
repetition, so the machine's drift falls on all of them alike; the figures are the medians of the
repetitions, and what a bot adds is the difference to the smallest size divided by the bots added.
``FOLDGATE_BENCH_BOTS_SIZES`` (``1,2``), ``…_REPEATS``, ``…_IDLE_SECONDS``, ``…_SETTLE_SECONDS`` and
``…_MESSAGES`` change the run (``main``'s keyword arguments override them).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evals.child_process import MeasuredChild
from evals.report import progress, publish

SIZES: tuple[int, ...] = (1, 10, 50)
REPEATS = 3
IDLE_SECONDS = 10.0
SETTLE_SECONDS = 2.0
MESSAGES_PER_BOT = 20
FIRST_BOT_ID = 800_000
#: Chats of bot i are FIRST_CHAT + i * CHATS_PER_BOT + k: every message comes from a chat of its own.
FIRST_CHAT = 5_000_000
CHATS_PER_BOT = 1_000
ANSWER = "Noted, thanks."
START_TIMEOUT = 180.0
LOAD_TIMEOUT = 300.0
ENV = "FOLDGATE_BENCH_BOTS_"


def token(index: int) -> str:
    return f"{FIRST_BOT_ID + index}:bench-token-{index}"


# --------------------------------------------------------------------------- the measured process


def _memory_kb(field: str = "VmRSS") -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _say(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def fleet_settings(config: Mapping[str, Any]) -> Any:
    from gateway.config import Settings

    return Settings(
        redis={"url": config["redis_url"], "key_prefix": config["prefix"]},
        model={"name": "bench-model", "provider": "custom", "base_url": config["llm_url"], "context_length": 128_000},
        platforms={"local": {"enabled": False}},
        gateway={"home": config["home"]},
        bots=[
            {
                "name": f"b{index:02d}",
                "platforms": {"telegram": {"enabled": True, "token": bot_token, "api_server": api_server}},
            }
            for index, (bot_token, api_server) in enumerate(config["bots"])
        ],
    )


#: Redis commands this process sent, counted in :func:`count_redis_commands`'s wrappers.
COMMANDS = [0]


def count_redis_commands() -> None:
    """Count every command the process sends: the pipelined channels (message path, leases) and redis-py's
    client and pipelines. Plain functions around the originals, so the channel's fast path (a future, no
    coroutine) stays as it is; the count costs well under a microsecond a command."""
    from redis.asyncio.client import Pipeline, Redis

    from gateway.store.channel import PipelinedConnection

    call, in_order = PipelinedConnection.call, PipelinedConnection.call_in_order
    execute_command, execute = Redis.execute_command, Pipeline.execute

    def counted_call(self: Any, *args: Any) -> Any:
        COMMANDS[0] += 1
        return call(self, *args)

    def counted_in_order(self: Any, *commands: Any) -> Any:
        COMMANDS[0] += len(commands)
        return in_order(self, *commands)

    def counted_command(self: Any, *args: Any, **options: Any) -> Any:
        COMMANDS[0] += 1
        return execute_command(self, *args, **options)

    def counted_execute(self: Any, *args: Any, **options: Any) -> Any:
        COMMANDS[0] += len(self.command_stack)
        return execute(self, *args, **options)

    PipelinedConnection.call = counted_call  # type: ignore[method-assign]
    PipelinedConnection.call_in_order = counted_in_order  # type: ignore[method-assign]
    Redis.execute_command = counted_command  # type: ignore[method-assign]
    Pipeline.execute = counted_execute  # type: ignore[method-assign]


async def _fleet_child(config: Mapping[str, Any]) -> None:
    """The measured process: the fleet; answers ``idle SETTLE SECONDS``, ``mark``, ``report`` and ``stop`` on stdin."""
    import gateway.platforms.telegram  # noqa: F401  (imported before the baseline: every bot needs it)
    from agent.tokens import encoding
    from gateway.bots import Fleet

    settings = fleet_settings(config)
    count_redis_commands()
    encoding()  # the tokenizer, loaded once per process by the first gateway: part of the baseline, not of a bot
    base_kb = _memory_kb()
    loop = asyncio.get_running_loop()
    wall, cpu = time.perf_counter(), time.process_time()
    fleet = await Fleet.open(settings, sys.stderr, exclusive=False, verify=False)
    try:
        opened = time.perf_counter()
        await fleet.start_receiving()
        receiving = time.perf_counter()
        leases = [lease for bot in fleet.running.values() for lease in bot.leases]
        await asyncio.wait_for(asyncio.gather(*(lease.wait_held() for lease in leases)), START_TIMEOUT)
        held = time.perf_counter()
        _say(
            ready=True,
            bots=len(fleet.running),
            leases=len(leases),
            failed=sorted(fleet.failures),
            open_s=opened - wall,
            receive_s=receiving - opened,
            start_s=held - wall,
            start_cpu_s=time.process_time() - cpu,
            base_rss_kb=base_kb,
            rss_kb=_memory_kb(),
        )
        runners = [gateway.runner for gateway in fleet.gateways().values()]
        marked, commands = (0.0, 0.0), 0
        while (command := (await loop.run_in_executor(None, sys.stdin.readline)).split()) != ["stop"]:
            if not command:  # the parent went away
                break
            if command[0] == "idle":
                await asyncio.sleep(float(command[1]))
                before_kb, commands = _memory_kb(), COMMANDS[0]
                wall, cpu = time.perf_counter(), time.process_time()
                await asyncio.sleep(float(command[2]))
                cpu_s, wall_s = time.process_time() - cpu, time.perf_counter() - wall
                _say(
                    idle=True,
                    cpu_s=cpu_s,
                    wall_s=wall_s,
                    rss_before_kb=before_kb,
                    rss_kb=_memory_kb(),
                    redis_commands=COMMANDS[0] - commands,
                )
            elif command[0] == "mark":
                await asyncio.gather(*(runner.wait_idle(timeout=LOAD_TIMEOUT) for runner in runners))
                commands = COMMANDS[0]
                marked = (time.perf_counter(), time.process_time())
                _say(marked=True, rss_kb=_memory_kb())
            elif command[0] == "report":
                await asyncio.gather(*(runner.wait_idle(timeout=LOAD_TIMEOUT) for runner in runners))
                cpu_s, wall_s = time.process_time() - marked[1], time.perf_counter() - marked[0]
                _say(
                    reported=True,
                    cpu_s=cpu_s,
                    wall_s=wall_s,
                    rss_kb=_memory_kb(),
                    hwm_kb=_memory_kb("VmHWM"),
                    redis_commands=COMMANDS[0] - commands,
                )
    finally:
        await fleet.close(grace_seconds=0)


# --------------------------------------------------------------------------- one run


def _chat(bot: int, number: int) -> int:
    return FIRST_CHAT + bot * CHATS_PER_BOT + number


async def _answered(apis: Sequence[Any], chats: Sequence[Sequence[int]], timeout: float) -> None:
    """Until every bot's fake saw a message sent to each of its ``chats``."""

    async def one(api: Any, wanted: Sequence[int]) -> None:
        await api.wait_until(
            lambda: all(Counter(sent.chat_id for sent in api.sent).get(str(chat), 0) >= 1 for chat in wanted),
            timeout=timeout,
        )

    await asyncio.gather(*(one(api, wanted) for api, wanted in zip(apis, chats)))


async def run_once(
    redis_url: str, size: int, *, idle_seconds: float, settle_seconds: float, messages_per_bot: int
) -> dict[str, Any]:
    """One fresh fleet process of ``size`` bots: started, idle, then loaded; what it took."""
    from tests.fakes.bot_api import FakeBotAPI
    from tests.fakes.llm_server import FakeLLMServer, Reply

    prefix = f"fgbench-bots-{uuid.uuid4().hex[:8]}"
    try:
        with tempfile.TemporaryDirectory(prefix="fg-bench-", ignore_cleanup_errors=True) as home:
            async with contextlib.AsyncExitStack() as stack:
                llm = await stack.enter_async_context(FakeLLMServer(default=Reply.answer(ANSWER)))
                apis = [
                    await stack.enter_async_context(FakeBotAPI(token(index), username=f"bench_{index}_bot"))
                    for index in range(size)
                ]
                config = {
                    "redis_url": redis_url,
                    "prefix": prefix,
                    "home": home,
                    "llm_url": llm.openai_base_url,
                    "bots": [(api.token, api.base_url) for api in apis],
                }
                spawned = time.perf_counter()
                child = MeasuredChild("evals.bench_bots", "--fleet", config)
                try:
                    ready = await child.ask(timeout=START_TIMEOUT)
                    if ready["bots"] != size or ready["failed"]:
                        raise RuntimeError(f"{ready['bots']} of {size} bots started; failed: {ready['failed']}")
                    await asyncio.gather(
                        *(api.wait_until(lambda api=api: bool(api.get_updates_calls), START_TIMEOUT) for api in apis)
                    )
                    polling_s = time.perf_counter() - spawned
                    idle = await child.ask(
                        f"idle {settle_seconds} {idle_seconds}", timeout=settle_seconds + idle_seconds + 60
                    )
                    warm = [[_chat(bot, CHATS_PER_BOT - 1)] for bot in range(size)]
                    for api, chats in zip(apis, warm):
                        api.push(*(api.private_message(chat, "hello, are you there?") for chat in chats))
                    await _answered(apis, warm, LOAD_TIMEOUT)
                    await child.ask("mark", timeout=LOAD_TIMEOUT)
                    load = [[_chat(bot, number) for number in range(messages_per_bot)] for bot in range(size)]
                    pushed = time.perf_counter()
                    for api, chats in zip(apis, load):
                        api.push(
                            *(
                                api.private_message(chat, f"message {chat}: the nightly export, did it run?")
                                for chat in chats
                            )
                        )
                    await _answered(apis, load, LOAD_TIMEOUT)
                    answered_s = time.perf_counter() - pushed
                    report = await child.ask("report", timeout=LOAD_TIMEOUT)
                finally:
                    child.stop()
                sends = sum(len(api.sent) for api in apis)
                get_updates = sum(len(api.get_updates_calls) for api in apis)
                model_requests = len(llm.requests)
    finally:
        await _drop_prefix(redis_url, prefix)
    messages = size * messages_per_bot
    idle_cpu_percent = 100 * idle["cpu_s"] / idle["wall_s"]
    return {
        "bots": size,
        "start_s": round(ready["start_s"], 3),
        "open_s": round(ready["open_s"], 3),
        "receive_s": round(ready["receive_s"], 3),
        "start_cpu_s": round(ready["start_cpu_s"], 3),
        "spawn_to_polling_s": round(polling_s, 3),
        "base_rss_mb": round(ready["base_rss_kb"] / 1024, 2),
        "started_rss_mb": round(ready["rss_kb"] / 1024, 2),
        "idle_rss_mb": round(idle["rss_kb"] / 1024, 2),
        "idle_seconds": round(idle["wall_s"], 3),
        "idle_cpu_s": round(idle["cpu_s"], 4),
        "idle_cpu_percent": round(idle_cpu_percent, 3),
        "messages": messages,
        "load_seconds": round(report["wall_s"], 3),
        "answered_s": round(answered_s, 3),
        "load_cpu_s": round(report["cpu_s"], 4),
        "cpu_ms_per_message": round(1000 * report["cpu_s"] / messages, 3),
        # the same less what the process spends idle over as long (polling, leases): the messages' own share
        "cpu_ms_per_message_net": round(
            1000 * (report["cpu_s"] - idle_cpu_percent / 100 * report["wall_s"]) / messages, 3
        ),
        "idle_redis_commands_per_s": round(idle["redis_commands"] / idle["wall_s"], 1),
        "redis_commands_per_message": round(report["redis_commands"] / messages, 2),
        "loaded_rss_mb": round(report["rss_kb"] / 1024, 2),
        "peak_rss_mb": round(report["hwm_kb"] / 1024, 2),
        "bot_api_sends": sends,
        "get_updates_calls": get_updates,
        "model_requests": model_requests,
    }


async def _drop_prefix(redis_url: str, prefix: str) -> None:
    """Every key of the run: the process's (``<prefix>:…``, the leases) and its bots' (``<prefix>.<bot>:…``)."""
    from redis.asyncio import Redis

    from gateway.store.keys import glob_escape

    client = Redis.from_url(redis_url)
    try:
        for pattern in (glob_escape(prefix) + ":*", glob_escape(prefix) + ".*"):
            keys = [key async for key in client.scan_iter(match=pattern, count=1000)]
            for start in range(0, len(keys), 500):
                await client.delete(*keys[start : start + 500])
    finally:
        await client.aclose()


# --------------------------------------------------------------------------- the whole run


def _median(runs: Sequence[Mapping[str, Any]], key: str) -> float:
    return float(statistics.median(run[key] for run in runs))


def summarize(runs: Sequence[Mapping[str, Any]], sizes: Sequence[int]) -> list[dict[str, Any]]:
    """Per size the medians of its runs, and what each bot over the smallest size added."""
    keys = (
        "start_s",
        "open_s",
        "receive_s",
        "start_cpu_s",
        "spawn_to_polling_s",
        "base_rss_mb",
        "started_rss_mb",
        "idle_rss_mb",
        "idle_cpu_percent",
        "cpu_ms_per_message",
        "cpu_ms_per_message_net",
        "loaded_rss_mb",
        "peak_rss_mb",
        "idle_redis_commands_per_s",
        "redis_commands_per_message",
    )
    rows = []
    for size in sizes:
        mine = [run for run in runs if run["bots"] == size]
        row: dict[str, Any] = {"bots": size, "runs": len(mine)}
        row.update({key: round(_median(mine, key), 3) for key in keys})
        row["idle_rss_mb_range"] = [min(run["idle_rss_mb"] for run in mine), max(run["idle_rss_mb"] for run in mine)]
        row["idle_cpu_percent_range"] = [
            min(run["idle_cpu_percent"] for run in mine),
            max(run["idle_cpu_percent"] for run in mine),
        ]
        row["cpu_ms_per_message_range"] = [
            min(run["cpu_ms_per_message"] for run in mine),
            max(run["cpu_ms_per_message"] for run in mine),
        ]
        row["idle_rss_mb_per_bot_over_base"] = round((row["idle_rss_mb"] - row["base_rss_mb"]) / size, 3)
        row["idle_cpu_percent_per_bot"] = round(row["idle_cpu_percent"] / size, 4)
        rows.append(row)
    first = rows[0]
    for row in rows:
        added = row["bots"] - first["bots"]
        row["per_added_bot"] = {
            key: round((row[key] - first[key]) / added, 4) if added else None
            for key in (
                "idle_rss_mb",
                "loaded_rss_mb",
                "idle_cpu_percent",
                "start_s",
                "idle_redis_commands_per_s",
                "start_cpu_s",
            )
        }
    return rows


def _sizes(value: Any) -> tuple[int, ...]:
    sizes = (
        tuple(int(part) for part in str(value).split(",") if part.strip()) if isinstance(value, str) else tuple(value)
    )
    if not sizes or any(size < 1 for size in sizes):
        raise ValueError(f"sizes must be positive bot counts, not {value!r}")
    return tuple(sorted(set(sizes)))


def _setting(given: Any, name: str, default: Any, kind: Any) -> Any:
    if given is not None:
        return given
    raw = os.environ.get(ENV + name, "").strip()
    return kind(raw) if raw else default


async def measure(
    *,
    sizes: Sequence[int] | str | None = None,
    repeats: int | None = None,
    idle_seconds: float | None = None,
    settle_seconds: float | None = None,
    messages_per_bot: int | None = None,
    redis_url: str | None = None,
) -> dict[str, Any]:
    """Every size ``repeats`` times, each in a fresh process, interleaved; ``redis_url`` None picks
    127.0.0.1:6379 when it answers, else (and for "") an embedded server started here for the run."""
    from evals.bench_throughput import describe_redis, local_redis_url, reference_loop_ms
    from gateway.server.lifecycle import connect_or_embed

    chosen = _sizes(_setting(sizes, "SIZES", SIZES, str))
    repeats = _setting(repeats, "REPEATS", REPEATS, int)
    idle_seconds = _setting(idle_seconds, "IDLE_SECONDS", IDLE_SECONDS, float)
    settle_seconds = _setting(settle_seconds, "SETTLE_SECONDS", SETTLE_SECONDS, float)
    messages_per_bot = _setting(messages_per_bot, "MESSAGES", MESSAGES_PER_BOT, int)
    # rep 0 small to large, rep 1 large to small, …: drift over the run falls on every size alike
    order = [size for rep in range(repeats) for size in (chosen if rep % 2 == 0 else chosen[::-1])]
    url = await local_redis_url() if redis_url is None else redis_url
    load_before, yardstick_before = os.getloadavg(), reference_loop_ms()
    runs: list[dict[str, Any]] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fg-bench-redis-", ignore_cleanup_errors=True) as home:
        client, embedded = (None, None) if url else await connect_or_embed(None, Path(home))
        try:
            serving = url or (embedded.url if embedded is not None else "")
            with progress(len(order), "run", "bench bots") as bar:
                for number, size in enumerate(order):
                    bar.update(number, note=f"{size} bots")
                    run = await run_once(
                        serving,
                        size,
                        idle_seconds=idle_seconds,
                        settle_seconds=settle_seconds,
                        messages_per_bot=messages_per_bot,
                    )
                    run["order"] = number
                    runs.append(run)
                bar.update(len(order), note="")
        finally:
            if client is not None:
                await client.aclose()
            if embedded is not None:
                await embedded.stop()
    return {
        "measured_at": time.strftime("%Y-%m-%d %H:%M"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_average_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
            "reference_loop_ms_before_after": [yardstick_before, reference_loop_ms()],
        },
        "redis": describe_redis(url),
        "sizes": list(chosen),
        "repeats": repeats,
        "idle_seconds": idle_seconds,
        "settle_seconds": settle_seconds,
        "messages_per_bot": messages_per_bot,
        "poll_timeout_s": 25,
        "total_seconds": round(time.perf_counter() - started, 1),
        "rows": summarize(runs, chosen),
        "runs": runs,
    }


# --------------------------------------------------------------------------- the report


def _per(value: float | None, digits: int, unit: str = "") -> str:
    return "—" if value is None else f"{value:+.{digits}f}{unit}"


def markdown(result: Mapping[str, Any]) -> str:
    rows, machine = result["rows"], result["machine"]
    smallest = rows[0]["bots"]
    lines = [
        f"# foldgate bench bots — {result['measured_at']}",
        "",
        f"N Telegram bots in one fleet process (`gateway.bots.Fleet`), each polling its own fake Bot API "
        f"(long poll {result['poll_timeout_s']} s, polling lease renewed every second), model `provider: custom` on "
        f"the fake OpenAI server; the fakes in the parent process. Redis {result['redis']}; {machine['cpus']} CPUs, "
        f"Python {machine['python']}. Medians of {result['repeats']} runs per size, each a fresh process, sizes "
        f"interleaved. Idle: {result['idle_seconds']:g} s after {result['settle_seconds']:g} s of settling; load: "
        f"{result['messages_per_bot']} private messages per bot (each its own chat) after one warm-up message per bot.",
        "",
        "| bots | RSS MB (idle) | MB per added bot | RSS MB after load | idle CPU % | idle CPU % per added bot "
        "| CPU ms/message | fleet start s | start s per added bot |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        per = row["per_added_bot"]
        lines.append(
            f"| {row['bots']} | {row['idle_rss_mb']:.1f} | {_per(per['idle_rss_mb'], 2)} | "
            f"{row['loaded_rss_mb']:.1f} | {row['idle_cpu_percent']:.2f} | {_per(per['idle_cpu_percent'], 3)} | "
            f"{row['cpu_ms_per_message']:.2f} | {row['start_s']:.2f} | {_per(per['start_s'], 3)} |"
        )
    lines += [
        "",
        f"Per added bot: the difference to {smallest} bot{'s' if smallest != 1 else ''}, divided by the bots added. "
        "RSS is `VmRSS`; CPU is `time.process_time()` of the fleet process (all its threads). CPU ms/message "
        "counts everything the process did from the push until every reply was sent and every runner idle "
        "(idle polling included).",
        "",
        "| bots | process before the fleet (MB) | RSS over it per bot (MB) | idle CPU % per bot "
        "| CPU ms/message net of idle | peak RSS MB | start CPU s | spawn → all polling s | Redis commands/s idle "
        "| Redis commands/message |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['bots']} | {row['base_rss_mb']:.1f} | {row['idle_rss_mb_per_bot_over_base']:.2f} | "
            f"{row['idle_cpu_percent_per_bot']:.3f} | {row['cpu_ms_per_message_net']:.2f} | {row['peak_rss_mb']:.1f} | "
            f"{row['start_cpu_s']:.2f} | {row['spawn_to_polling_s']:.2f} | {row['idle_redis_commands_per_s']:,.0f} | "
            f"{row['redis_commands_per_message']:.1f} |"
        )
    lines += [
        "",
        "Every run, in the order run (idle RSS MB / idle CPU % / CPU ms per message / fleet start s):",
        "",
    ]
    lines += [
        f"- {run['order'] + 1}. {run['bots']} bots: {run['idle_rss_mb']:.1f} / {run['idle_cpu_percent']:.2f} / "
        f"{run['cpu_ms_per_message']:.2f} / {run['start_s']:.2f}"
        for run in result["runs"]
    ]
    lines += [
        "",
        f"Load average {machine['load_average_before_after'][0]} before, {machine['load_average_before_after'][1]} "
        f"after; yardstick loop {machine['reference_loop_ms_before_after'][0]} ms before, "
        f"{machine['reference_loop_ms_before_after'][1]} ms after; the whole run took {result['total_seconds']:g} s.",
    ]
    return "\n".join(lines) + "\n"


def main(out_dir: str | Path, **options: Any) -> int:
    result = asyncio.run(measure(**options))
    publish(out_dir, "bench_bots", result, markdown(result))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--fleet":
        asyncio.run(_fleet_child(json.loads(sys.argv[2])))
        sys.exit(0)
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "evals/out"))
