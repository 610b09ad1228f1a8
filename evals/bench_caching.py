"""``foldgate bench caching``: what Anthropic prompt caching saves over a 200-turn conversation with compactions.

A generated evening-and-night coding session (user lines, tool calls with realistic
outputs, replies) is played turn by turn through the real :class:`agent.loop.Agent`, the
real :class:`agent.context_compressor.ContextCompressor` (summaries by an
:class:`~agent.compaction.summarizer.LLMSummarizer` on the same endpoint) and
:func:`agent.prompt_caching.apply_anthropic_cache_control`, against
:class:`tests.fakes.anthropic_cache.AnthropicCacheServer` — a fake messages API that caches
by Anthropic's documented rules (prefix match at breakpoints, at most four, a 20-block
lookback, a 5-minute lifetime refreshed on every hit, writes billed 1.25×, reads 0.1×).

Time is virtual: a user thinks 20 s – 3 min between messages, each model call takes a
few seconds, and every 25 turns there is a long break (8–40 minutes), which a 5-minute
cache does not survive. Compaction fires where the gateway would: in the tool loop at 50%,
and before a turn at 85% (hygiene). The window is set to 100K tokens so the session
compacts a dozen times in 200 turns. The session's short system prompt is extended with
tool documentation to about :data:`SYSTEM_TOKENS` tokens, the size of a typical agent
system prompt, so the one breakpoint that survives a compaction has something to hold.

Reported, per cache lifetime: the share of the conversation's input tokens read from the
cache, its input cost against the same tokens with no caching, the summarizer's calls
(which carry no breakpoints: their request is a re-rendered transcript that shares no
prefix with the conversation, so they are billed at the full input price either way), and
the cache-hit share of the conversation's requests just before and just after each
compaction. Goal: the conversation's input cost at most 25% of uncached (the seed reports
≈75% saved).
"""

from __future__ import annotations

import asyncio
import random
import statistics
from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.compaction.summarizer import LLMSummarizer
from agent.context_compressor import ContextCompressor
from agent.llm.client import ChatClient
from agent.loop import Agent
from agent.pricing import breakdown, uncached_cost
from agent.prompt_caching import plan_prompt_caching
from agent.settings import CompressionSettings
from agent.tokens import count_text
from agent.tools import Tool, ToolRegistry
from evals.fixtures.session import generate_session, session_name
from evals.report import progress, publish

MODEL = "claude-sonnet-4"
CONTEXT_LENGTH = 100_000
TURNS = 200
SEED = 11
TTLS = ("5m", "1h")
#: Hygiene's fixed share of the window, emulated between turns as the gateway does.
HYGIENE_RATIO = 0.85
GOAL_COST_RATIO = 0.25
#: Virtual seconds: think time between user messages, one model call, and the occasional long break.
THINK_SECONDS = (20, 180)
CALL_SECONDS = (2, 8)
BREAK_EVERY_TURNS = 25
BREAK_SECONDS = (8 * 60, 40 * 60)
SUMMARIZER_MARK = "You write compaction notes"
#: Size the system prompt is brought to (a typical agent prompt with its tool documentation).
SYSTEM_TOKENS = 3_000
SUMMARY_SECTIONS = (
    "## Goal",
    "## Constraints & Preferences",
    "## Progress",
    "### Done",
    "### In Progress",
    "### Blocked",
    "## Key Decisions",
    "## Relevant Files",
    "## Next Steps",
    "## Critical Context",
)


class VirtualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Turn:
    user: dict[str, Any]
    replies: list[dict[str, Any]]
    outputs: dict[str, deque[str]]


def _clean(message: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in message.items() if not key.startswith("_")}


def split_turns(messages: Sequence[dict[str, Any]]) -> tuple[dict[str, Any], list[Turn]]:
    """The system prompt and the session's turns: a user line, the assistant's calls and replies, the tool outputs."""
    system = _clean(messages[0])
    turns: list[Turn] = []
    for message in messages[1:]:
        message = _clean(message)
        if message["role"] == "user":
            turns.append(Turn(message, [], defaultdict(deque)))
        elif turns and message["role"] == "assistant":
            turns[-1].replies.append(message)
        elif turns and message["role"] == "tool":
            name = next(
                call["function"]["name"]
                for reply in turns[-1].replies
                for call in reply.get("tool_calls") or ()
                if call["id"] == message["tool_call_id"]
            )
            turns[-1].outputs[name].append(str(message["content"]))
    return system, [turn for turn in turns if turn.replies]


def with_tool_documentation(system: dict[str, Any], names: set[str], tokens: int) -> dict[str, Any]:
    """The system prompt followed by a usage section per tool, until it is about ``tokens`` long."""
    text = str(system["content"])
    rules = [
        "Read the relevant files before changing them and quote paths exactly.",
        "Run the narrowest test that covers a change, then the whole suite before saying it is done.",
        "Never rewrite history on shared branches; open a pull request and link the issue it fixes.",
        "When a command fails, show the first error line and what you will try next.",
    ]
    index = 0
    while count_text(text) < tokens:
        name = sorted(names)[index % len(names)]
        text += f"\n\n### Using `{name}` (note {index + 1})\n" + " ".join(
            rules[(index + k) % len(rules)] for k in range(4)
        )
        index += 1
    return {**system, "content": text}


