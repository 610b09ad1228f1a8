"""The agent's tools: what one is, what it returns, and the registry one turn offers the model.

A tool never raises into the loop: failures come back to the model as a JSON error it can read
and act on. A tool returns text, or a :class:`ToolOutput` when its result also carries items
(photos, documents): the loop stores those as the result message's ``_items``, so the next
request shows the images as it shows any message's.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from agent import json_codec

log = logging.getLogger(__name__)

#: How a tool call ended: answered, answered with an error, past its timeout, its server away, stopped by the
#: person, or refused by them (or by their silence) when asked first.
CallOutcome = Literal["ok", "error", "timeout", "down", "cancelled", "refused"]


@dataclass(frozen=True)
class ToolOutput:
    """A tool's result text and the items (refs, see ``agent.items.ItemRef``) it hands the model with it.

    ``deliver``: the items are also the person's (a chart a tool drew goes to the chat as a photo); a
    recovery tool's are not (``session_fetch`` shows the model a photo the person sent long ago).
    """

    text: str
    items: tuple[Mapping[str, Any], ...] = ()
    deliver: bool = False

    @classmethod
    def of(cls, result: str | ToolOutput) -> ToolOutput:
        return result if isinstance(result, ToolOutput) else cls(result)


ToolHandler = Callable[[dict[str, Any]], Awaitable["str | ToolOutput"]]


@dataclass(frozen=True)
class Tool:
    """One callable tool: its OpenAI function schema and the coroutine that runs it."""

    name: str
    description: str
    parameters: dict[str, Any]
    handler: ToolHandler

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


@dataclass
class ToolRegistry:
    """The tools offered to the model in one turn."""

    tools: dict[str, Tool] = field(default_factory=dict)
    #: Provides a tool for a name the registry does not hold (e.g. tools played back from a recording).
    fallback: Callable[[str], Tool | None] | None = None
    #: Failures that end the turn instead of reaching the model: the store behind a tool is away, and
    #: the turn is better tried again once it is back than answered without what the tool would find.
    propagate: Callable[[Exception], bool] | None = None

    def add(self, tool: Tool) -> None:
        self.tools[tool.name] = tool

    def schemas(self) -> list[dict[str, Any]]:
        return [tool.schema() for tool in self.tools.values()]

    async def call(self, name: str, arguments: str | Mapping[str, Any] | None) -> str:
        """The text of :meth:`run`'s result (for callers that take no items)."""
        return (await self.run(name, arguments)).text

    async def run(self, name: str, arguments: str | Mapping[str, Any] | None) -> ToolOutput:
        """Run a tool by name with JSON arguments; every failure becomes a JSON error result."""
        tool = self.tools.get(name) or (self.fallback(name) if self.fallback else None)
        if tool is None:
            return ToolOutput(
                json_codec.dumps_text({"error": f"unknown tool {name!r}", "available": sorted(self.tools)})
            )
        try:
            args = json_codec.loads(arguments or "{}") if isinstance(arguments, str) else dict(arguments or {})
            if not isinstance(args, dict):
                raise ValueError("arguments must be a JSON object")
        except ValueError as error:
            return ToolOutput(json_codec.dumps_text({"error": f"invalid arguments for {name}: {error}"}))
        try:
            return ToolOutput.of(await tool.handler(args))
        except Exception as error:  # the model sees the failure instead of the turn dying
            if self.propagate is not None and self.propagate(error):
                raise
            log.exception("tool %s failed", name)
            return ToolOutput(json_codec.dumps_text({"error": f"{name} failed: {type(error).__name__}: {error}"}))
