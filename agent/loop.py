"""The agent's tool loop: one turn is LLM ↔ tools until the model answers, compacting in between.

Between iterations the context engine looks at the prompt size the provider actually
reported and compacts in the loop when it crosses its threshold. The turn's messages are
validated right before every request, so a broken tool pairing is refused here, not by the
provider. Transient provider
failures are retried by the provider client (as the official SDKs retry); a
context-length refusal forces a compaction and one more try, so a turn never ends on
"context too long".

A turn can be watched as it happens: ``run_turn(..., on_event=sink)`` hands the sink the
model's text as it streams (:class:`agent.llm.stream.TextDelta`), the start of each tool
call, a :class:`ToolRunning` before each tool runs, and a ``StreamReset`` when a request
is retried after part of its answer was streamed. ``run_turn(..., until_stopped=...)`` also ends
the turn while the provider sends nothing at all (a hung request): the wait for it is cut short
by the stop, not by the next event.

Photos, documents and voice are refs on their messages (``_items``); right before each request
(before the request hook) the newest images become image parts, read through the agent's
:class:`agent.items.MediaSource`, and every other one a stand-in line (:mod:`agent.items`).
A tool result that carries items (``session_fetch`` of a photo) keeps them as its ``_items``.

A tool result longer than ``result_limit`` tokens is archived whole through the agent's
:class:`ResultArchive` and the request carries its head and tail, naming the archived message
(:mod:`agent.excerpts`): one tool that returns megabytes cannot push a turn past the window.

What the model makes goes the other way: images an image model answers with are kept through the
same source (:meth:`agent.items.MediaSource.keep`) and carried as the answer's ``_items``; they and
the items of tool results marked for the person (:attr:`ToolOutput.deliver`) are the turn's
:attr:`TurnResult.outgoing`, which the gateway sends as photos and files after the reply's text.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from agent import json_codec
from agent.cancelling import cancel_and_wait
from agent.context_engine import ContextEngine
from agent.excerpts import excerpt, tokens_over
from agent.items import DEFAULT_MAX_IMAGES, ImageInliner, MediaSource
from agent.llm.errors import ContextTooLong, ProviderError, WindowExceeded
from agent.llm.stream import EventSink, StreamEvent
from agent.llm.types import Completion, MadeImage
from agent.messages import Message, tool_call_ids
from agent.models import vision_for
from agent.tokens import ITEMS_KEY, count_messages, count_request
from agent.tools import RECOVERY_TOOL_NAMES, ToolOutput, ToolRegistry
from agent.usage import Usage
from agent.windows import WindowTeacher, WindowUnknown

log = logging.getLogger(__name__)


class ChatModel(Protocol):
    """What the loop needs of a provider client (``agent.llm`` clients and the local model fit).

    A client that sends the messages to a provider checks them first and refuses broken tool
    pairs (``agent.messages.api_problems``), as ``ChatClient`` and ``ResponsesClient`` do: the
    loop does not check them a second time. It retries transient failures itself and hands
    stream events to ``on_event`` when given one.
    """

    async def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        model: str,
        max_tokens: int,
        tools: Sequence[Mapping[str, Any]] | None = None,
        temperature: float | None = None,
        on_event: EventSink | None = None,
    ) -> Completion: ...


@dataclass(frozen=True)
class ToolRunning:
    """The agent is running tool ``name`` with these (JSON) arguments; the model continues after it."""

    name: str
    arguments: str


#: Everything a turn's watcher can be handed.
AgentEvent = StreamEvent | ToolRunning
TurnSink = Callable[[AgentEvent], Awaitable[None]]

#: Stands in for the result of a tool call the person stopped before it ran.
STOPPED_TOOL_RESULT = '{"error": "stopped by the person before this tool ran"}'
#: Stands in for the result of a tool call the person stopped while it ran.
INTERRUPTED_TOOL_RESULT = '{"error": "stopped by the person while this tool ran"}'
#: The reply of a turn stopped before the model wrote anything.
STOPPED_REPLY = "⏹ Stopped."
#: The most of one tool result that is kept (16 million characters); what goes past it is cut off, and said so.
MAX_RESULT_CHARS = 16_000_000
#: Share of the window at most that a request keeps free for the answer (the hygiene pass leaves 15%).
ANSWER_ROOM_SHARE = 0.15


class TurnStopped(Exception):
    """Raised by a turn's watcher to end the turn now (the person sent ``/stop``).

    ``text`` is what the person has seen of the reply so far; it becomes the reply.
    """

    def __init__(self, text: str = "") -> None:
        super().__init__("the turn was stopped")
        self.text = text


#: Returns once the person stops the turn, with the :class:`TurnStopped` to end it with (it may wait forever).
StopWaiter = Callable[[], Awaitable[TurnStopped]]
T = TypeVar("T")


async def unless_stopped(work: Awaitable[T], until_stopped: StopWaiter) -> T:
    """``work``'s result, unless the person stops the turn first: then ``work`` is cancelled and the stop raised.

    A provider that accepts a request and sends nothing gives the turn's watcher no event to end
    it on; this ends the wait itself. Cancelling an HTTP request closes its connection, so the
    client's pool stays usable. A stop the watcher already knows wins before ``work`` begins, so a turn
    stopped before its first request sends none.
    """
    watcher = asyncio.ensure_future(until_stopped())
    try:
        await asyncio.sleep(0)
    except BaseException:
        _close(work)
        await cancel_and_wait(watcher)
        raise
    if watcher.done() and not watcher.cancelled() and watcher.exception() is None:
        _close(work)
        raise watcher.result()
    job = asyncio.ensure_future(work)
    try:
        await asyncio.wait((job, watcher), return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # cancelled from outside (the gateway shuts down): take both along
        await cancel_and_wait(job, watcher)
        raise
    if watcher.done() and not watcher.cancelled() and watcher.exception() is None:
        await cancel_and_wait(job)  # the stop won, even over an answer that came at the same moment: it was honoured
        raise watcher.result()
    if watcher.done() and not watcher.cancelled():
        log.warning("watching for a stop failed; the turn goes on without it: %r", watcher.exception())
    await cancel_and_wait(watcher)  # a watcher that lost the request (mid Redis command) is asked again
    return await job


def _close(work: Awaitable[Any]) -> None:
    """Let go of work that never started (a coroutine left unawaited would be reported as a leak)."""
    if asyncio.iscoroutine(work):
        work.close()


class ResultArchive(Protocol):
    """Where a tool result too long for the request is kept whole (the gateway: the session's archive)."""

    async def keep_whole(self, message: Message, key: str) -> str:
        """Store ``message`` whole (once per ``key``: a retried turn gets the same id); its message id."""


#: Adjusts the outgoing message list for a route (e.g. Anthropic cache markers); must not mutate its input.
RequestHook = Callable[[list[Message]], list[Message]]


@dataclass
class TurnResult:
    """What one turn produced; ``messages`` is the whole active list after it."""

    messages: list[Message]
    new_messages: list[Message]
    reply: str
    compacted: bool
    usage: Usage = field(default_factory=Usage)
    last_usage: Usage = field(default_factory=Usage)
    calls: int = 0
    #: Messages created during the turn (never stored, so without ``_id``) that an in-loop
    #: compaction folded away: the gateway archives them with the commit.
    folded: list[Message] = field(default_factory=list)
    #: Compactions the provider made of the conversation during the turn (a codex thread, Responses).
    native_compactions: int = 0
    #: Items made for the person during the turn (refs, kept in the chat's media store), in order.
    outgoing: list[dict[str, Any]] = field(default_factory=list)


class TurnFailed(Exception):
    """The provider failed the turn after part of its work was done.

    ``error`` is the provider's error; ``partial`` what the turn did before it (whole tool-call
    pairs, an in-loop compaction), for the caller to keep: tool results already paid for.
    """

    def __init__(self, error: ProviderError, partial: TurnResult) -> None:
        super().__init__(str(error))
        self.error = error
        self.partial = partial


def _give_calls_unique_ids(assistant: Message, history: Sequence[Message]) -> None:
    """Replace missing or reused tool-call ids with fresh ones before the calls enter the history.

    Some providers number calls per response (``functions.read:0``) or omit the id; a repeat of
    an id already in the conversation would make every later request invalid.
    """
    calls = assistant.get("tool_calls") or []
    if not calls:
        return
    taken = {call_id for message in history for call_id in tool_call_ids(message)}
    for call in calls:
        if not call.get("id") or call["id"] in taken:
            call["id"] = f"call_{uuid.uuid4().hex[:24]}"
        taken.add(call["id"])


class Agent:
    """Runs turns for one session with a model, a context engine and tools."""

    def __init__(
        self,
        model_client: ChatModel,
        engine: ContextEngine,
        *,
        model: str,
        tools: ToolRegistry | None = None,
        max_output_tokens: int = 4096,
        max_iterations: int = 40,
        request_hook: RequestHook | None = None,
        media: MediaSource | None = None,
        max_images: int = DEFAULT_MAX_IMAGES,
        vision: bool | None = None,
        results: ResultArchive | None = None,
        result_limit: int | None = None,
        system_prompt: str | None = None,
        window_teacher: WindowTeacher | None = None,
    ) -> None:
        """``system_prompt`` goes first in every request, never into the transcript (a changed prompt applies
        to old conversations at once, and compaction never folds it away); ``media`` reads the chat's stored
        items; ``max_images`` bounds the images one request carries;
        ``vision`` says whether the model takes images (None: the catalog's word, ``agent.models.vision_for``);
        a tool result over ``result_limit`` tokens is archived whole in ``results`` and goes as an excerpt;
        ``window_teacher`` keeps what a context-length refusal teaches about the chat model's window."""
        self.client = model_client
        self.engine = engine
        self.model = model
        self.tools = tools or ToolRegistry()
        self.max_output_tokens = max_output_tokens
        self.max_iterations = max_iterations
        self.request_hook = request_hook
        self.inliner = ImageInliner(
            media, max_images=max_images, vision=vision_for(model) if vision is None else vision
        )
        self.results = results
        self.result_limit = result_limit
        self.head: list[Message] = [{"role": "system", "content": system_prompt}] if system_prompt else []
        self.window_teacher = window_teacher

    def _tool_schemas(self) -> list[dict[str, Any]]:
        return self.tools.schemas() + list(self.engine.get_tool_schemas())

    @property
    def request_limit(self) -> int:
        """The largest prompt a request may carry: the window less the room kept for the answer."""
        window = self.engine.context_length
        return window - min(self.max_output_tokens, int(window * ANSWER_ROOM_SHARE))

    async def _within_window(
        self, messages: list[Message], tools: list[dict[str, Any]], done: _SoFar, until_stopped: StopWaiter | None
    ) -> list[Message]:
        """The last check before a request: a prompt over :attr:`request_limit` is compacted first, and one
        that still does not fit raises :class:`WindowExceeded` — it is never sent (a provider that truncates
        in silence would drop the conversation's start; one that refuses would fail the turn)."""
        if not self.engine.rewrites_transcript:
            return messages
        limit = self.request_limit
        tokens = count_request(self.head + messages, tools)
        if tokens <= limit:
            return messages
        log.info(
            "the request would be %d tokens, over the %d the window leaves: compacting before sending it", tokens, limit
        )
        new = await self._compact(messages, tokens, force=True, folded=done.folded, until_stopped=until_stopped)
        if new is not None:
            messages, done.compacted = new, True
            tokens = count_request(self.head + messages, tools)
        if tokens > limit:
            raise WindowExceeded(
                f"the request would be {tokens:,} tokens, over the {limit:,} the model's window "
                "leaves, even after compaction; it was not sent"
            )
        return messages

    async def _learn_window(self, refusal: ContextTooLong, messages: list[Message], done: _SoFar) -> bool:
        """Whether ``refusal`` taught a smaller window for the chat model, which the engine then plans for (the
        request is then compacted into it and sent again); a refusal that can teach nothing more ends the turn
        with the setting to fix."""
        if self.window_teacher is None:
            return False
        assumed = self.engine.context_length
        try:
            window = await self.window_teacher.refused(refusal, assumed)
        except WindowUnknown as unknown:
            failure = ContextTooLong(str(unknown), status=refusal.status, body=refusal.body)
            raise TurnFailed(failure, self._result(messages, "", done)) from refusal
        if window >= assumed:
            return False
        log.warning(
            "%s refused a request as too long: its window is %d tokens, not %d; compacting to fit",
            self.model,
            window,
            assumed,
        )
        self.engine.update_model(self.engine.model, window)
        return True

    async def _run_tool(self, name: str, arguments: str) -> ToolOutput:
        engine_tools = {schema["function"]["name"] for schema in self.engine.get_tool_schemas()}
        if name in engine_tools:
            try:
                args = json_codec.loads(arguments or "{}")
            except ValueError as error:
                return ToolOutput(json_codec.dumps_text({"error": f"invalid arguments for {name}: {error}"}))
            return ToolOutput(await self.engine.handle_tool_call(name, args))
        return await self.tools.run(name, arguments)

    async def _compact(
        self,
        messages: list[Message],
        tokens: int | None,
        *,
        force: bool,
        folded: list[Message],
        until_stopped: StopWaiter | None = None,
    ) -> list[Message] | None:
        """The engine's compaction of ``messages``, or None when it kept them as they were.

        Unstored messages it replaced are added to ``folded`` for the archive. A stop during it (a summarizer
        call can take a minute) raises :class:`TurnStopped` and leaves ``messages`` as they were.
        """
        work = self.engine.compress(messages, current_tokens=tokens, force=force)
        compacted = await (work if until_stopped is None else unless_stopped(work, until_stopped))
        unchanged = len(compacted) == len(messages) and all(a is b for a, b in zip(compacted, messages))
        if unchanged:
            return None
        kept = {id(message) for message in compacted}
        folded += [m for m in messages if "_id" not in m and id(m) not in kept]
        return list(compacted)

    async def _complete(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]],
        on_event: TurnSink | None,
        until_stopped: StopWaiter | None = None,
    ) -> Completion:
        # Compaction and storage keep tool pairs whole; the provider clients check them (and every
        # message's shape) once more right before each request and refuse to send a broken list.
        outgoing = self.head + await self.inliner.prepare(messages)
        outgoing = self.request_hook(outgoing) if self.request_hook else outgoing
        request = self.client.complete(
            outgoing, model=self.model, max_tokens=self.max_output_tokens, tools=tools or None, on_event=on_event
        )
        return await (request if until_stopped is None else unless_stopped(request, until_stopped))

    async def run_turn(
        self,
        history: Sequence[Message],
        user_message: Message | None,
        *,
        on_event: TurnSink | None = None,
        until_stopped: StopWaiter | None = None,
    ) -> TurnResult:
        """Answer ``user_message`` given ``history``; compacts in the loop when the engine says so.

        Without a ``user_message`` the turn continues one that ``history`` already holds (its message and
        the tool results it had when the provider went away), so those tools are not run again.
        ``on_event`` watches the turn as it happens (see the module docstring); ``until_stopped``
        ends a wait on the provider when the person stops the turn, even with no event arriving.
        """
        messages: list[Message] = list(history) + ([user_message] if user_message is not None else [])
        done = _SoFar(first_new=len(messages) - (user_message is not None))
        tools = self._tool_schemas()
        reply = ""
        context_retry_used = False
        iteration = 0
        while iteration < self.max_iterations:
            # The size to judge: the provider's report for the previous request of this turn; before
            # the first request, the engine's last report (from the previous turn, or the size its last
            # compaction left); a count only where no report exists.
            tokens = (
                done.last.prompt_tokens
                or (None if iteration else self.engine.last_prompt_tokens)
                or count_messages(messages)
            )
            try:
                if self.engine.should_compress(tokens):
                    new = await self._compact(
                        messages, tokens, force=False, folded=done.folded, until_stopped=until_stopped
                    )
                    if new is not None:
                        messages, done.compacted = new, True
                messages = await self._within_window(messages, tools, done, until_stopped)
                completion = await self._complete(messages, tools, on_event, until_stopped)
            except TurnStopped as stop:
                return self._stopped(messages, [], stop, done)
            except ProviderError as error:
                if isinstance(error, ContextTooLong) and not isinstance(error, WindowExceeded):
                    lowered = await self._learn_window(error, messages, done)
                    if lowered or not context_retry_used:
                        context_retry_used = True
                        try:
                            new = await self._compact(messages, None, force=True, folded=done.folded)
                        except ProviderError as again:  # the compaction's own call refused (a spent budget)
                            raise TurnFailed(again, self._result(messages, "", done)) from again
                        if new is not None:
                            messages, done.compacted = new, True
                        if new is not None or lowered:
                            continue
                # What the turn did so far (whole tool-call pairs: a failure falls between requests)
                # travels with the error, so the gateway keeps tool results that were already paid for.
                raise TurnFailed(error, self._result(messages, "", done)) from error
            iteration += 1
            done.answered(completion)
            self.engine.update_from_response(completion.usage)
            assistant = completion.as_message()
            _give_calls_unique_ids(assistant, messages)
            if completion.images:
                assistant[ITEMS_KEY] = await self._keep_made(completion.images)
                done.outgoing += [ref for ref in assistant[ITEMS_KEY] if ref.get("sha")]  # kept, so sendable
            messages.append(assistant)
            if not completion.tool_calls:
                reply = completion.text
                break
            stopped = await self._run_calls(assistant, messages, done.outgoing, on_event, until_stopped)
            if stopped is not None:
                pending, stopped_by = stopped
                return self._stopped(messages, pending, stopped_by, done)
        else:
            reply = "I stopped after too many tool calls in one turn; ask me to continue."
            messages.append({"role": "assistant", "content": reply})
        return self._result(messages, reply, done)

    async def _run_calls(
        self,
        assistant: Message,
        messages: list[Message],
        outgoing: list[dict[str, Any]],
        on_event: TurnSink | None,
        until_stopped: StopWaiter | None = None,
    ) -> tuple[Sequence[Mapping[str, Any]], TurnStopped] | None:
        """Run the assistant's tool calls in order, appending each result (and to ``outgoing`` the items of those
        for the person); on a stop, the calls not run yet (a call the stop cut short gets a result saying so,
        and is not among them)."""
        for position, call in enumerate(assistant["tool_calls"]):
            function = call.get("function") or {}
            name, arguments = str(function.get("name")), function.get("arguments") or "{}"
            try:
                if on_event is not None:
                    await on_event(ToolRunning(name, arguments))
            except TurnStopped as stop:
                return assistant["tool_calls"][position:], stop
            work = self._run_tool(name, arguments)
            try:
                result = await (work if until_stopped is None else unless_stopped(work, until_stopped))
            except TurnStopped as stop:
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": INTERRUPTED_TOOL_RESULT})
                return assistant["tool_calls"][position + 1 :], stop
            message = _tool_result(call["id"], result)
            # the recovery tools' results are bounded by themselves (MAX_FETCH_CHARS): never archived again
            messages.append(message if name in RECOVERY_TOOL_NAMES else await self._bounded(message))
            if result.deliver:
                outgoing += [dict(item) for item in result.items if item.get("sha")]
        return None

    async def _bounded(self, message: Message) -> Message:
        """A tool result within ``result_limit`` tokens: whole, or its excerpt naming the archived whole (at most
        :data:`MAX_RESULT_CHARS` of it). Counting megabytes takes a while: it is done off the event loop."""
        content = message["content"]
        if not self.result_limit or self.results is None or not isinstance(content, str):
            return message
        if len(content) > MAX_RESULT_CHARS:
            content = (
                f"{content[:MAX_RESULT_CHARS]}\n[… the result went on for {len(content) - MAX_RESULT_CHARS:,} "
                "more characters, not kept]"
            )
            message = {**message, "content": content}
        counting = len(content) > 100_000
        tokens = await (
            asyncio.to_thread(tokens_over, content, self.result_limit)
            if counting
            else asyncio.sleep(0, tokens_over(content, self.result_limit))
        )
        if tokens is None:
            return message
        digest = hashlib.sha256(content.encode("utf-8", "replace")).hexdigest()[:16]  # a retry's other result: its own
        original_id = await self.results.keep_whole(message, f"{message['tool_call_id']}:{digest}")
        log.info(
            "a tool result of %d tokens, over the bound of %d: archived whole as message %s",
            tokens,
            self.result_limit,
            original_id,
        )
        return {
            **message,
            "content": excerpt(content, tokens, self.result_limit, original_id, what="tool result"),
            "_orig_id": original_id,
        }

    async def _keep_made(self, images: Sequence[MadeImage]) -> list[dict[str, Any]]:
        """Refs of the images the model made, kept in the chat's store (a ref with ``error`` for one that
        could not be, so the transcript still says it was made)."""
        refs: list[dict[str, Any]] = []
        for number, image in enumerate(images, 1):
            name = f"image-{number}.{image.mime.rpartition('/')[2] or 'bin'}"
            if self.inliner.media is None:
                log.warning("the model made an image, but this agent has no media store to keep it in")
                refs.append(
                    {
                        "kind": "image",
                        "sha": "",
                        "name": name,
                        "mime": image.mime,
                        "bytes": len(image.data),
                        "error": "no media store to keep it in",
                    }
                )
                continue
            refs.append(dict(await self.inliner.media.keep(image.data, mime=image.mime, name=name)))
        return refs

    def _stopped(
        self, messages: list[Message], pending: Sequence[Mapping[str, Any]], stop: TurnStopped, done: _SoFar
    ) -> TurnResult:
        """End a stopped turn: calls not yet run get a stand-in result (pairs stay whole), and what the
        person saw of the reply is kept as the reply."""
        for call in pending:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": STOPPED_TOOL_RESULT})
        reply = stop.text.strip() or STOPPED_REPLY
        messages.append({"role": "assistant", "content": reply})
        return self._result(messages, reply, done)

    @staticmethod
    def _result(messages: list[Message], reply: str, done: _SoFar) -> TurnResult:
        new_messages = [] if done.compacted else messages[done.first_new :]
        return TurnResult(
            messages,
            new_messages,
            reply,
            done.compacted,
            done.total,
            done.last,
            done.calls,
            done.folded,
            done.native_compactions,
            done.outgoing,
        )


def _tool_result(call_id: str, output: ToolOutput) -> Message:
    """The tool message for a call's output; its items (copied) become the message's ``_items``."""
    message: Message = {"role": "tool", "tool_call_id": call_id, "content": output.text}
    if output.items:
        message[ITEMS_KEY] = [dict(item) for item in output.items]
    return message


@dataclass
class _SoFar:
    """What a turn has done so far: what its result reports, however the turn ends."""

    first_new: int  # where the turn's own messages begin
    compacted: bool = False
    total: Usage = field(default_factory=Usage)
    last: Usage = field(default_factory=Usage)
    calls: int = 0
    native_compactions: int = 0
    folded: list[Message] = field(default_factory=list)
    outgoing: list[dict[str, Any]] = field(default_factory=list)

    def answered(self, completion: Completion) -> None:
        self.calls += 1
        self.total = self.total + completion.usage
        self.last = completion.usage
        self.native_compactions += completion.native_compactions
