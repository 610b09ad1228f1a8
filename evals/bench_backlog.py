"""``foldgate bench backlog``: turns and model calls a 2,000-message overnight backlog costs, and whether any
request passed the window.

One chat holds 2,000 waiting messages when the gateway starts (every one addressed to the bot,
the last a morning question about a decision made early in the night); the provider is the test
suite's fake, which refuses any prompt over its model's window, behind a gateway at 16K and at 128K,
and at 16K with a summarizer whose name no catalog knows (its window not configured; then really only
6K). The table counts what a person and an operator care about: replies sent, chat-model calls,
summarizer calls, requests refused as too long, compactions that fell back to the deterministic
notes, the largest prompt, whether the reply
answered from the night, and the wall time. With ``--baseline COMMIT`` the same measurement runs
on that commit's code beside this checkout's, in one command.
"""

from __future__ import annotations

import asyncio
import random
import re
import sys
import time
import uuid
from typing import Any

from redis.asyncio import Redis

from agent.compaction.summary_prompt import SECTION_HEADINGS, SYSTEM_PROMPT
from evals.redis_target import bench_redis
from evals.report import publish
from gateway.run.assembly import message_path
from tests.fakes.gateway import make_settings, message, running_gateway
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply, prompt_tokens

MESSAGES = 2_000
DECISION = "decision for the record: the login timeout fix ships in PR #4821 (commit 9f3c2ab71d), owner Emeka"
QUESTION = "Good morning! Which PR holds the login timeout fix?"
NOTES = "\n".join(f"{heading}\n- the night's chatter" for heading in SECTION_HEADINGS)
#: Files of this checkout the baseline runs with, so both trees are measured by the same code.
OVERLAY = ("evals/bench_backlog.py", "tests/fakes/llm_server.py")


def night(count: int, seed: int = 7) -> list[str]:
    """``count`` messages: a decision third, chatter around it, the morning question last."""
    rng = random.Random(seed)
    texts = [
        f"{index}: {rng.choice(('billing-api', 'auth-gateway', 'search-indexer', 'ledger'))} p99 "
        f"{rng.randint(20, 900)}ms in {rng.choice(('eu-west', 'us-east', 'ap-south'))}, queue depth "
        f"{rng.randint(2, 9000)}, restarted {rng.randint(1, 40)} pods, canary at {rng.choice((5, 25, 50))}%"
        for index in range(count - 1)
    ]
    texts.insert(2, DECISION)
    texts[-1] = QUESTION
    return texts


def model(request: RecordedRequest) -> Reply:
    """Answers from what it was sent; looks the night up with ``session_search`` when that is not enough."""
    if SYSTEM_PROMPT[:40] in request.system:
        return Reply.answer(NOTES)
    conversation = "\n".join(str(m.get("content")) for m in request.messages)
    found = re.search(r"PR #(\d+)[^\n\"]{0,40}login timeout|login timeout fix ships in PR #(\d+)", conversation)
    if found:
        return Reply.answer(f"The login timeout fix is in PR #{found.group(1) or found.group(2)}.")
    if request.messages and request.messages[-1].get("role") == "tool":
        return Reply.answer("I could not find it.")
    return Reply.tool_call("session_search", {"query": "login timeout fix PR"})


#: (label, chat window, summarizer model or None for the chat model itself, the summarizer's real window)
CASES: tuple[tuple[str, int, str | None, int | None], ...] = (
    ("chat model summarizes", 16_000, None, None),
    ("chat model summarizes", 128_000, None, None),
    ("unknown summarizer name", 16_000, "fake-summarizer", None),
    ("summarizer's real window 6K", 16_000, "fake-summarizer", 6_000),
)


