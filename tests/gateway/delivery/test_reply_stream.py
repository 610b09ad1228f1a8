"""ReplyStream: the turn's events become coalesced previews, tool lines and one exact final reply.

The stream is paced by a clock and a sleep of the test's own (:class:`VirtualTime`): "0.6 s of deltas" is 0.6 s
on that clock whatever the machine is doing, and a preview "in flight" is one the surface holds until the test
lets it go. No test here waits for real time to pass.
"""

from __future__ import annotations

import asyncio

from agent.llm.stream import StreamReset, TextDelta
from agent.loop import ToolRunning
from gateway.delivery.stream import ReplyStream

#: Turns of the event loop that let every task woken so far run until it waits again. The loop runs ready tasks
#: in order and nothing here waits on real time or I/O, so this count, not the machine's speed, decides it.
SETTLE_TURNS = 20


async def settle() -> None:
    """Let the tasks that can run now (the frame task, a surface call) run until each waits again."""
    for _ in range(SETTLE_TURNS):
        await asyncio.sleep(0)


class VirtualTime:
    """The stream's clock and sleep, moved by the test alone.

    :meth:`sleep` returns once :meth:`advance` has moved the clock to its end. ``advance`` moves it from one
    sleeper's end to the next (a frame woken on the way may sleep again and be woken within the same advance),
    as the machine's clock would, but how busy the machine is changes nothing. ``slept`` is every wait asked for.
    """

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self.now + seconds, woken))
        try:
            await woken
        finally:  # a cancelled sleep (the final reply ended the frames) is forgotten
            self._sleepers = [(due, future) for due, future in self._sleepers if future is not woken]

    async def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` on, waking each sleep that ends on the way, in the order they end."""
        end = self.now + seconds
        await settle()
        while due := [sleeper for sleeper in self._sleepers if sleeper[0] <= end]:
            moment, woken = min(due, key=lambda sleeper: sleeper[0])
            self._sleepers.remove((moment, woken))
            self.now = max(self.now, moment)
            woken.set_result(None)
            await settle()
        self.now = end
        await settle()


class RecordingSurface:
    """A surface that keeps what it was asked to show, in order; ``refuse`` previews stand for a short budget.

    With ``hold``, a preview stays in flight (``in_flight`` set) until the test sets ``hold``."""

    def __init__(self, interval: float = 0.05, refuse: int = 0, hold: asyncio.Event | None = None) -> None:
        self.interval = interval
        self.refuse = refuse
        self.hold = hold
        self.in_flight = asyncio.Event()
        self.previews: list[str] = []
        self.finals: list[str] = []
        self.calls: list[str] = []

    async def preview(self, text: str) -> bool:
        self.in_flight.set()
        await asyncio.sleep(0)  # a platform call: the caller always waits at least a turn of the loop
        if self.hold is not None:
            await self.hold.wait()
        if self.refuse:
            self.refuse -= 1
            return False
        self.previews.append(text)
        self.calls.append(f"preview {text}")
        return True

    async def finish(self, text: str) -> None:
        self.finals.append(text)
        self.calls.append(f"final {text}")


def paced(surface: RecordingSurface, **options: bool) -> tuple[ReplyStream, VirtualTime]:
    """A stream on ``surface`` paced by a :class:`VirtualTime`, and that time."""
    time = VirtualTime()
    return ReplyStream(surface, clock=time, sleep=time.sleep, **options), time


async def test_hundreds_of_deltas_become_a_few_frames_and_the_final_is_the_models_text():
    surface = RecordingSurface(interval=0.1)
    stream, time = paced(surface)
    words = [f"w{i} " for i in range(300)]
    for word in words:
        await stream(TextDelta(word))
        await time.advance(0.002)  # 0.6 s of writing in all
    await stream.finish("the model's final text")
    assert 2 <= len(surface.previews) <= 7  # the first at once, then at most one per 0.1 s; never one per token
    assert time.slept and all(0 < wait <= 0.1 for wait in time.slept)  # each frame waited out the interval's rest
    assert all("".join(words).strip().startswith(p) for p in surface.previews)
    assert surface.finals == ["the model's final text"]


async def test_a_running_tool_is_shown_until_the_model_writes_again():
    surface = RecordingSurface(interval=0.01)
    stream, time = paced(surface)
    await stream(TextDelta("Let me look."))
    await time.advance(0.05)
    await stream(ToolRunning("session_search", '{"query": "login"}'))
    await time.advance(0.05)
    await stream(TextDelta(" Found it: PR #412."))
    await time.advance(0.05)
    await stream.finish("Found it: PR #412.")
    assert surface.previews == [
        "Let me look.",
        "Let me look.\n\n🔧 session_search …",
        "Let me look. Found it: PR #412.",
    ]


async def test_a_retried_request_starts_the_preview_over():
    surface = RecordingSurface(interval=0.01)
    stream, time = paced(surface)
    await stream(TextDelta("half an ans"))
    await time.advance(0.05)
    await stream(StreamReset("ProviderUnavailable: dropped"))
    await stream(TextDelta("A whole answer."))
    await time.advance(0.05)
    await stream.finish("A whole answer.")
    assert surface.previews[-1] == "A whole answer."


async def test_a_refused_preview_is_merged_into_the_next_frame():
    surface = RecordingSurface(interval=0.02, refuse=2)
    stream, time = paced(surface)
    await stream(TextDelta("one "))
    await time.advance(0.01)
    await stream(TextDelta("two "))
    await time.advance(0.2)
    await stream.finish("one two")
    assert surface.previews == ["one two"]


async def test_the_final_waits_for_a_preview_in_flight_and_comes_after_it():
    released = asyncio.Event()
    surface = RecordingSurface(interval=0.01, hold=released)
    stream, _ = paced(surface)
    await stream(TextDelta("draft"))
    await asyncio.wait_for(surface.in_flight.wait(), 30)  # the preview call is under way, and stays so
    finishing = asyncio.create_task(stream.finish("final"))
    await settle()
    assert surface.calls == [] and not finishing.done()  # the final waits for the preview
    released.set()
    await asyncio.wait_for(finishing, 30)
    assert surface.calls == ["preview draft", "final final"]


async def test_with_previews_off_only_the_final_is_delivered():
    surface = RecordingSurface()
    stream, time = paced(surface, previews=False)
    await stream(TextDelta("ignored"))
    await time.advance(1.0)  # twenty intervals: a frame would have gone out by now
    await stream.finish("final")
    assert surface.previews == [] and surface.finals == ["final"] and time.slept == []


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
    result = await agent.run_turn(
        [], {"role": "user", "content": "which PR fixed the login timeout?"}, on_event=stop_at_the_tool
    )
    assert result.reply == "Let me look"
    assert [m["role"] for m in result.new_messages] == ["user", "assistant", "tool", "assistant"]
    assert result.new_messages[2]["content"] == STOPPED_TOOL_RESULT
    assert api_problems(result.messages) == []
