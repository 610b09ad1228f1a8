"""The last check before every model request, and ``/stop`` while a tool or a summarizer runs.

Whatever led there (tool results piling up past a high threshold, a compressor held back by its
guard, compression switched off), a request whose count passes the window is compacted first and
never sent as it is; one that cannot fit even then fails here, before the provider. The summarizer's
requests are held to its own window the same way. A ``/stop`` ends a turn while a tool runs or a
compaction waits on its summarizer, with the tool pairs left whole.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from agent.compaction.summarizer import SummarizerFailure, summarize_transcript
from agent.compaction.summary_prompt import SECTION_HEADINGS, SYSTEM_PROMPT, TranscriptEntry
from agent.context_compressor import ContextCompressor
from agent.llm.client import ChatClient
from agent.llm.errors import WindowExceeded
from agent.loop import INTERRUPTED_TOOL_RESULT, STOPPED_REPLY, Agent, StopWaiter, TurnFailed, TurnStopped
from agent.messages import api_problems
from agent.settings import CompressionSettings
from agent.tokens import count_request
from agent.tools import Tool, ToolRegistry
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.fakes.waiting import PATIENCE, wait_for

WINDOW = 16_000
NOTES = "\n".join(f"{heading}\n- noted" for heading in SECTION_HEADINGS)


def opening() -> list[dict]:
    return [
        {"role": "system", "content": "You are a careful assistant.", "_id": "0"},
        {"role": "user", "content": "let us read the deploy logs", "_id": "1"},
        {"role": "assistant", "content": "ready", "_id": "2"},
    ]


def log_lines(step: object) -> str:
    return "\n".join(
        f"{step}.{line} deploy shard-{line} replica lag {line * 7}ms, retry queue {line * 13}" for line in range(90)
    )


def reader(calls: list[str]) -> ToolRegistry:
    async def read_log(args: dict) -> str:
        calls.append(str(args.get("part")))
        return log_lines(args.get("part"))

    tools = ToolRegistry()
    tools.add(Tool("read_log", "read one part of the deploy log", {"type": "object"}, read_log))
    return tools


async def test_tool_results_past_the_window_are_compacted_before_the_request_goes_out():
    """The threshold is set above what the window leaves: only the last check stands between the tool
    results and a request the provider would refuse."""

    def model(request: RecordedRequest) -> Reply:
        if SYSTEM_PROMPT[:40] in request.system:
            return Reply.answer(NOTES)
        parts = sum(1 for m in request.messages if m.get("role") == "tool")
        return Reply.tool_call("read_log", {"part": parts}, call_id=f"c{parts}") if parts < 12 else Reply.answer("read")

    calls: list[str] = []
    async with FakeLLMServer(handler=model, context_limit=WINDOW) as server:
        async with ChatClient(server.openai_base_url) as client:
            engine = ContextCompressor(model="m", context_length=WINDOW, settings=CompressionSettings(threshold=0.95))
            agent = Agent(client, engine, model="m", tools=reader(calls))
            result = await agent.run_turn(opening(), {"role": "user", "content": "read all twelve parts"})
    assert server.overflowed == []
    assert result.reply == "read" and result.compacted
    assert calls == [str(n) for n in range(12)]  # every tool ran once, none again after the compaction
    assert api_problems(result.messages) == []


async def test_a_request_that_cannot_fit_even_compacted_is_never_sent():
    async with FakeLLMServer(context_limit=WINDOW) as server:
        async with ChatClient(server.openai_base_url) as client:
            agent = Agent(client, ContextCompressor(model="m", context_length=WINDOW), model="m")
            huge = {"role": "user", "content": log_lines("x") * 12}
            assert count_request([huge]) > WINDOW
            with pytest.raises(TurnFailed) as failed:
                await agent.run_turn(opening(), huge)
    assert isinstance(failed.value.error, WindowExceeded) and "not sent" in str(failed.value.error)
    assert server.requests == []


class RecordingSummarizer:
    name = "recording"
    context_length = 4_000

    def __init__(self) -> None:
        self.requests: list[list[dict]] = []

    async def call_llm(self, *, task: str, messages: list[dict], max_tokens: int) -> str:
        self.requests.append(messages)
        return NOTES


async def test_a_summary_request_past_the_summarizers_window_is_never_sent():
    summarizer = RecordingSummarizer()
    fits = [TranscriptEntry(f"[{n}] user: short note {n}", 10) for n in range(5)]
    outcome = await summarize_transcript(
        summarizer,
        fits,
        budget_tokens=500,
        previous_summary=None,
        previous_summary_tokens=0,
        focus_topic=None,
        summarizer_context=4_000,
    )
    assert outcome.calls == 1 and len(summarizer.requests) == 1
    misjudged = [TranscriptEntry(log_lines("y") * 2, 10)]  # estimated at 10 tokens, thousands in truth
    with pytest.raises(SummarizerFailure, match="not sent"):
        await summarize_transcript(
            summarizer,
            misjudged,
            budget_tokens=500,
            previous_summary=None,
            previous_summary_tokens=0,
            focus_topic=None,
            summarizer_context=4_000,
        )
    assert len(summarizer.requests) == 1


def stop_once(condition: Callable[[], object], what: str):
    """A ``/stop`` the person sends once ``condition()`` holds: while the work it is meant to end is running."""

    async def until_stopped() -> TurnStopped:
        await wait_for(condition, what=what)
        return TurnStopped("")

    return until_stopped


async def test_stop_ends_a_running_tool_call_and_leaves_the_pairs_whole():
    started = asyncio.Event()

    async def stuck(args: dict) -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    tools = ToolRegistry()
    tools.add(Tool("stuck", "a tool that never returns", {"type": "object"}, stuck))
    tools.add(Tool("after", "a second call in the same answer", {"type": "object"}, stuck))
    calls = [
        {"id": "c1", "type": "function", "function": {"name": "stuck", "arguments": "{}"}},
        {"id": "c2", "type": "function", "function": {"name": "after", "arguments": "{}"}},
    ]
    async with FakeLLMServer(
        handler=lambda request: Reply(tool_calls=calls, finish_reason="tool_calls", text="")
    ) as server:
        async with ChatClient(server.openai_base_url) as client:
            agent = Agent(client, ContextCompressor(model="m", context_length=WINDOW), model="m", tools=tools)
            result = await asyncio.wait_for(
                agent.run_turn(
                    opening(),
                    {"role": "user", "content": "run it"},
                    until_stopped=stop_once(started.is_set, "the tool to run"),
                ),
                PATIENCE,
            )
    assert started.is_set() and result.reply == STOPPED_REPLY
    results = {m["tool_call_id"]: m["content"] for m in result.messages if m.get("role") == "tool"}
    assert results["c1"] == INTERRUPTED_TOOL_RESULT and "c2" in results
    assert api_problems(result.messages) == [] and len(server.requests) == 1


async def test_stop_ends_a_compaction_whose_summarizer_never_answers():
    def model(request: RecordedRequest) -> Reply:
        return Reply.hang() if SYSTEM_PROMPT[:40] in request.system else Reply.answer("answered")

    async with FakeLLMServer(handler=model) as server:
        async with ChatClient(server.openai_base_url) as client, ChatClient(server.openai_base_url) as aux:
            from agent.compaction.summarizer import LLMSummarizer

            engine = ContextCompressor(model="m", context_length=WINDOW, summarizer=LLMSummarizer(aux, "m", WINDOW))
            engine.update_from_response({"prompt_tokens": 12_000, "completion_tokens": 5, "total_tokens": 12_005})
            history = opening() + [
                {"role": "user" if n % 2 else "assistant", "content": log_lines(n), "_id": str(n + 3)} for n in range(8)
            ]
            asking = stop_once(lambda: summary_requests(server), "the summary request to reach the provider")
            result = await asyncio.wait_for(agent_turn(client, engine, history, asking), PATIENCE)
    assert result.reply == STOPPED_REPLY and not result.compacted
    assert engine.compression_count == 0
    assert [r for r in server.requests if SYSTEM_PROMPT[:40] not in r.system] == []  # the chat model was never asked


def summary_requests(server: FakeLLMServer) -> list[RecordedRequest]:
    return [request for request in server.requests if SYSTEM_PROMPT[:40] in request.system]


async def agent_turn(client: ChatClient, engine: ContextCompressor, history: list[dict], until_stopped: StopWaiter):
    agent = Agent(client, engine, model="m")
    return await agent.run_turn(history, {"role": "user", "content": "go on"}, until_stopped=until_stopped)
