"""``foldgate replay FIXTURE.jsonl``: a recorded conversation through the whole gateway, then a table.

A fixture is JSONL, one record per line, in the order things happened:

- ``{"kind": "message", "chat": "ops", "text": "...", "ts": 1764460800.0, "respond": true}`` — a person's
  message (``respond: false`` records it without a turn, like group chatter the bot only reads);
- ``{"kind": "model", "text": "...", "tool_calls": [...]}`` — the model's next answer, served in order to the
  turns' chat requests (summarizer requests are answered by foldgate's configured summarizer, the
  deterministic one when none is configured);
- ``{"kind": "tool", "content": "..."}`` — the next result for a tool call foldgate has no tool for (the
  recording's own tools, e.g. ``read_file``); foldgate's recovery tools run for real.

The gateway runs as deployed — Redis (embedded when no URL is configured), inbox, hygiene, the agent loop,
compaction, commits — only the model and foreign tools are played back. The window is the configured model's.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from agent import json_codec
from agent.llm.stream import EventSink, TextDelta
from agent.llm.types import Completion
from agent.tokens import count_messages, count_text
from agent.usage import Usage
from gateway.config import ConfigError, Settings, load_settings
from gateway.events import CompressEvent, Event, TurnEvent
from gateway.platforms.base import IncomingMessage
from gateway.platforms.recording import RecordingAdapter
from gateway.progress import Progress, plural
from gateway.run.scratch import describe_gateway, throwaway_gateway
from gateway.startup_errors import exit_code_of


class FixtureError(ValueError):
    """A fixture line that is not a valid record; names the line."""


@dataclass
class Fixture:
    messages: list[IncomingMessage]
    model_replies: list[dict[str, Any]]
    tool_results: list[str]


def load_fixture(path: str | Path) -> Fixture:
    messages: list[IncomingMessage] = []
    replies: list[dict[str, Any]] = []
    tools: list[str] = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json_codec.loads(line)
            kind = record["kind"]
        except (ValueError, KeyError, TypeError) as error:
            raise FixtureError(f"{path}:{number}: not a fixture record ({error})") from error
        if kind == "message":
            messages.append(
                IncomingMessage(
                    platform="replay",
                    chat_id=str(record.get("chat", "replay")),
                    user_id=str(record.get("user", "")),
                    update_id=f"{number}",
                    text=str(record["text"]),
                    ts=float(record.get("ts") or time.time()),
                    respond=bool(record.get("respond", True)),
                )
            )
        elif kind == "model":
            replies.append(record)
        elif kind == "tool":
            tools.append(str(record.get("content", "")))
        else:
            raise FixtureError(f"{path}:{number}: unknown kind {kind!r} (message, model or tool)")
    return Fixture(messages, replies, tools)


class ReplayModel:
    """Serves the recorded answers in order and reports usage like a provider (exact prompt counts)."""

    def __init__(self, replies: Sequence[Mapping[str, Any]]) -> None:
        self.replies = deque(replies)
        self.prompts: list[int] = []

    async def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        model: str,
        max_tokens: int,
        tools: Sequence[Mapping[str, Any]] | None = None,
        temperature: float | None = None,
        on_event: EventSink | None = None,
    ) -> Completion:
        prompt = count_messages([dict(m) for m in messages]) + count_text(json_codec.dumps_text(list(tools or ())))
        self.prompts.append(prompt)
        record = self.replies.popleft() if self.replies else {"text": "(the recording has no more answers)"}
        text = str(record.get("text") or "")
        calls = [dict(call) for call in record.get("tool_calls") or ()]
        completion = count_text(text) + sum(count_text(json_codec.dumps_text(c)) for c in calls)
        usage = Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)
        if on_event is not None and text:
            await on_event(TextDelta(text))
        return Completion(text, calls, "tool_calls" if calls else "stop", usage, {})


@dataclass
class ReplayReport:
    turns: int = 0
    messages: int = 0
    already_stored: int = 0  # messages an earlier replay into the same gateway had taken in (skipped)
    hygiene_compactions: int = 0
    in_loop_compactions: int = 0
    peak_prompt_tokens: int = 0
    tokens_sent: int = 0
    context_length: int = 0
    replies: list[tuple[str, str]] = field(default_factory=list)
    timeline: list[tuple[int, int, str]] = field(default_factory=list)  # (request number, tokens after, trigger)
    prompt_tokens: list[int] = field(default_factory=list)  # every model request's prompt size, in order

    @property
    def peak_percent(self) -> float:
        return 100 * self.peak_prompt_tokens / self.context_length if self.context_length else 0.0

    def table(self) -> str:
        rows = [
            ("turns", f"{self.turns}"),
            ("messages replayed", f"{self.messages}"),
            ("hygiene compactions", f"{self.hygiene_compactions}"),
            ("in-loop compactions", f"{self.in_loop_compactions}"),
            (
                "peak context",
                f"{self.peak_prompt_tokens:,} tokens ({self.peak_percent:.1f}% of {self.context_length:,})",
            ),
            ("tokens sent", f"{self.tokens_sent:,}"),
        ]
        width = max(len(name) for name, _ in rows)
        return "\n".join(f"{name.ljust(width)}  {value}" for name, value in rows)


async def replay(settings: Settings, fixture: Fixture, *, out: TextIO | None = None) -> ReplayReport:
    """Run the fixture through a gateway built from ``settings``; returns what happened."""
    from agent.tools import Tool
    from gateway.run.assembly import open_gateway

    model = ReplayModel(fixture.model_replies)
    platform = RecordingAdapter("replay")
    gateway = await open_gateway(settings, {"replay": platform}, chat_model=model)
    results = deque(fixture.tool_results)
    report = ReplayReport(context_length=gateway.agents.context_length(settings.model.name))

    def on_event(event: Event) -> None:
        if isinstance(event, CompressEvent):
            if event.trigger == "hygiene":
                report.hygiene_compactions += 1
            elif event.trigger == "in_loop":
                report.in_loop_compactions += 1
            report.timeline.append((len(model.prompts), event.tokens_after, event.trigger))
        elif isinstance(event, TurnEvent):
            report.turns += 1

    gateway.events.subscribe(on_event)
    original_build = gateway.agents.build_agent

    def build_agent(engine: Any, model_name: str, tools: Any, **media: Any) -> Any:
        agent = original_build(engine, model_name, tools, **media)
        agent.tools.fallback = lambda name: Tool(name, "recorded tool", {"type": "object"}, _recorded(results))
        return agent

    gateway.agents.build_agent = build_agent  # type: ignore[method-assign, assignment]
    try:
        progress = Progress(len(fixture.messages), "message", out, label="replay")
        for index, message in enumerate(fixture.messages, start=1):
            if not await gateway.runner.intake(message):
                report.already_stored += 1
            if message.respond:
                await gateway.runner.wait_idle(timeout=600)
            progress.update(index)
        await gateway.runner.wait_idle(timeout=600)
        progress.close()
    finally:
        await gateway.close()
    report.messages = len(fixture.messages) - report.already_stored
    report.prompt_tokens = list(model.prompts)
    report.tokens_sent = sum(model.prompts)
    report.peak_prompt_tokens = max(model.prompts, default=0)
    report.replies = platform.sent
    return report


def _recorded(results: deque[str]) -> Any:
    async def serve(_args: dict[str, Any]) -> str:
        return (
            results.popleft() if results else json_codec.dumps_text({"error": "the recording has no more tool results"})
        )

    return serve


def replay_command(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
        fixture = load_fixture(args.fixture)
    except (ConfigError, FixtureError, OSError) as error:
        print(f"foldgate replay: {error}", file=sys.stderr)
        return 2
    return exit_code_of("foldgate replay", settings, lambda: _replay_and_print(settings, fixture, keep=args.keep))


def _replay_and_print(settings: Settings, fixture: Fixture, *, keep: bool) -> int:
    if keep:
        report = asyncio.run(replay(settings, fixture, out=sys.stderr))
        where = f"into your gateway ({describe_gateway(settings)}), where it stays"
    else:
        with throwaway_gateway(settings, "replay") as scratch:
            report = asyncio.run(replay(scratch, fixture, out=sys.stderr))
        where = "in a throwaway gateway, removed afterwards (--keep replays into your own)"
    print(report.table())
    print(f"replayed {plural(report.messages, 'message')} {where}")
    if report.already_stored:
        print(
            f"{plural(report.already_stored, 'message')} of the recording were already stored by an earlier"
            " replay and were not taken in again"
        )
    return 0