async def one_case(
    redis: Redis, redis_url: str, label: str, window: int, summarizer: str | None, summarizer_window: int | None
) -> dict[str, Any]:
    prefix = f"fgbench-{uuid.uuid4().hex[:8]}"
    limits = {summarizer: summarizer_window} if summarizer and summarizer_window else {}
    async with FakeLLMServer(handler=model, context_limit=window, context_limits=limits) as server:
        extra: dict[str, Any] = {"auxiliary": {"compression": {"model": summarizer}}} if summarizer else {}
        settings = make_settings(redis_url, prefix, server.openai_base_url, context_length=window, **extra)
        _, inbox = message_path(redis, settings)
        for index, text in enumerate(night(MESSAGES)):
            await inbox.put(message("night", f"m-{index}", text))
        started = time.perf_counter()
        async with running_gateway(settings, redis, coalesce_backlog=True) as (runner, adapter, events):
            await runner.wait_idle(timeout=900)
        seconds = time.perf_counter() - started
    keys = [key async for key in redis.scan_iter(f"{prefix}*")]
    if keys:
        await redis.delete(*keys)
    completions = [r for r in server.requests if r.path.endswith("/completions")]
    summaries = [r for r in completions if SYSTEM_PROMPT[:40] in r.system]
    sizes = [prompt_tokens(r) for r in completions]
    folds = [e for e in events if getattr(e, "name", "") == "session:compress"]
    return {
        "case": label,
        "window": window,
        "messages": MESSAGES,
        "replies": len(adapter.sent),
        "chat_calls": len(completions) - len(summaries),
        "summarizer_calls": len(summaries),
        "refused": len(server.overflowed),
        "fallback_compactions": sum(1 for e in folds if getattr(e, "summarizer", "") == "fallback"),
        "compactions": len(folds),
        "largest_prompt": max(sizes, default=0),
        "answered_from_the_night": any("PR #4821" in text for _, text in adapter.sent[-1:]),
        "seconds": round(seconds, 2),
    }


async def measure() -> dict[str, Any]:
    async with bench_redis() as redis_url:
        redis = Redis.from_url(redis_url, decode_responses=True)
        try:
            rows = []
            for label, window, summarizer, summarizer_window in CASES:
                print(f"backlog: {MESSAGES:,} messages into a {window:,}-token window, {label} …", file=sys.stderr)
                rows.append(await one_case(redis, redis_url, label, window, summarizer, summarizer_window))
            return {"rows": rows}
        finally:
            await redis.aclose()


def table(rows: list[dict[str, Any]], label: str) -> list[str]:
    return [
        f"| {label} | {r.get('case', 'chat model summarizes')} | {r['window']:,} | {r['replies']} | "
        f"{r['chat_calls']} | {r['summarizer_calls']} | {r.get('refused', r.get('over_window', 0))} | "
        f"{r.get('fallback_compactions', '—')} of {r.get('compactions', '—')} | {r['largest_prompt']:,} | "
        f"{'yes' if r['answered_from_the_night'] else 'no'} | {r['seconds']:.1f} |"
        for r in rows
    ]


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"A {MESSAGES:,}-message backlog in one chat, every message addressed to the bot, against a provider "
        "that refuses prompts over each model's window:",
        "",
        "| code | case | chat window | replies | chat-model calls | summarizer calls | refused requests | "
        "compactions on the fallback notes | largest prompt | answered from the night | seconds |",
        "|---|---|---:|---:|---:|---:|---:|---|---:|---|---:|",
    ]
    lines += table(result["rows"], "this checkout")
    baseline = result.get("baseline")
    if baseline:
        lines += table(baseline["rows"], baseline["commit"])
    return "\n".join(lines)


def main(out_dir: str, *, baseline: str | None = None) -> int:
    result = asyncio.run(measure())
    if baseline:
        from evals.baseline import run_at

        result["baseline"] = {"commit": baseline, **run_at(baseline, "bench_backlog", overlay=OVERLAY)}
    publish(out_dir, "bench_backlog", {**result, "measured_at": time.strftime("%Y-%m-%d")}, markdown(result))
    return 0
