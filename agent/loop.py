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

A caller may bring function tools it runs itself (``run_turn(..., client_tools=...)``, an OpenAI-compatible
client's own): an answer that calls them runs the agent's own calls of that answer, then ends the turn with the
client's calls unanswered (:attr:`TurnResult.pending_client_calls`); the next turn starts from their results
(``run_turn(..., tool_results=...)``). The turn never asks the model again before the client has answered.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from agent.context_engine import ContextEngine
from agent.items import DEFAULT_MAX_IMAGES, ImageInliner, MediaSource
from agent.llm.errors import ContextTooLong, ProviderError, WindowExceeded
from agent.llm.stream import EventSink, StreamEvent
from agent.llm.types import Completion, MadeImage
from agent.messages import Message, with_note
from agent.models import vision_for
from agent.stopping import StopWaiter, TurnStopped, unless_stopped
from agent.tokens import ITEMS_KEY, count_messages, count_request, count_text
from agent.tool_calls import (
    INTERRUPTED_TOOL_RESULT,
    MAX_RESULT_CHARS,
    ClientToolError,
    ResultArchive,
    ToolCaller,
    ToolRunning,
    answer_pending,
    client_tool_schemas,
    give_calls_unique_ids,
    split_calls,
)
from agent.tools import ToolRegistry
from agent.turn_result import TurnFailed, TurnResult, TurnSoFar
from agent.windows import WindowTeacher, WindowUnknown

# The turn's parts live in their own modules (stopping a turn, running its tool calls); the names a caller
# needs of a turn are all importable from here.
__all__ = [
    "ANSWER_ROOM_SHARE",
    "INTERRUPTED_TOOL_RESULT",
    "MAX_RESULT_CHARS",
    "STOPPED_REPLY",
    "STOPPED_TOOL_RESULT",
    "Agent",
    "AgentEvent",
    "ChatModel",
    "ClientToolError",
    "RequestHook",
    "ResultArchive",
    "StopWaiter",
    "ToolRunning",
    "TurnFailed",
    "TurnResult",
    "TurnSink",
    "TurnStopped",
    "unless_stopped",
]

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


#: Everything a turn's watcher can be handed.
AgentEvent = StreamEvent | ToolRunning
TurnSink = Callable[[AgentEvent], Awaitable[None]]

#: Stands in for the result of a tool call the person stopped before it ran.
STOPPED_TOOL_RESULT = '{"error": "stopped by the person before this tool ran"}'
#: The reply of a turn stopped before the model wrote anything.
STOPPED_REPLY = "⏹ Stopped."
#: Share of the window at most that a request keeps free for the answer (the hygiene pass leaves 15%).
ANSWER_ROOM_SHARE = 0.15


#: Adjusts the outgoing message list for a route (e.g. Anthropic cache markers); must not mutate its input.
#: What it returns is only sent, so it may be plain request dicts.
RequestHook = Callable[[list[Message]], Sequence[Mapping[str, Any]]]


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
        turn_note: str = "",
    ) -> None:
        """``system_prompt`` goes first in every request, never into the transcript (a changed prompt applies
        to old conversations at once, and compaction never folds it away); ``media`` reads the chat's stored
        items; ``max_images`` bounds the images one request carries;
        ``vision`` says whether the model takes images (None: the catalog's word, ``agent.models.vision_for``);
        a tool result over ``result_limit`` tokens is archived whole in ``results`` and goes as an excerpt;
        ``window_teacher`` keeps what a context-length refusal teaches about the chat model's window;
        ``turn_note`` goes before the turn's own message in every request of the turn and is never stored (what
        the gateway tells the model about the person writing, which changes from turn to turn: kept out of the
        cached prefix and out of the transcript)."""
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
        self.turn_note = turn_note
        self._noted: Message | None = None  # the turn's own message, which the note goes before

    @property
    def note_tokens(self) -> int:
        """What the turn's note adds to each request (it is in none of the messages counted)."""
        return count_text(self.turn_note) if self.turn_note else 0

    def _tool_schemas(self) -> list[dict[str, Any]]:
        return self.tools.schemas() + list(self.engine.get_tool_schemas())

    @property
    def request_limit(self) -> int:
        """The largest prompt a request may carry: the window less the room kept for the answer."""
        window = self.engine.context_length
        return window - min(self.max_output_tokens, int(window * ANSWER_ROOM_SHARE))

    async def _within_window(
        self, messages: list[Message], tools: list[dict[str, Any]], done: TurnSoFar, until_stopped: StopWaiter | None
    ) -> list[Message]:
        """The last check before a request: a prompt over :attr:`request_limit` is compacted first, and one
        that still does not fit raises :class:`WindowExceeded` — it is never sent (a provider that truncates
        in silence would drop the conversation's start; one that refuses would fail the turn)."""
        if not self.engine.rewrites_transcript:
            return messages
        limit = self.request_limit
        tokens = count_request(self.head + messages, tools) + self.note_tokens
        if tokens <= limit:
            return messages
        log.info(
            "the request would be %d tokens, over the %d the window leaves: compacting before sending it", tokens, limit
        )
        new = await self._compact(messages, tokens, force=True, folded=done.folded, until_stopped=until_stopped)
        if new is not None:
            messages, done.compacted = new, True
            tokens = count_request(self.head + messages, tools) + self.note_tokens
        if tokens > limit:
            raise WindowExceeded(
                f"the request would be {tokens:,} tokens, over the {limit:,} the model's window "
                "leaves, even after compaction; it was not sent"
            )
        return messages

    async def _learn_window(self, refusal: ContextTooLong, done: TurnSoFar) -> bool:
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
            raise TurnFailed(failure, done.result("")) from refusal
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
        noted = self._noted
        if noted is not None and self.turn_note:
            messages = [with_note(m, self.turn_note) if m is noted else m for m in messages]
        outgoing = self.head + await self.inliner.prepare(messages)
        sent = self.request_hook(outgoing) if self.request_hook else outgoing
        request = self.client.complete(
            sent, model=self.model, max_tokens=self.max_output_tokens, tools=tools or None, on_event=on_event
        )
        return await (request if until_stopped is None else unless_stopped(request, until_stopped))

    async def run_turn(
        self,
        history: Sequence[Message],
        user_message: Message | None,
        *,
        client_tools: Sequence[Mapping[str, Any]] = (),
        tool_results: Sequence[Mapping[str, Any]] = (),
        on_event: TurnSink | None = None,
        until_stopped: StopWaiter | None = None,
    ) -> TurnResult:
        """Answer ``user_message`` given ``history``; compacts in the loop when the engine says so.

        Without a ``user_message`` the turn continues one that ``history`` already holds (its message and
        the tool results it had when the provider went away), so those tools are not run again.
        ``client_tools`` are function tools the caller runs itself, offered beside the agent's own: an answer
        calling any of them ends the turn, once the agent's own calls of that answer have run, with those calls
        unanswered (:attr:`TurnResult.pending_client_calls`). ``tool_results`` (``{tool_call_id, content}``)
        answer the calls ``history`` ends with that way, and the turn starts from them. Both are checked before
        any request (:class:`ClientToolError` names the field at fault).
        ``on_event`` watches the turn as it happens (see the module docstring); ``until_stopped``
        ends a wait on the provider when the person stops the turn, even with no event arriving.
        """
        self._noted = user_message
        opening = answer_pending(history, tool_results) if tool_results else []
        messages: list[Message] = [*history, *opening, *([user_message] if user_message is not None else [])]
        done = TurnSoFar(messages, first_new=len(history))
        own_tools = self._tool_schemas()
        theirs = client_tool_schemas(client_tools, {str((s.get("function") or {}).get("name")) for s in own_tools})
        tools, client_names = own_tools + theirs, {schema["function"]["name"] for schema in theirs}
        caller = ToolCaller(self.engine, self.tools, self.results, self.result_limit)
        for iteration in range(self.max_iterations):
            try:
                completion = await self._answer(done, tools, iteration, on_event, until_stopped)
            except TurnStopped as stop:
                return self._stopped(done, [], stop)
            except ProviderError as error:
                # What the turn did so far (whole tool-call pairs: a failure falls between requests)
                # travels with the error, so the gateway keeps tool results that were already paid for.
                raise TurnFailed(error, done.result("")) from error
            assistant = await self._take_answer(completion, done)
            if not completion.tool_calls:
                return done.result(completion.text)
            own, for_client = split_calls(assistant["tool_calls"], client_names)
            stopped = await caller.run_calls(assistant, done.messages, done.outgoing, on_event, until_stopped, own)
            if stopped is not None:  # the client's calls are stopped too: the stop ends the turn, not the client
                pending, stopped_by = stopped
                return self._stopped(done, [*pending, *for_client], stopped_by)
            if for_client:
                return done.result(completion.text, for_client)
        reply = "I stopped after too many tool calls in one turn; ask me to continue."
        done.messages.append({"role": "assistant", "content": reply})
        return done.result(reply)

    async def _answer(
        self,
        done: TurnSoFar,
        tools: list[dict[str, Any]],
        iteration: int,
        on_event: TurnSink | None,
        until_stopped: StopWaiter | None,
    ) -> Completion:
        """The model's answer to the turn so far; a request the provider refuses as too long is compacted and sent
        again while :meth:`_refit` finds that worth it, else the refusal is raised."""
        while True:
            try:
                return await self._request(done, tools, iteration, on_event, until_stopped)
            except ContextTooLong as refusal:
                if isinstance(refusal, WindowExceeded) or not await self._refit(refusal, done):
                    raise

    async def _request(
        self,
        done: TurnSoFar,
        tools: list[dict[str, Any]],
        iteration: int,
        on_event: TurnSink | None,
        until_stopped: StopWaiter | None,
    ) -> Completion:
        """One request for the turn's messages, compacted first when the engine says they are due for it."""
        # The size to judge: the provider's report for the previous request of this turn; before
        # the first request, the engine's last report (from the previous turn, or the size its last
        # compaction left); a count only where no report exists.
        tokens = (
            done.last.prompt_tokens
            or (None if iteration else self.engine.last_prompt_tokens)
            or count_messages(done.messages)
        )
        if self.engine.should_compress(tokens):
            new = await self._compact(
                done.messages, tokens, force=False, folded=done.folded, until_stopped=until_stopped
            )
            if new is not None:
                done.messages, done.compacted = new, True
        done.messages = await self._within_window(done.messages, tools, done, until_stopped)
        return await self._complete(done.messages, tools, on_event, until_stopped)

    async def _refit(self, refusal: ContextTooLong, done: TurnSoFar) -> bool:
        """Whether a request ``refusal`` turned away as too long goes again, compacted: once a turn, and each time
        the refusal taught a smaller window. The compaction's own call failing fails the turn."""
        lowered = await self._learn_window(refusal, done)
        if not lowered and done.context_retry_used:
            return False
        done.context_retry_used = True
        try:
            new = await self._compact(done.messages, None, force=True, folded=done.folded)
        except ProviderError as again:  # the compaction's own call refused (a spent budget)
            raise TurnFailed(again, done.result("")) from again
        if new is not None:
            done.messages, done.compacted = new, True
        return new is not None or lowered

    async def _take_answer(self, completion: Completion, done: TurnSoFar) -> Message:
        """Count the answer and add it to the turn's messages (with the images the model made, kept); the message."""
        done.answered(completion)
        self.engine.update_from_response(completion.usage)
        assistant = completion.as_message()
        give_calls_unique_ids(assistant, done.messages)
        if completion.images:
            assistant[ITEMS_KEY] = await self._keep_made(completion.images)
            done.outgoing += [ref for ref in assistant[ITEMS_KEY] if ref.get("sha")]  # kept, so sendable
        done.messages.append(assistant)
        return assistant

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

    @staticmethod
    def _stopped(done: TurnSoFar, pending: Sequence[Mapping[str, Any]], stop: TurnStopped) -> TurnResult:
        """End a stopped turn: calls not yet run get a stand-in result (pairs stay whole), and what the
        person saw of the reply is kept as the reply."""
        for call in pending:
            done.messages.append({"role": "tool", "tool_call_id": call["id"], "content": STOPPED_TOOL_RESULT})
        reply = stop.text.strip() or STOPPED_REPLY
        done.messages.append({"role": "assistant", "content": reply})
        return done.result(reply)
