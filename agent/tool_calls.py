"""Running the tool calls of one assistant message, in order, within a turn.

Each call goes to the context engine when it names one of the engine's tools, else to the
registry. A result longer than ``result_limit`` tokens is archived whole through the agent's
:class:`ResultArchive` and the request carries its head and tail, naming the archived message
(:mod:`agent.excerpts`): one tool that returns megabytes cannot push a turn past the window. The
items of a result marked for the person (:attr:`ToolOutput.deliver`) go out with the turn.

The person may stop the turn before a call runs or while it runs; every call keeps its result
either way (a stand-in saying what happened), so the transcript's tool pairs stay whole.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
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
            work = self.run_tool(name, arguments)
            try:
                result = await (work if until_stopped is None else unless_stopped(work, until_stopped))
            except TurnStopped as stop:
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": INTERRUPTED_TOOL_RESULT})
                return assistant["tool_calls"][position + 1 :], stop
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
