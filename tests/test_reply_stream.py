"""ReplyStream: the turn's events become coalesced previews, tool lines and one exact final reply."""

from __future__ import annotations

import asyncio

from agent.llm.stream import StreamReset, TextDelta
from agent.loop import ToolRunning
from gateway.delivery.stream import ReplyStream


class RecordingSurface:
    """A surface that keeps what it was asked to show; ``refuse`` previews stand for a short budget."""

    def __init__(self, interval: float = 0.05, refuse: int = 0, delay: float = 0.0) -> None:
        self.interval = interval
        self.refuse = refuse
        self.delay = delay
        self.previews: list[str] = []
        self.finals: list[str] = []

    async def preview(self, text: str) -> bool:
        await asyncio.sleep(self.delay)
        if self.refuse:
            self.refuse -= 1
            return False
        self.previews.append(text)
        return True

    async def finish(self, text: str) -> None:
        self.finals.append(text)


async def test_hundreds_of_deltas_become_a_few_frames_and_the_final_is_the_models_text():
    surface = RecordingSurface(interval=0.1)
    stream = ReplyStream(surface)
    words = [f"w{i} " for i in range(300)]
    for word in words:
        await stream(TextDelta(word))
        await asyncio.sleep(0.002)
    await stream.finish("the model's final text")
    assert 2 <= len(surface.previews) <= 12  # about one per interval, never one per token
    assert all("".join(words).strip().startswith(p) for p in surface.previews)
    assert surface.finals == ["the model's final text"]


async def test_a_running_tool_is_shown_until_the_model_writes_again():
    surface = RecordingSurface(interval=0.01)
    stream = ReplyStream(surface)
    await stream(TextDelta("Let me look."))
    await asyncio.sleep(0.05)
    await stream(ToolRunning("session_search", '{"query": "login"}'))
    await asyncio.sleep(0.05)
    await stream(TextDelta(" Found it: PR #412."))
    await asyncio.sleep(0.05)
    await stream.finish("Found it: PR #412.")
    assert surface.previews == ["Let me look.", "Let me look.\n\n🔧 session_search …", "Let me look. Found it: PR #412."]


async def test_a_retried_request_starts_the_preview_over():
    surface = RecordingSurface(interval=0.01)
    stream = ReplyStream(surface)
    await stream(TextDelta("half an ans"))
    await asyncio.sleep(0.05)
    await stream(StreamReset("ProviderUnavailable: dropped"))
    await stream(TextDelta("A whole answer."))
    await asyncio.sleep(0.05)
    await stream.finish("A whole answer.")
    assert surface.previews[-1] == "A whole answer."


async def test_a_refused_preview_is_merged_into_the_next_frame():
    surface = RecordingSurface(interval=0.02, refuse=2)
    stream = ReplyStream(surface)
    await stream(TextDelta("one "))
    await asyncio.sleep(0.01)
    await stream(TextDelta("two "))
    await asyncio.sleep(0.2)
    await stream.finish("one two")
    assert surface.previews == ["one two"]


async def test_the_final_waits_for_a_preview_in_flight_and_comes_after_it():
    surface = RecordingSurface(interval=0.01, delay=0.2)
    stream = ReplyStream(surface)
    await stream(TextDelta("draft"))
    await asyncio.sleep(0.05)  # the preview call is under way
    await stream.finish("final")
    assert surface.previews == ["draft"] and surface.finals == ["final"]


async def test_with_previews_off_only_the_final_is_delivered():
    surface = RecordingSurface()
    stream = ReplyStream(surface, previews=False)
    await stream(TextDelta("ignored"))
    await asyncio.sleep(0.1)
    await stream.finish("final")
    assert surface.previews == [] and surface.finals == ["final"]


async def test_a_turn_stopped_before_its_tool_runs_keeps_every_tool_call_paired():
    from agent.context_compressor import ContextCompressor
    from agent.llm.local import LocalDemoModel
    from agent.loop import STOPPED_TOOL_RESULT, Agent, TurnStopped
    from agent.messages import api_problems
    from agent.tools import ToolRegistry, recovery_tools

    class Archive:
        async def search(self, *args, **kwargs):  # never reached: the turn stops first
            raise AssertionError("the tool ran after the stop")

    async def stop_at_the_tool(event):
        if isinstance(event, ToolRunning):
            raise TurnStopped("Let me look")

    tools = ToolRegistry()
    for tool in recovery_tools(Archive()):  # type: ignore[arg-type]
        tools.add(tool)
    agent = Agent(LocalDemoModel(), ContextCompressor("local", 32_768), model="local", tools=tools)
    result = await agent.run_turn([], {"role": "user", "content": "which PR fixed the login timeout?"},
                                  on_event=stop_at_the_tool)
    assert result.reply == "Let me look"
    assert [m["role"] for m in result.new_messages] == ["user", "assistant", "tool", "assistant"]
    assert result.new_messages[2]["content"] == STOPPED_TOOL_RESULT
    assert api_problems(result.messages) == []