def summary_text(rng: random.Random) -> str:
    filler = "the nightly export job, the retry budget, PR #4821, src/storage/retry.py and the flaky login test"
    lines = []
    for heading in SUMMARY_SECTIONS:
        lines.append(heading)
        if not heading.startswith("## Progress"):
            lines.append(f"- Notes on {filler} ({rng.randint(1, 999)}). " * 6)
    return "\n".join(lines)


class Script:
    """Plays the recorded session: the fake model answers with the recorded replies, the tools with the recorded
    outputs."""

    def __init__(self, turns: list[Turn], clock: VirtualClock, rng: random.Random) -> None:
        self.turns = turns
        self.clock = clock
        self.rng = rng
        self.current: Turn | None = None
        self.pending: deque[dict[str, Any]] = deque()
        #: "chat" or "summary" per request, aligned with the server's ledger
        self.kinds: list[str] = []

    def begin(self, turn: Turn) -> None:
        self.current = turn
        self.pending = deque(turn.replies)

    def reply(self, request: Any) -> Any:
        from tests.fakes.llm_server import Reply

        self.clock.now += self.rng.uniform(*CALL_SECONDS)
        if SUMMARIZER_MARK in request.system:
            self.kinds.append("summary")
            return Reply.answer(summary_text(self.rng))
        self.kinds.append("chat")
        if not self.pending:
            return Reply.answer("Done.")
        message = self.pending.popleft()
        calls = list(message.get("tool_calls") or [])
        return Reply(
            text=message.get("content") or "", tool_calls=calls, finish_reason="tool_calls" if calls else "stop"
        )

    def tools(self, names: set[str]) -> ToolRegistry:
        registry = ToolRegistry()
        for name in sorted(names):

            async def run(_args: dict[str, Any], name: str = name) -> str:
                queue = self.current.outputs.get(name) if self.current else None
                return queue.popleft() if queue else "(no output)"

            registry.add(Tool(name, f"The session's {name} tool.", {"type": "object", "properties": {}}, run))
        return registry


class RecordingCompressor(ContextCompressor):
    """The built-in compressor, noting where in the request ledger each compaction took effect."""

    ledger_positions: list[int]
    server: Any

    async def compress(
        self,
        messages: list[dict[str, Any]],
        current_tokens: int | None = None,
        focus_topic: str | None = None,
        force: bool = False,
    ) -> list[dict[str, Any]]:
        before = self.compression_count
        result = await super().compress(messages, current_tokens, focus_topic, force)
        if self.compression_count > before:
            self.ledger_positions.append(len(self.server.ledger))
        return result


@dataclass
class Run:
    ttl: str
    turns: int
    ledger: list[Any]
    kinds: list[str]
    compactions: list[int] = field(default_factory=list)


async def play(ttl: str, turns: int, seed: int = SEED) -> Run:
    """One conversation through the real agent with cache lifetime ``ttl``."""
    from tests.fakes.anthropic_cache import AnthropicCacheServer

    rng = random.Random(seed)
    target = turns * 3_600
    while True:  # the generator sizes sessions in tokens; grow it until it has enough turns
        session = generate_session(session_name(target, seed), target, seed)
        system, all_turns = split_turns(session.messages)
        if len(all_turns) >= turns:
            break
        target = int(target * 1.25)
    clock = VirtualClock()
    script = Script(all_turns[:turns], clock, rng)
    names = {
        call["function"]["name"]
        for turn in script.turns
        for reply in turn.replies
        for call in reply.get("tool_calls") or ()
    }
    system = with_tool_documentation(system, names, SYSTEM_TOKENS)
    plan = plan_prompt_caching(MODEL, "anthropic", cache_ttl=ttl)
    async with AnthropicCacheServer(clock=clock, handler=script.reply) as server:
        async with ChatClient(server.anthropic_base_url, api_key="bench", dialect="anthropic") as client:
            summarizer = LLMSummarizer(client, MODEL, CONTEXT_LENGTH)
            engine = RecordingCompressor(MODEL, CONTEXT_LENGTH, CompressionSettings(), summarizer, provider="anthropic")
            engine.ledger_positions, engine.server = [], server
            agent = Agent(client, engine, model=MODEL, tools=script.tools(names), request_hook=plan.request_hook())
            history: list[dict[str, Any]] = [system]
            bar = progress(len(script.turns), "turn", f"bench caching, {ttl} TTL")
            for index, turn in enumerate(script.turns):
                bar.update(index)
                clock.now += rng.uniform(*THINK_SECONDS)
                if index and index % BREAK_EVERY_TURNS == 0:
                    clock.now += rng.uniform(*BREAK_SECONDS)
                script.begin(turn)
                reported = engine.last_prompt_tokens or 0
                if reported >= HYGIENE_RATIO * CONTEXT_LENGTH:  # the gateway's safety net before the turn
                    history = await engine.compress(history, current_tokens=reported, force=True)
                result = await agent.run_turn(history, dict(turn.user))
                history = result.messages
            bar.update(len(script.turns))
            bar.close()
    return Run(ttl, turns, list(server.ledger), script.kinds, engine.ledger_positions)


