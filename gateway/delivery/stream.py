"""A reply that shows as it is written: the agent's stream events in, coalesced preview frames out.

:class:`ReplyStream` is the sink a turn hands to ``Agent.run_turn(on_event=...)``. It keeps
the text streamed so far and lets a background task show it on the platform's
:class:`Surface` — a Telegram draft, an edited message, a terminal line — never once per
token: a frame goes out at most every ``interval`` seconds, and a frame the send budget
refuses is not queued but merged into the next one. While a tool runs the preview says
which (``🔧 session_search …``) until the model writes again; a :class:`StreamReset`
(the provider request was retried) starts the text over. :meth:`ReplyStream.finish`
delivers the final reply, which is exactly the model's text whatever the previews showed.

The sink only records and wakes the frame task: a slow platform call never holds up the
provider's stream. (:class:`gateway.platforms.base.Surface` is what a platform provides.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from agent.cancelling import cancel_and_wait
from agent.llm.stream import StreamReset, TextDelta
from agent.loop import AgentEvent, ToolRunning, TurnStopped
from gateway.outage import is_redis_outage
from gateway.platforms.base import Surface

log = logging.getLogger(__name__)

#: Shown while the model calls a tool, after the text so far.
TOOL_LINE = "🔧 {name} …"
#: Longest wait for a frame in flight when the final reply is ready.
FRAME_GRACE_SECONDS = 5.0


class ReplyStream:
    """The turn's stream sink for one reply on one :class:`Surface`; call :meth:`finish` exactly once."""

    def __init__(
        self,
        surface: Surface,
        *,
        previews: bool = True,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """``clock`` and ``sleep`` are the time the frames are paced by: one pair, so a test that moves its own
        clock also decides when a frame's wait ends."""
        if surface.interval <= 0:
            raise ValueError(f"a surface's interval must be positive, got {surface.interval!r}")
        self.surface = surface
        self.interval = surface.interval
        #: False: the surface only delivers the final reply (``delivery.stream_replies: false``).
        self.previews = previews
        self.clock = clock
        self.sleep = sleep
        self.frames = 0
        self._text: list[str] = []
        self._tool: str | None = None
        self._shown = ""
        self._dirty = asyncio.Event()
        self._closed = False
        self._sending = False
        self._task: asyncio.Task[None] | None = None

    # -- the sink ------------------------------------------------------------------------

    async def __call__(self, event: AgentEvent) -> None:
        if not self.previews:
            return
        if isinstance(event, TextDelta):
            self._text.append(event.text)
            self._tool = None
        elif isinstance(event, ToolRunning):
            self._tool = event.name
        elif isinstance(event, StreamReset):
            self._text.clear()
            self._tool = None
        else:
            return
        self._dirty.set()
        if self._task is None and not self._closed:
            self._task = asyncio.create_task(self._frames(), name="reply-stream-frames")

    @property
    def streamed(self) -> str:
        """All the text streamed so far (what the person has seen, up to the last preview)."""
        return "".join(self._text)

    @property
    def current(self) -> str:
        """What a preview would show now."""
        text = "".join(self._text).strip()
        if self._tool is None:
            return text
        line = TOOL_LINE.format(name=self._tool)
        return f"{text}\n\n{line}" if text else line

    # -- frames --------------------------------------------------------------------------

    async def _frames(self) -> None:
        last = float("-inf")
        while not self._closed:
            await self._dirty.wait()
            wait = last + self.interval - self.clock()
            if wait > 0:
                await self.sleep(wait)
                if self._closed:
                    return
            self._dirty.clear()
            text = self.current
            if not text or text == self._shown:
                continue
            last = self.clock()
            self._sending = True
            try:
                shown = await self.surface.preview(text)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a preview is never worth failing the reply
                log.log(
                    logging.DEBUG if is_redis_outage(error) else logging.WARNING,
                    "a reply preview could not be shown: %s: %s",
                    type(error).__name__,
                    error,
                )
                continue
            finally:
                self._sending = False
            if shown:
                self._shown = text
                self.frames += 1
            else:
                self._dirty.set()  # refused by the budget: the next frame carries this text too

    def abandon(self) -> None:
        """Stop the previews without a final reply (the turn failed and will be tried again)."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()

    async def finish(self, text: str) -> None:
        """Stop the previews and deliver ``text`` as the final reply (after a preview in flight, never before)."""
        self._closed = True
        self._dirty.set()
        task = self._task
        if task is not None:
            if self._sending:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(asyncio.shield(task), FRAME_GRACE_SECONDS)
            await cancel_and_wait(task)
        await self.surface.finish(text)


class TurnWatch:
    """A turn's ``on_event`` sink: hands events to the reply's stream, and ends the turn on ``/stop``.

    ``stop_requested`` is asked at most every ``every`` seconds (one Redis read), so a stop takes
    effect within about that long of the next event; the text streamed so far becomes the reply.
    While the turn waits on a provider that sends nothing, :meth:`until_stopped` keeps asking at
    the same pace, so a hung request is ended by a ``/stop`` too.
    """

    def __init__(
        self,
        stream: ReplyStream | None,
        stop_requested: Callable[[], Awaitable[bool]],
        *,
        every: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        stopped: TurnStopped | None = None,
    ) -> None:
        self.stream = stream
        self.stop_requested = stop_requested
        self.every = every
        self.clock = clock
        self._checked = clock()
        #: A stop already seen before the turn reached the agent: honoured at its first wait, nothing asked.
        self.seen = stopped

    def _stopped(self) -> TurnStopped:
        return TurnStopped(self.stream.streamed if self.stream is not None else "")

    async def __call__(self, event: AgentEvent) -> None:
        if self.seen is not None:
            raise self.seen
        if self.stream is not None:
            await self.stream(event)
        now = self.clock()
        if now - self._checked >= self.every:
            self._checked = now
            if await self.stop_requested():
                raise self._stopped()

    async def until_stopped(self) -> TurnStopped:
        """Return once a ``/stop`` for the turn is found, asking every ``every`` seconds (events ask too).

        A failed read is logged and asked again next time: watching for a stop never fails the turn.
        """
        if self.seen is not None:
            return self.seen
        while True:
            wait = self._checked + self.every - self.clock()
            if wait > 0:  # asked lately (by an event, or by this loop)
                await asyncio.sleep(wait)
                continue
            self._checked = self.clock()
            try:
                if await self.stop_requested():
                    return self._stopped()
            except Exception as error:  # Redis away: the dispatcher says so once for the whole outage
                me = asyncio.current_task()
                if me is not None and me.cancelling():  # a cancellation a client turned into an error: still one
                    raise asyncio.CancelledError from error
                log.log(
                    logging.DEBUG if is_redis_outage(error) else logging.WARNING,
                    "could not ask whether the turn was stopped: %s: %s",
                    type(error).__name__,
                    error,
                )
