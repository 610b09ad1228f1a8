"""``foldgate bench backlog``: turns and model calls a 2,000-message overnight backlog costs, and whether any request passed the window.

One chat holds 2,000 waiting messages when the gateway starts (every one addressed to the bot,
the last a morning question about a decision made early in the night); the provider is the test
suite's fake, which refuses any prompt over its window, behind a gateway at 16K and at 128K. The
table counts what a person and an operator care about: replies sent, chat-model calls,
summarizer calls, requests that arrived over the window, the largest prompt, whether the reply
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

WINDOWS = (16_000, 128_000)
MESSAGES = 2_000
DECISION = "decision for the record: the login timeout fix ships in PR #4821 (commit 9f3c2ab71d), owner Emeka"
QUESTION = "Good morning! Which PR holds the login timeout fix?"
NOTES = "\n".join(f"{heading}\n- the night's chatter" for heading in SECTION_HEADINGS)
#: Files of this checkout the baseline runs with, so both trees are measured by the same code.
OVERLAY = ("evals/bench_backlog.py", "tests/fakes/llm_server.py")


def night(count: int, seed: int = 7) -> list[str]:
    """``count`` messages: a decision third, chatter around it, the morning question last."""
    rng = random.Random(seed)
    texts = [f"{index}: {rng.choice(('billing-api', 'auth-gateway', 'search-indexer', 'ledger'))} p99 "
             f"{rng.randint(20, 900)}ms in {rng.choice(('eu-west', 'us-east', 'ap-south'))}, queue depth "
             f"{rng.randint(2, 9000)}, restarted {rng.randint(1, 40)} pods, canary at {rng.choice((5, 25, 50))}%"
             for index in range(count - 1)]
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


async def one_window(redis: Redis, redis_url: str, window: int) -> dict[str, Any]:
    prefix = f"fgbench-{uuid.uuid4().hex[:8]}"
    async with FakeLLMServer(handler=model, context_limit=window) as server:
        settings = make_settings(redis_url, prefix, server.openai_base_url, context_length=window)
        _, inbox = message_path(redis, settings)
        for index, text in enumerate(night(MESSAGES)):
            await inbox.put(message("night", f"m-{index}", text))
        started = time.perf_counter()
        async with running_gateway(settings, redis, coalesce_backlog=True) as (runner, adapter, _):
            await runner.wait_idle(timeout=900)
        seconds = time.perf_counter() - started
    keys = [key async for key in redis.scan_iter(f"{prefix}*")]
    if keys:
        await redis.delete(*keys)
    summaries = [r for r in server.requests if SYSTEM_PROMPT[:40] in r.system]
    sizes = [prompt_tokens(r) for r in server.requests]
    return {
        "window": window,
        "messages": MESSAGES,
        "replies": len(adapter.sent),
        "chat_calls": len(server.requests) - len(summaries),
        "summarizer_calls": len(summaries),
        "over_window": sum(1 for size in sizes if size > window),
        "largest_prompt": max(sizes, default=0),
        "answered_from_the_night": any("PR #4821" in text for _, text in adapter.sent[-1:]),
        "seconds": round(seconds, 2),
    }


async def measure() -> dict[str, Any]:
    async with bench_redis() as redis_url:
        redis = Redis.from_url(redis_url, decode_responses=True)
        try:
            rows = []
            for window in WINDOWS:
                print(f"backlog: {MESSAGES:,} messages into a {window:,}-token window …", file=sys.stderr)
                rows.append(await one_window(redis, redis_url, window))
            return {"rows": rows}
        finally:
            await redis.aclose()


def table(rows: list[dict[str, Any]], label: str) -> list[str]:
    return [f"| {label} | {r['window']:,} | {r['replies']} | {r['chat_calls']} | {r['summarizer_calls']} | "
            f"{r['over_window']} | {r['largest_prompt']:,} | {'yes' if r['answered_from_the_night'] else 'no'} | "
            f"{r['seconds']:.1f} |" for r in rows]


def markdown(result: dict[str, Any]) -> str:
    lines = [f"A {MESSAGES:,}-message backlog in one chat, every message addressed to the bot, against a provider "
             "that refuses prompts over its window:", "",
             "| code | window | replies | chat-model calls | summarizer calls | requests over the window | "
             "largest prompt | answered from the night | seconds |",
             "|---|---:|---:|---:|---:|---:|---:|---|---:|"]
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