def _share(read: int, prompt: int) -> float:
    return read / prompt if prompt else 0.0


def summarise(run: Run) -> dict[str, Any]:
    """The figures of one run: token shares, input cost against no caching, hit shares around compactions."""
    chat = [entry for entry, kind in zip(run.ledger, run.kinds) if kind == "chat"]
    summary = [entry for entry, kind in zip(run.ledger, run.kinds) if kind == "summary"]

    def usage(entries: Sequence[Any]) -> dict[str, int]:
        return {
            "prompt_tokens": sum(e.prompt_tokens for e in entries),
            "cache_read_tokens": sum(e.cache_read for e in entries),
            "cache_write_tokens": sum(e.cache_write for e in entries),
        }

    chat_usage, summary_usage = usage(chat), usage(summary)
    chat_cost = breakdown(chat_usage, MODEL, run.ttl).input
    chat_uncached = uncached_cost(chat_usage, MODEL)
    summary_cost = breakdown(summary_usage, MODEL, run.ttl).input
    chat_index = {position: sum(1 for kind in run.kinds[:position] if kind == "chat") for position in run.compactions}
    around = []
    for position in run.compactions:
        first_after = chat_index[position]
        window = {
            "before": first_after - 1,
            "after_1": first_after,
            "after_2": first_after + 1,
            "after_3": first_after + 2,
        }
        around.append(
            {
                name: round(_share(chat[i].cache_read, chat[i].prompt_tokens), 3) if 0 <= i < len(chat) else None
                for name, i in window.items()
            }
        )

    def mean(name: str) -> float | None:
        values = [row[name] for row in around if row[name] is not None]
        return round(statistics.fmean(values), 3) if values else None

    return {
        "ttl": run.ttl,
        "turns": run.turns,
        "chat_requests": len(chat),
        "summarizer_requests": len(summary),
        "compactions": len(run.compactions),
        "chat_tokens": chat_usage,
        "summarizer_tokens": summary_usage,
        "cache_read_share": round(_share(chat_usage["cache_read_tokens"], chat_usage["prompt_tokens"]), 4),
        "cache_write_share": round(_share(chat_usage["cache_write_tokens"], chat_usage["prompt_tokens"]), 4),
        "cold_requests": sum(1 for e in chat if e.cache_read == 0),
        "input_cost_usd": float(chat_cost.amount),
        "uncached_input_cost_usd": float(chat_uncached.amount),
        "input_cost_ratio": round(chat_cost.ratio(chat_uncached), 4),
        "summarizer_input_cost_usd": float(summary_cost.amount),
        "with_summarizer_cost_ratio": round((chat_cost + summary_cost).ratio(chat_uncached + summary_cost), 4),
        "hit_share_around_compactions": around,
        "mean_hit_share": {name: mean(name) for name in ("before", "after_1", "after_2", "after_3")},
        "goal_met": chat_cost.ratio(chat_uncached) <= GOAL_COST_RATIO,
    }


def table(rows: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| TTL | turns | requests | compactions | read from cache | written | cold requests | input cost | uncached "
        "| ratio | with summarizer | hit before → after 1 / 2 / 3 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        hits = row["mean_hit_share"]
        shown = " / ".join("–" if hits[k] is None else f"{hits[k]:.0%}" for k in ("after_1", "after_2", "after_3"))
        before = "–" if hits["before"] is None else f"{hits['before']:.0%}"
        lines.append(
            f"| {row['ttl']} | {row['turns']} | {row['chat_requests']} (+{row['summarizer_requests']} summary) |"
            f" {row['compactions']} | {row['cache_read_share']:.1%} | {row['cache_write_share']:.1%} |"
            f" {row['cold_requests']} |"
            f" ${row['input_cost_usd']:.2f} | ${row['uncached_input_cost_usd']:.2f} | {row['input_cost_ratio']:.1%} |"
            f" {row['with_summarizer_cost_ratio']:.1%} | {before} → {shown} |"
        )
    return "\n".join(lines)


def main(out: str | Path, turns: int = TURNS, ttls: Sequence[str] = TTLS, seed: int = SEED) -> int:
    rows = [summarise(asyncio.run(play(ttl, turns, seed))) for ttl in ttls]
    lines = [
        f"{turns} turns of a generated coding session, {MODEL} with a {CONTEXT_LENGTH:,}-token window, input prices"
        f" from agent.pricing; 'ratio' = the conversation's input cost with caching / without.",
        table(rows),
    ]
    for row in rows:
        verdict = "met" if row["goal_met"] else "MISSED"
        lines.append(
            f"goal (input cost ≤ {GOAL_COST_RATIO:.0%} of uncached) with {row['ttl']} TTL: {verdict}"
            f" ({row['input_cost_ratio']:.1%}, {1 - row['input_cost_ratio']:.0%} saved)"
        )
    data = {"model": MODEL, "context_length": CONTEXT_LENGTH, "seed": seed, "rows": rows}
    publish(out, "bench_caching", data, "\n".join(lines))
    return 0
