"""The words the MCP tools are described in (:mod:`agent.tools.mcp`): a server as configured, what a call of
one of its tools may do, a person's yes or no, the record of a call, and the two ways a call fails.

They sit apart from the sessions and the offering so that the gateway's configuration, its approvals and
its audit trail can speak of MCP tools without the SDK's session machinery.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Protocol

import mcp_types as types
from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for

from agent.tools.registry import CallOutcome

Policy = Literal["auto", "ask", "deny"]
#: Separates a server's name from its tool's in the name the model sees.
SEPARATOR = "__"
#: Longest tool name the providers take (OpenAI: ``^[a-zA-Z0-9_-]{1,64}$``).
MAX_TOOL_NAME = 64


class Listed(NamedTuple):
    """One tool of a server's listing: the tool, what a call of it may do, why it cannot be offered ("": it can)."""

    tool: types.Tool
    policy: Policy
    problem: str


class ToolFailed(Exception):
    """The server answered a call with an error of its own (bad arguments, a bug of the tool): the model is told."""


class ServerDown(Exception):
    """A server that cannot be used now: its tools answer the model with this error."""

    def __init__(self, server: str, reason: str) -> None:
        super().__init__(f"the MCP server {server!r} is not available: {reason}")
        self.server = server


@dataclass(frozen=True)
class McpServerSpec:
    """One server as this process starts it: ``command`` (stdio) or ``url`` (streamable HTTP), secrets resolved."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)  # secrets: never in a log line
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    timeout_seconds: float = 60.0
    include: frozenset[str] = frozenset()
    exclude: frozenset[str] = frozenset()
    server_policy: Policy | None = None
    tool_policies: Mapping[str, Policy] = field(default_factory=dict)

    def offers(self, tool: str) -> bool:
        """Whether ``include``/``exclude`` let the tool through."""
        return (not self.include or tool in self.include) and tool not in self.exclude

    def policy(self, tool: types.Tool, *, new: bool = False) -> Policy:
        """What a call of ``tool`` may do: its own setting, the server's, else its hints — read-only runs, one
        that may destroy asks the person first (``new``: it appeared after a reconnect, and only a setting lets
        it run)."""
        if tool.name in self.tool_policies:
            return self.tool_policies[tool.name]
        if self.server_policy is not None:
            return self.server_policy
        if new:
            return "deny"
        hints = tool.annotations
        if hints is not None and hints.read_only_hint:
            return "auto"
        destructive = True if hints is None or hints.destructive_hint is None else hints.destructive_hint
        return "ask" if destructive else "auto"


@dataclass(frozen=True)
class Approval:
    """A person's answer to "may I run this?": whether to run it, and the line that says who said what."""

    approved: bool
    said: str


class Approver(Protocol):
    """Asks the person whose message the turn answers before a tool whose policy is ``ask`` runs (the gateway
    asks in the chat, with buttons where the platform has them)."""

    async def approve(self, server: str, tool: str, arguments: Mapping[str, Any]) -> Approval:
        """Their answer; no answer in time is a refusal."""


@dataclass(frozen=True)
class CallRecord:
    """One tool call, for the audit trail: which tool of which server, how big its arguments, how it ended."""

    server: str
    tool: str
    argument_bytes: int
    outcome: CallOutcome
    seconds: float


#: Told of every call when it ends.
CallSink = Callable[[CallRecord], Awaitable[None]]


def exposed_name(server: str, tool: str) -> str:
    """The name the model sees: ``<server>__<tool>``, characters the providers refuse made ``_``, within 64."""
    return f"{server}{SEPARATOR}{re.sub(r'[^A-Za-z0-9_-]', '_', tool)}"[:MAX_TOOL_NAME]


def schema_problem(schema: Any) -> str:
    """Why an input schema cannot go to a provider ("" when it can): it must be a valid JSON Schema of an object."""
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        return "it is not an object schema"
    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as error:
        return f"it is not a valid JSON Schema ({error.message})"
    return ""
