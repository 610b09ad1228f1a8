"""Running the tool calls of one assistant message, in order, within a turn.

Each call goes to the context engine when it names one of the engine's tools, else to the
registry. A result longer than ``result_limit`` tokens is archived whole through the agent's
:class:`ResultArchive` and the request carries its head and tail, naming the archived message
(:mod:`agent.excerpts`): one tool that returns megabytes cannot push a turn past the window. The
items of a result marked for the person (:attr:`ToolOutput.deliver`) go out with the turn.

The person may stop the turn before a call runs or while it runs; every call keeps its result
either way (a stand-in saying what happened), so the transcript's tool pairs stay whole.

A client (an OpenAI-compatible caller) may bring tools of its own, which it runs itself: they are offered
with the bot's (:func:`client_tool_schemas`), an answer's calls of them are set apart (:func:`split_calls`)
and end the turn unanswered, and the client's next request brings their results (:func:`answer_pending`,
checked against :func:`pending_calls`). Those are the one case of a transcript that ends with calls awaiting
results; the repair and compaction leave such calls at the end as they are.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import uuid
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agent import json_codec
from agent.context_engine import ContextEngine
from agent.excerpts import excerpt, tokens_over
from agent.messages import Message, tool_call_ids
from agent.stopping import StopWaiter, TurnStopped, unless_stopped
from agent.tokens import ITEMS_KEY
from agent.tools import RECOVERY_TOOL_NAMES, ToolOutput, ToolRegistry

log = logging.getLogger(__name__)

#: Stands in for the result of a tool call the person stopped while it ran.
INTERRUPTED_TOOL_RESULT = '{"error": "stopped by the person while this tool ran"}'
#: The most of one tool result that is kept (16 million characters); what goes past it is cut off, and said so.
MAX_RESULT_CHARS = 16_000_000


@dataclass(frozen=True)
class ToolRunning:
    """The agent is running tool ``name`` with these (JSON) arguments; the model continues after it."""

    name: str
    arguments: str


#: Hears of each tool call before it runs (the turn's watcher); raising :class:`TurnStopped` stops the turn.
ToolSink = Callable[[ToolRunning], Awaitable[None]]


class ResultArchive(Protocol):
    """Where a tool result too long for the request is kept whole (the gateway: the session's archive)."""

    async def keep_whole(self, message: Message, key: str) -> str:
        """Store ``message`` whole (once per ``key``: a retried turn gets the same id); its message id."""


def give_calls_unique_ids(assistant: Message, history: Sequence[Message]) -> None:
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


def tool_result(call_id: str, output: ToolOutput) -> Message:
    """The tool message for a call's output; its items (copied) become the message's ``_items``."""
    message: Message = {"role": "tool", "tool_call_id": call_id, "content": output.text}
    if output.items:
        message[ITEMS_KEY] = [dict(item) for item in output.items]
    return message


@dataclass(frozen=True)
class ToolCaller:
    """Runs an assistant message's tool calls on the engine's tools and the registry's, bounding what they return."""

    engine: ContextEngine
    tools: ToolRegistry
    results: ResultArchive | None = None
    result_limit: int | None = None

    async def run_calls(
        self,
        assistant: Message,
        messages: list[Message],
        outgoing: list[dict[str, Any]],
        on_event: ToolSink | None,
        until_stopped: StopWaiter | None = None,
        calls: Sequence[Mapping[str, Any]] | None = None,
    ) -> tuple[Sequence[Mapping[str, Any]], TurnStopped] | None:
        """Run the assistant's tool calls (``calls`` of them, when given) in order, appending each result (and to
        ``outgoing`` the items of those for the person); on a stop, the calls not run yet (a call the stop cut
        short gets a result saying so, and is not among them)."""
        calls = assistant["tool_calls"] if calls is None else calls
        for position, call in enumerate(calls):
            function = call.get("function") or {}
            name, arguments = str(function.get("name")), function.get("arguments") or "{}"
            try:
                if on_event is not None:
                    await on_event(ToolRunning(name, arguments))
            except TurnStopped as stop:
                return calls[position:], stop
            work = self.run_tool(name, arguments)
            try:
                result = await (work if until_stopped is None else unless_stopped(work, until_stopped))
            except TurnStopped as stop:
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": INTERRUPTED_TOOL_RESULT})
                return calls[position + 1 :], stop
            message = tool_result(call["id"], result)
            # the recovery tools' results are bounded by themselves (MAX_FETCH_CHARS): never archived again
            messages.append(message if name in RECOVERY_TOOL_NAMES else await self.bounded(message))
            if result.deliver:
                outgoing += [dict(item) for item in result.items if item.get("sha")]
        return None

    async def run_tool(self, name: str, arguments: str) -> ToolOutput:
        """One call's output: from the engine when the tool is one of its own, else from the registry."""
        engine_tools = {schema["function"]["name"] for schema in self.engine.get_tool_schemas()}
        if name in engine_tools:
            try:
                args = json_codec.loads(arguments or "{}")
            except ValueError as error:
                return ToolOutput(json_codec.dumps_text({"error": f"invalid arguments for {name}: {error}"}))
            return ToolOutput(await self.engine.handle_tool_call(name, args))
        return await self.tools.run(name, arguments)

    async def bounded(self, message: Message) -> Message:
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


# ----------------------------------------------------------------- tools the client runs

#: What a tool name may be: the rule the OpenAI API applies, which Anthropic's and the Responses API's fit within.
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class ClientToolError(ValueError):
    """A turn's client tools or tool results cannot be taken as given; ``param`` names the request field at fault
    (``tools`` or ``tool_call_id``), so an HTTP front answers 400 naming it."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


def client_tool_schemas(client_tools: Sequence[Mapping[str, Any]], taken: Collection[str]) -> list[dict[str, Any]]:
    """The client's function tools as the loop offers them (name, description, parameters; nothing else of the
    client's is sent on). Refused when one is not a function tool, has no valid name, or shares a name with
    another client tool or one of ``taken`` (the bot's own): the model would call one thinking it the other."""
    schemas: list[dict[str, Any]] = []
    seen: set[str] = set()
    for tool in client_tools:
        function = tool.get("function") if tool.get("type") == "function" else None
        name = function.get("name") if isinstance(function, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(name, str) or not _TOOL_NAME.match(name):
            raise ClientToolError("tools", f"each tool must be a function tool with a valid name, not {tool!r:.200}")
        if name in taken or name in seen:
            clash = "one of the bot's own tools" if name in taken else "another tool of the request"
            raise ClientToolError("tools", f"the tool name {name!r} is taken by {clash}")
        seen.add(name)
        schema: dict[str, Any] = {"name": name, "description": str(function.get("description") or "")}
        schema["parameters"] = function.get("parameters") or {"type": "object", "properties": {}}
        schemas.append({"type": "function", "function": schema})
    return schemas


def split_calls(
    calls: Sequence[Mapping[str, Any]], client_names: Collection[str]
) -> tuple[list[Mapping[str, Any]], list[dict[str, Any]]]:
    """An answer's calls as the loop runs them (the bot's own, and names it knows nothing of, which the registry
    answers with an error) and those of the client's tools, which the turn ends with for the client to run."""
    own: list[Mapping[str, Any]] = []
    theirs: list[dict[str, Any]] = []
    for call in calls:
        name = (call.get("function") or {}).get("name")
        if name in client_names:
            theirs.append(dict(call))
        else:
            own.append(call)
    return own, theirs


def pending_calls(history: Sequence[Message]) -> list[dict[str, Any]]:
    """The calls of the history's last assistant message that no tool result after it answers: the client's calls
    awaiting their results (the bot's own calls are always answered within their turn)."""
    answered: set[str] = set()
    for message in reversed(history):
        if message.get("role") == "tool":
            answered.add(str(message.get("tool_call_id")))
            continue
        calls = (message.get("tool_calls") or []) if message.get("role") == "assistant" else []
        return [dict(call) for call in calls if call.get("id") not in answered]
    return []


def answer_pending(history: Sequence[Message], results: Sequence[Mapping[str, Any]]) -> list[Message]:
    """The tool messages of the client's ``results`` (each ``{tool_call_id, content}``), checked against the calls
    that await them at the end of ``history``: each id must answer one of them, once, and every one of them
    must be answered (as the OpenAI API requires of an assistant message's calls)."""
    waiting = [str(call.get("id")) for call in pending_calls(history)]
    messages: list[Message] = []
    for result in results:
        call_id = result.get("tool_call_id")
        if not isinstance(call_id, str) or call_id not in waiting:
            raise ClientToolError(
                "tool_call_id", f"tool_call_id {call_id!r} answers no pending tool call of the conversation"
            )
        waiting.remove(call_id)
        content = result.get("content")
        text = content if isinstance(content, str) else json_codec.dumps_text(content)
        messages.append({"role": "tool", "tool_call_id": call_id, "content": text})
    if waiting:
        raise ClientToolError("tool_call_id", f"no result was given for the pending tool call(s) {', '.join(waiting)}")
    return messages
