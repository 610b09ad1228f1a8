"""MCP servers as the agent's tools, through the official ``mcp`` SDK (stdio and streamable HTTP).

Each server has one session per process (:class:`McpServer`), opened at its first use and held by a
task of its own (the SDK's session lives in the task that opened it). A server that exits, or cannot
be reached, is opened again at a later use after a wait that doubles from one second up to a minute
(:data:`agent.retrying.MCP_CONNECT`); meanwhile its tools answer the model with an error naming it,
and the turn goes on.

Its tools reach the model as ``<server>__<tool>`` with the server's own input schema, in name order,
so the prompt-cache prefix holds from turn to turn. What each may do is one policy
(:meth:`~agent.tools.mcp_spec.McpServerSpec.policy`): configured per tool, else per server, else
from the tool's own hints (read-only runs; destructive is denied until a person may approve calls);
a tool that appears only after a reconnect is denied until it is configured. A denied tool is never
offered, so no path calls it. A call that runs past the server's ``timeout_seconds`` is cancelled —
the SDK tells the server — and answered with an error; a ``/stop`` cancels it the same way.

A result is what :func:`~agent.tools.mcp_results.tool_output` makes of it: its text, its files kept
and handed to the person, an error result as the model's tool error. Every call is reported to
``on_call`` (:class:`~agent.tools.mcp_spec.CallRecord`) for the audit trail; the words all this is
described in are :mod:`agent.tools.mcp_spec`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import CONNECTION_CLOSED

from agent import json_codec
from agent.items import MediaSource
from agent.retrying import MCP_CONNECT
from agent.tools.mcp_results import tool_output
from agent.tools.mcp_spec import (
    MAX_TOOL_NAME,
    SEPARATOR,
    Approval,
    Approver,
    CallRecord,
    CallSink,
    Listed,
    McpServerSpec,
    Policy,
    ServerDown,
    ToolFailed,
    exposed_name,
    schema_problem,
)
from agent.tools.registry import CallOutcome, Tool, ToolOutput

#: The names the gateway, the evals and the tests import from here, wherever they are defined.
__all__ = [
    "CONNECT_TIMEOUT",
    "MAX_TOOL_NAME",
    "SEPARATOR",
    "Approval",
    "Approver",
    "CallRecord",
    "CallSink",
    "Listed",
    "McpServer",
    "McpServerSpec",
    "McpTools",
    "Policy",
    "ServerDown",
    "ToolFailed",
    "exposed_name",
    "schema_problem",
    "tool_output",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Longest wait for a server to start and answer its handshake.
CONNECT_TIMEOUT = 30.0
#: Seconds a cancelled call has to end before its session is let go instead.
CANCEL_GRACE_SECONDS = 5.0
#: An HTTP server's timeouts: a request, and a result streamed back (the call's own timeout ends it sooner).
HTTP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)
#: Most pages of a tool listing read (a paginator that never ends cannot hang a turn).
MAX_LIST_PAGES = 20


class McpServer:
    """One server's session in this process: opened at first use, opened again after a failure (see the module)."""

    def __init__(self, spec: McpServerSpec, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.spec = spec
        self.clock = clock
        #: Why the server is not available now ("" while it is, or before its first use).
        self.failure = ""
        self._client: Client | None = None
        self._holder: asyncio.Task[None] | None = None
        self._release = asyncio.Event()
        self._lock = asyncio.Lock()
        self._failures = 0
        self._retry_at = 0.0
        self._tools: list[types.Tool] | None = None
        #: The listing of the last session that listed (kept while the server is down).
        self._last: list[types.Tool] | None = None
        self._problems: dict[tuple[str, int], str] = {}
        self._told: set[str] = set()
        #: The tool names of the first listing: one that appears later is new (see :meth:`McpServerSpec.policy`).
        self._first_names: frozenset[str] | None = None

    async def tools(self) -> list[Listed]:
        """The server's tools that ``include``/``exclude`` let through, each with its policy, in name order. A
        server that is down, or still starting for another turn, offers what it listed last (a call then
        answers with the error; the tools the model sees, and the prompt cache, stay as they were);
        :class:`ServerDown` when it never listed any."""
        try:
            if self._lock.locked() and self._last is not None:
                raise ServerDown(self.spec.name, "starting")  # another turn is opening it: do not wait for that
            client = await self._connected()
            if self._tools is None:
                try:
                    self._tools = self._last = await self._list(client)
                except Exception as error:
                    await self._failed(error, client)
                    raise ServerDown(self.spec.name, self.failure) from error
                self._problems, self._told, self._failures = {}, set(), 0  # it works: a later failure waits 1 s
        except ServerDown:
            if self._last is None:
                raise
        listed = self._tools if self._tools is not None else self._last or []
        if self._first_names is None:
            self._first_names = frozenset(tool.name for tool in listed)
        first = self._first_names
        return [
            Listed(tool, self.spec.policy(tool, new=tool.name not in first), self._problem(tool))
            for tool in sorted(listed, key=lambda tool: tool.name)
            if self.spec.offers(tool.name)
        ]

    def told(self, tool: str) -> bool:
        """True the first time a tool's problem is asked to be logged in this session (one line, not one a turn)."""
        if tool in self._told:
            return False
        self._told.add(tool)
        return True

    def _problem(self, tool: types.Tool) -> str:
        """:func:`schema_problem` of the tool, checked once per schema (a turn lists the tools every time)."""
        key = (tool.name, id(tool.input_schema))
        if key not in self._problems:
            self._problems[key] = schema_problem(tool.input_schema)
        return self._problems[key]

    async def call(self, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """Call ``tool``; raises :class:`ToolFailed` (the server answered with an error: the session stays),
        :class:`ServerDown` (the session failed: it is opened again later) or TimeoutError (past
        ``timeout_seconds``; the call was cancelled, the server told)."""
        client = await self._connected()
        try:
            result = await self._in_time(client, client.call_tool(tool, arguments))
        except MCPError as error:
            if error.code != CONNECTION_CLOSED and self._holder is not None and not self._holder.done():
                raise ToolFailed(error.message) from error  # the server's own answer: bad arguments, its bug …
            await self._failed(error, client)
            raise ServerDown(self.spec.name, self.failure) from error
        except (TimeoutError, asyncio.CancelledError):
            raise
        except Exception as error:
            await self._failed(error, client)
            raise ServerDown(self.spec.name, self.failure) from error
        self._failures = 0
        return result

    async def _in_time(self, client: Client, call: Awaitable[T]) -> T:
        """``call`` within ``timeout_seconds``, else cancelled and TimeoutError. A cancelled call gets
        :data:`CANCEL_GRACE_SECONDS` to end (the SDK tells the server); one that does not — a cancellation the
        SDK's own scopes held back — costs the session, never the turn: it is dropped and opened again later."""
        task = asyncio.ensure_future(call)
        try:
            done, _ = await asyncio.wait({task}, timeout=self.spec.timeout_seconds)
        except asyncio.CancelledError:  # the turn was stopped: the call goes with it
            task.cancel()
            raise
        if task in done:
            return task.result()
        task.cancel()
        ended, _ = await asyncio.wait({task}, timeout=CANCEL_GRACE_SECONDS)
        if not ended:
            log.warning(
                "mcp %s: a cancelled call did not end within %g s; its session is opened again at the next use",
                self.spec.name,
                CANCEL_GRACE_SECONDS,
            )
            async with self._lock:
                if self._client is client:
                    await self._drop()
        raise TimeoutError(f"{self.spec.name} did not answer within {self.spec.timeout_seconds:g} s")

    async def aclose(self) -> None:
        """End the session (the SDK stops a stdio server's process)."""
        async with self._lock:
            await self._drop()

    async def _connected(self) -> Client:
        async with self._lock:
            if self._client is not None and self._holder is not None and not self._holder.done():
                return self._client
            if self.clock() < self._retry_at:
                raise ServerDown(self.spec.name, self.failure)
            await self._drop()
            try:
                self._client = await self._open()
            except Exception as error:
                self._note_failure(error)
                raise ServerDown(self.spec.name, self.failure) from error
            self.failure = ""
            return self._client

    async def _open(self) -> Client:
        """Start the task that holds the session; the client once its handshake is done (the task is cancelled
        when it is not done in time, or the wait is cancelled)."""
        opened: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._release = asyncio.Event()
        self._holder = asyncio.create_task(self._hold(opened, self._release), name=f"mcp-{self.spec.name}")
        try:
            return await asyncio.wait_for(asyncio.shield(opened), CONNECT_TIMEOUT)
        except BaseException:
            holder, self._holder = self._holder, None
            holder.cancel()
            await asyncio.wait({holder}, timeout=5)
            raise

    async def _hold(self, opened: asyncio.Future[Client], release: asyncio.Event) -> None:
        http = httpx2.AsyncClient(headers=dict(self.spec.headers), timeout=HTTP_TIMEOUT) if self.spec.url else None
        try:
            async with Client(self._target(http)) as client:
                opened.set_result(client)
                await release.wait()
        except BaseException as error:
            if not opened.done():
                if isinstance(error, Exception):
                    opened.set_exception(error)
                else:
                    opened.cancel()
            elif isinstance(error, Exception):
                log.info("mcp %s: the session ended: %s", self.spec.name, _reason(error))
            if not isinstance(error, Exception):
                raise
        finally:
            if http is not None:
                await http.aclose()

    def _target(self, http: httpx2.AsyncClient | None) -> Any:
        spec = self.spec
        if spec.url is not None:
            return streamable_http_client(spec.url, http_client=http)
        assert spec.command is not None
        return StdioServerParameters(command=spec.command, args=list(spec.args), env=dict(spec.env), cwd=spec.cwd)

    async def _failed(self, error: BaseException, client: Client) -> None:
        """The session of ``client`` failed: let it go and wait before the next (unless a newer one replaced it)."""
        async with self._lock:
            if self._client is not client:
                return
            self._note_failure(error)
            await self._drop()

    def _note_failure(self, error: BaseException) -> None:
        self._failures += 1
        wait = MCP_CONNECT.delay(self._failures)
        self._retry_at = self.clock() + wait
        self.failure = _reason(error)
        log.warning("mcp %s: %s; trying again in %.0f s at the next use", self.spec.name, self.failure, wait)

    async def _drop(self) -> None:
        """Let the session go (its listing too: a reconnect lists again)."""
        self._client, self._tools = None, None
        holder, self._holder = self._holder, None
        if holder is not None:
            self._release.set()
            await asyncio.wait({holder}, timeout=10)  # a caller cancelled meanwhile is cancelled, not swallowed
            if not holder.done():
                holder.cancel()

    @staticmethod
    async def _list(client: Client) -> list[types.Tool]:
        tools: list[types.Tool] = []
        cursor = None
        for _ in range(MAX_LIST_PAGES):
            page = await client.list_tools(cursor=cursor) if cursor else await client.list_tools()
            tools += page.tools
            cursor = page.next_cursor
            if not cursor:
                break
        return tools


def _reason(error: BaseException) -> str:
    """An error in one line, without a traceback: what the log and the model are told."""
    if isinstance(error, BaseExceptionGroup) and error.exceptions:
        return _reason(error.exceptions[0])
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}"[:300] if text else type(error).__name__


class McpTools:
    """Every configured server of this process, and the tools one turn gets from those its chat may use."""

    def __init__(self, specs: Sequence[McpServerSpec]) -> None:
        self.servers = {spec.name: McpServer(spec) for spec in specs}

    async def tools(
        self,
        servers: Sequence[str],
        media: MediaSource | None,
        on_call: CallSink | None = None,
        approver: Approver | None = None,
    ) -> list[Tool]:
        """The allowed tools of ``servers`` (each server's in name order, servers in the order given), whose
        results keep their files through ``media`` and whose calls are told to ``on_call``; a tool whose policy
        is ``ask`` is offered only with an ``approver``, asked before every call. A server that never answered
        offers nothing this turn (logged)."""
        offered: list[Tool] = []
        taken: set[str] = set()
        chosen = [(name, self.servers[name]) for name in servers if name in self.servers]
        listings = await asyncio.gather(*(server.tools() for _, server in chosen), return_exceptions=True)
        for (name, server), listed in zip(chosen, listings):  # listed at once: one slow server delays no other's
            if isinstance(listed, ServerDown):
                log.warning("mcp %s: its tools are left out of this turn: %s", name, listed)
                continue
            if isinstance(listed, BaseException):
                raise listed
            for tool, policy, problem in listed:
                exposed = exposed_name(name, tool.name)
                if _left_out(server, tool.name, policy, problem, exposed in taken, approver is not None):
                    continue
                taken.add(exposed)
                offered.append(
                    Tool(
                        exposed,
                        tool.description or tool.title or tool.name,
                        dict(tool.input_schema),
                        _handler(server, tool.name, media, on_call, approver if policy == "ask" else None),
                    )
                )
        return offered

    async def aclose(self) -> None:
        await asyncio.gather(*(server.aclose() for server in self.servers.values()), return_exceptions=True)


def _left_out(server: McpServer, tool: str, policy: Policy, problem: str, name_taken: bool, approvable: bool) -> bool:
    """Whether a listed tool stays out of the turn: denied, needing a yes no one can give this turn, with a schema
    no provider takes, or with the name another tool got first (these two logged once per session)."""
    if policy == "deny" or (policy == "ask" and not approvable):
        return True
    why = problem or (f"its name is {exposed_name(server.spec.name, tool)}, like another tool's" if name_taken else "")
    if why and server.told(tool):
        log.warning("mcp %s: tool %r left out: %s", server.spec.name, tool, why)
    return bool(why)


def _handler(
    server: McpServer, tool: str, media: MediaSource | None, on_call: CallSink | None, approver: Approver | None
) -> Callable[[dict[str, Any]], Awaitable[ToolOutput]]:
    """The call of one tool: asked first when it needs a yes, recorded however it ends."""

    async def call(arguments: dict[str, Any]) -> ToolOutput:
        started = time.perf_counter()
        outcome: CallOutcome = "error"
        said = ""
        try:
            if approver is not None:
                approval = await approver.approve(server.spec.name, tool, arguments)
                said = approval.said
                if not approval.approved:
                    outcome = "refused"
                    return _error(f"{server.spec.name}{SEPARATOR}{tool} was not run: {said}")
            result = await server.call(tool, arguments)
            outcome = "error" if result.is_error else "ok"
            output = await tool_output(result, media)
            return ToolOutput(f"[{said}]\n{output.text}", output.items, output.deliver) if said else output
        except ToolFailed as failed:
            return _error(f"{server.spec.name}{SEPARATOR}{tool} failed: {failed}")
        except ServerDown as down:
            outcome = "down"
            return _error(str(down))
        except TimeoutError:
            outcome = "timeout"
            return _error(
                f"{server.spec.name}{SEPARATOR}{tool} did not answer within "
                f"{server.spec.timeout_seconds:g} s; the call was cancelled"
            )
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        finally:
            if on_call is not None:
                record = CallRecord(
                    server.spec.name,
                    tool,
                    len(json_codec.dumps_text(arguments)),
                    outcome,
                    time.perf_counter() - started,
                )
                with contextlib.suppress(Exception):
                    await on_call(record)

    return call


def _error(text: str) -> ToolOutput:
    return ToolOutput(json_codec.dumps_text({"error": text}))
