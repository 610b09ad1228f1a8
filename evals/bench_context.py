"""``foldgate bench context``: the prompt size of every model request over a long conversation, plotted.

Recorded conversations go through the whole gateway with :func:`gateway.cli.replay.replay`
(Redis, inbox, hygiene, the agent loop, compaction, commits; only the model and the
recording's own tools are played back) with a small window, so both compaction layers
have work to do:

- ``tests/fixtures/overnight_ops.jsonl`` — an evening of tool use, an overnight backlog of
  300 messages the bot only records, a morning question;
- a longer conversation built from a generated session (``evals.fixtures``, the same
  generator as the compaction eval) converted to the replay format, with an overnight
  backlog of teammates' remarks and pasted alerts inserted at ``BACKLOG_AT`` of its turns.

Each conversation is replayed twice: as configured (compression on), and with
compression off, which gives the prompt each request would have carried had nothing
been compacted. ``<out>/context_over_time.png`` draws both, the 50% in-loop and 85%
hygiene thresholds, and every compaction, marked by its trigger.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from evals.report import PLOT_EXTRA_HINT, publish

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "overnight_ops.jsonl"
FIXTURE_WINDOW = 16_000
GENERATED_TOKENS = 200_000
GENERATED_WINDOW = 64_000
SEED = 7
UNBOUNDED_WINDOW = 10_000_000
#: Where the overnight backlog goes in the generated conversation (fraction of its turns).
BACKLOG_AT = 0.6
#: Size of that backlog as a fraction of the window: above hygiene's 85% on its own.
BACKLOG_FRACTION = 0.9
IN_LOOP_THRESHOLD = 0.50
HYGIENE_THRESHOLD = 0.85


@dataclass
class Conversation:
    name: str
    path: Path
    window: int
    description: str


# ------------------------------------------------------------------------ a generated conversation as a replay fixture


def _epoch(stamp: Any, fallback: float) -> float:
    if isinstance(stamp, (int, float)):
        return float(stamp)
    try:
        return datetime.fromisoformat(str(stamp)).timestamp()
    except ValueError:
        return fallback


def records_from_session(messages: Sequence[Mapping[str, Any]], chat: str) -> list[dict[str, Any]]:
    """OpenAI-format messages → replay records: users speak, the assistant's answers and tool results are played back.

    A user message followed by another user message is recorded without a turn (``respond: false``).
    The system prompt is the gateway's own, so the recording's is dropped.
    """
    records: list[dict[str, Any]] = []
    clock = 1_764_450_000.0
    body = [message for message in messages if message.get("role") != "system"]
    for index, message in enumerate(body):
        role = message.get("role")
        clock = _epoch(message.get("_ts"), clock + 1)
        if role == "user":
            following = body[index + 1]["role"] if index + 1 < len(body) else None
            records.append(
                {
                    "kind": "message",
                    "chat": chat,
                    "text": str(message.get("content") or ""),
                    "ts": clock,
                    "respond": following not in (None, "user"),
                }
            )
        elif role == "assistant":
            record: dict[str, Any] = {"kind": "model", "text": str(message.get("content") or "")}
            if message.get("tool_calls"):
                record["tool_calls"] = [dict(call) for call in message["tool_calls"]]
            records.append(record)
        elif role == "tool":
            records.append({"kind": "tool", "content": str(message.get("content") or "")})
    return records


def overnight_backlog(seed: int, size: int, tokens: int, chat: str) -> list[dict[str, Any]]:
    """Messages the bot only records overnight: teammates' remarks and pasted alerts, about ``tokens`` tokens."""
    from agent.tokens import count_message
    from evals.fixtures import chatter, outputs
    from evals.fixtures.lexicon import make_world

    # The generator builds its world first from this seed string, so the backlog talks about the same project.
    world = make_world(random.Random(f"foldgate-fixture:{seed}:{size}"))
    rng = random.Random(f"foldgate-bench-backlog:{seed}:{size}")
    records: list[dict[str, Any]] = []
    total = 0
    while total < tokens:
        if rng.random() < 0.3:
            _name, _arguments, text = outputs.random_output(rng, world, rng.randrange(600, 3_000))
            text = "pasting from #alerts:\n" + text
        else:
            text = chatter.user_remark(rng, world, (1 + len(records) // 40) % 24)
        records.append({"kind": "message", "chat": chat, "text": text, "respond": False})
        total += count_message({"role": "user", "content": text})
    return records


def generated_conversation(path: Path, tokens: int, window: int, seed: int = SEED) -> dict[str, Any]:
    """Write a replay fixture from a generated session plus an overnight backlog; returns what it holds."""
    from evals.fixtures.session import generate_session, session_name

    session = generate_session(session_name(tokens, seed), tokens, seed)
    chat = "night"
    records = records_from_session(session.messages, chat)
    turns = [index for index, record in enumerate(records) if record["kind"] == "message" and record["respond"]]
    at = turns[int(len(turns) * BACKLOG_AT)]
    backlog = overnight_backlog(seed, tokens, int(window * BACKLOG_FRACTION), chat)
    # Stamped evenly between the last message before the backlog and the one it precedes.
    previous = max((float(r["ts"]) for r in records[:at] if "ts" in r), default=float(records[at]["ts"]) - 3_600)
    step = (float(records[at]["ts"]) - previous) / (len(backlog) + 1)
    for number, record in enumerate(backlog, start=1):
        record["ts"] = previous + number * step
    records[at:at] = backlog
    path.write_text("".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records), encoding="utf-8")
    return {
        "session": session.name,
        "session_tokens": session.tokens,
        "records": len(records),
        "turns": len(turns),
        "backlog_messages": len(backlog),
        "backlog_after_turn": turns.index(at),
    }


# --------------------------------------------------------------------------- replay and measure


async def replay_once(path: Path, window: int, redis_url: str, *, compression: bool) -> Any:
    from evals.bench_throughput import _drop_prefix
    from gateway.cli.replay import load_fixture, replay
    from gateway.config import Settings

    prefix = f"fgbench-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory(prefix="fg-bench-", ignore_cleanup_errors=True) as home:
        settings = Settings(
            redis={"url": redis_url, "key_prefix": prefix},
            model={"name": "replayed-model", "provider": "local", "context_length": window},
            platforms={"local": {"enabled": True}},
            gateway={"home": home},
            compression={"enabled": compression},
        )
        try:
            return await replay(settings, load_fixture(path), out=sys.stderr)
        finally:
            await _drop_prefix(redis_url, prefix)


async def measure_conversation(conversation: Conversation, redis_url: str) -> dict[str, Any]:
    started = time.perf_counter()
    report = await replay_once(conversation.path, conversation.window, redis_url, compression=True)
    seconds = time.perf_counter() - started
    # The counterfactual: nothing compacts and nothing bounds a request by the window, so the model is
    # given a window no prompt reaches (a real one would make the agent's last check compact anyway).
    uncompacted = await replay_once(conversation.path, UNBOUNDED_WINDOW, redis_url, compression=False)
    window = conversation.window
    prompts = report.prompt_tokens
    result: dict[str, Any] = {
        "name": conversation.name,
        "description": conversation.description,
        "window": window,
        "turns": report.turns,
        "messages": report.messages,
        "requests": len(prompts),
        "hygiene_compactions": report.hygiene_compactions,
        "in_loop_compactions": report.in_loop_compactions,
        "peak_prompt_tokens": report.peak_prompt_tokens,
        "peak_percent": round(report.peak_percent, 1),
        "requests_over_window": sum(1 for tokens in prompts if tokens > window),
        "tokens_sent": report.tokens_sent,
        "uncompacted_peak_tokens": uncompacted.peak_prompt_tokens,
        "uncompacted_tokens_sent": uncompacted.tokens_sent,
        "replay_seconds": round(seconds, 2),
        "prompt_tokens": prompts,
        "uncompacted_prompt_tokens": uncompacted.prompt_tokens,
        "compactions": [
            {"after_request": number, "tokens_after": tokens, "trigger": trigger}
            for number, tokens, trigger in report.timeline
        ],
    }
    result["compaction_points"] = compaction_points(prompts, result["compactions"])
    return result


def compaction_points(prompts: Sequence[int], events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Where each compaction sits between requests: ``{"before_request": n, "tokens": …, "trigger": …}``.

    Hygiene runs before a turn, so its event already names the request it precedes. The
    in-loop compressor runs between requests inside a turn but is reported when the turn
    commits; nothing else shrinks a prompt within a turn, so it is placed at each drop of
    the prompt size since the previous event (``tokens`` is then the next request's prompt).
    """
    points: list[dict[str, Any]] = []
    previous = 0
    for event in events:
        end = int(event["after_request"])
        if event["trigger"] != "in_loop":
            points.append({"before_request": end + 1, "tokens": event["tokens_after"], "trigger": event["trigger"]})
        else:
            drops = [j for j in range(previous + 1, min(end, len(prompts))) if prompts[j] < prompts[j - 1]]
            for j in drops or [end]:
                tokens = prompts[j] if j < len(prompts) else event["tokens_after"]
                points.append({"before_request": j + 1, "tokens": tokens, "trigger": "in_loop"})
        previous = end
    return points


def plot(results: Sequence[Mapping[str, Any]], path: Path) -> None:
    """One panel per conversation: prompt tokens per request, thresholds, compactions by trigger."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(len(results), 1, figsize=(11, 3.9 * len(results)), squeeze=False)
    styles = {
        "hygiene": ("tab:red", "v", "hygiene (85%, before the turn)"),
        "in_loop": ("tab:green", "o", "in-loop compressor (50%)"),
    }
    for axis, result in zip(axes[:, 0], results):
        window = result["window"]
        prompts = result["prompt_tokens"]
        requests = range(1, len(prompts) + 1)
        uncompacted = result["uncompacted_prompt_tokens"]
        if len(uncompacted) == len(prompts):
            axis.plot(
                requests,
                uncompacted,
                color="0.6",
                linewidth=1,
                linestyle=":",
                label=f"without compaction (peak {max(uncompacted, default=0):,})",
            )
        axis.plot(requests, prompts, color="tab:blue", linewidth=1.2, label="prompt tokens per request")
        axis.axhline(window, color="black", linewidth=1, label=f"window ({window:,})")
        axis.axhline(window * HYGIENE_THRESHOLD, color="tab:red", linewidth=0.8, linestyle="--")
        axis.axhline(window * IN_LOOP_THRESHOLD, color="tab:green", linewidth=0.8, linestyle="--")
        labelled: set[str] = set()
        for point in result["compaction_points"]:
            colour, marker, label = styles.get(point["trigger"], ("tab:purple", "s", point["trigger"]))
            x = point["before_request"] - 0.5
            axis.axvline(x, color=colour, linewidth=0.6, alpha=0.5)
            axis.plot(
                [x],
                [point["tokens"]],
                marker=marker,
                color=colour,
                markersize=6,
                linestyle="none",
                label=None if point["trigger"] in labelled else label,
            )
            labelled.add(point["trigger"])
        axis.set_ylim(0, window * 1.15)
        axis.set_xlim(0, len(prompts) + 1)
        axis.set_ylabel("prompt tokens")
        axis.set_title(
            f"{result['name']}: {result['messages']:,} incoming messages, {result['turns']} turns, "
            f"{result['requests']} requests — "
            f"peak {result['peak_percent']:.0f}% of the window, {result['hygiene_compactions']} hygiene + "
            f"{result['in_loop_compactions']} in-loop compactions",
            fontsize=9,
        )
        axis.grid(True, alpha=0.3)
        axis.legend(loc="upper left", fontsize=7, ncol=3)
    axes[-1, 0].set_xlabel(
        "model request number (a marker sits between the requests a compaction separates, at the size that followed it)"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


async def measure(
    generated_tokens: int = GENERATED_TOKENS,
    generated_window: int = GENERATED_WINDOW,
    fixture: Path = FIXTURE,
    fixture_window: int = FIXTURE_WINDOW,
    seed: int = SEED,
    redis_url: str | None = None,
) -> dict[str, Any]:
    """``redis_url``: None picks 127.0.0.1:6379 when it answers; "" runs the embedded server."""
    from evals.bench_throughput import describe_redis, local_redis_url

    if redis_url is None:
        redis_url = await local_redis_url()
    conversations = [Conversation(fixture.stem, fixture, fixture_window, "recorded fixture (tests/fixtures)")]
    built: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="fg-bench-context-") as scratch:
        if generated_tokens:
            path = Path(scratch) / "generated.jsonl"
            built = generated_conversation(path, generated_tokens, generated_window, seed)
            conversations.append(
                Conversation(
                    f"{built['session']} + overnight backlog",
                    path,
                    generated_window,
                    f"generated session (seed {seed}) replayed as a conversation; {built['backlog_messages']} backlog "
                    f"messages after turn {built['backlog_after_turn']} of {built['turns']}",
                )
            )
        results = [await measure_conversation(conversation, redis_url) for conversation in conversations]
    return {
        "measured_at": time.strftime("%Y-%m-%d"),
        "redis": describe_redis(redis_url),
        "summarizer": "deterministic summary (no summarizer configured)",
        "generated": built,
        "conversations": results,
    }


def table(result: Mapping[str, Any]) -> str:
    lines = [
        "Context size per model request, replayed through the whole gateway (deterministic summary):",
        "",
        "| conversation | window | turns | requests | hygiene | in-loop | peak | over window | tokens sent "
        "| without compaction: peak | tokens sent |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["conversations"]:
        lines.append(
            f"| {row['name']} | {row['window']:,} | {row['turns']} | {row['requests']} | "
            f"{row['hygiene_compactions']} | {row['in_loop_compactions']} | "
            f"{row['peak_prompt_tokens']:,} ({row['peak_percent']:.0f}%) | {row['requests_over_window']} | "
            f"{row['tokens_sent']:,} | {row['uncompacted_peak_tokens']:,} | {row['uncompacted_tokens_sent']:,} |"
        )
    return "\n".join(lines) + "\n"


def main(out_dir: str | Path, **options: Any) -> int:
    result = asyncio.run(measure(**options))
    out = publish(out_dir, "bench_context", result, table(result))
    try:
        plot(result["conversations"], out / "context_over_time.png")
    except ImportError as error:
        if (error.name or "").split(".")[0] != "matplotlib":
            raise
        print(
            f"foldgate bench context: no plot, matplotlib is not installed; {PLOT_EXTRA_HINT} adds "
            "context_over_time.png",
            file=sys.stderr,
        )
        return 0
    print(f"plot: {out / 'context_over_time.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "evals/out"))
