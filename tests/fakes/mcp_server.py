"""A real MCP server for the tests, written with the official ``mcp`` SDK: over stdio (run this module) or over
streamable HTTP (:func:`serve_http`, uvicorn on loopback, a bearer token required like a hosted server's).

Its tools, named for what the tests need of a server people run:

- ``lookup(ticket)`` — read-only: a ticket's line (``TICKET-42: login times out after 30 s; owner Ada``);
- ``chart()`` — read-only: a PNG (64×48) as image content;
- ``dump(kilobytes)`` — read-only: that much text, numbered rows, ``END-OF-DUMP`` last;
- ``die()`` — the process exits in the middle of the call;
- ``hang()`` — never answers: writes the file ``$FAKE_MCP_STARTED`` as it begins and ``$FAKE_MCP_CANCELLED``
  when the client cancels the call;
- ``wipe()`` — destructive (its hints say so);
- ``fussy(x)`` — answers every call with a JSON-RPC error (``-32602``, "x=… is out of range");
- ``broken(x)`` — listed with an input schema that is no valid JSON Schema (``"minimum": "ten"``);
- ``extra()`` — listed only while the file ``$FAKE_MCP_EXTRA`` exists (a tool that appears after a restart);
- ``tool_00`` … — ``$FAKE_MCP_MANY`` more read-only tools, each echoing its argument (a server with many tools).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types as types
import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.utilities.types import Image as McpImage
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INVALID_PARAMS
from PIL import Image
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

TICKET = "TICKET-42: login times out after 30 s; owner Ada"
READ_ONLY = types.ToolAnnotations(read_only_hint=True)


class NotesServer(MCPServer):
    """The SDK's server, with one tool's schema spoiled and one tool that comes and goes (see the module)."""

    async def list_tools(self) -> list[types.Tool]:
        tools = []
        for tool in await super().list_tools():
            if tool.name == "broken":
                tool = tool.model_copy(
                    update={
                        "input_schema": {"type": "object", "properties": {"x": {"type": "integer", "minimum": "ten"}}}
                    }
                )
            if tool.name == "extra" and not Path(os.environ.get("FAKE_MCP_EXTRA", "/nonexistent")).exists():
                continue
            tools.append(tool)
        return tools


def chart_png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), (38, 139, 210)).save(out, "PNG")
    return out.getvalue()


def build() -> NotesServer:
    app = NotesServer("notes")

    @app.tool(annotations=READ_ONLY)
    def lookup(ticket: str) -> str:
        """Look a ticket up by its id."""
        return TICKET if ticket.upper() in ("42", "TICKET-42") else f"no ticket {ticket}"

    @app.tool(annotations=READ_ONLY)
    def chart() -> McpImage:
        """Draw the latency chart."""
        return McpImage(data=chart_png(), format="png")

    @app.tool(annotations=READ_ONLY)
    def dump(kilobytes: int) -> str:
        """Dump the table as text."""
        rows, size, number = [], 0, 0
        while size < kilobytes * 1024:
            row = f"row {number}: value {number * 7 % 1000:04d} status ok"
            rows.append(row)
            size += len(row) + 1
            number += 1
        return "\n".join([*rows, "END-OF-DUMP"])

    @app.tool(annotations=READ_ONLY)
    def die() -> str:
        """Exit in the middle of the call."""
        os._exit(3)

    @app.tool(annotations=READ_ONLY)
    async def hang() -> str:
        """Never answer."""
        started = os.environ.get("FAKE_MCP_STARTED")
        if started:
            Path(started).write_text("started")
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            marker = os.environ.get("FAKE_MCP_CANCELLED")
            if marker:
                Path(marker).write_text("cancelled")
            raise
        return "late"

    @app.tool(annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=True))
    def wipe() -> str:
        """Delete every ticket."""
        return "wiped"

    @app.tool(annotations=READ_ONLY)
    def broken(x: int) -> str:
        """A tool whose schema the server spoils."""
        return str(x)

    @app.tool(annotations=READ_ONLY)
    def fussy(x: int) -> str:
        """Refuse every call with a JSON-RPC error of the protocol's own (as many servers answer bad arguments)."""
        raise MCPError(INVALID_PARAMS, f"x={x} is out of range")

    @app.tool(annotations=READ_ONLY)
    def extra() -> str:
        """A tool that appears later."""
        return "extra"

    for number in range(int(os.environ.get("FAKE_MCP_MANY", "0"))):
        app.add_tool(
            _echo,
            name=f"tool_{number:02d}",
            annotations=READ_ONLY,
            description=f"Look up record {number} of the inventory by its key and return its fields.",
        )
    return app


def _echo(key: str, limit: int = 10) -> str:
    return f"{key}: {limit}"


class BearerOnly:
    """Refuses a request without ``Authorization: Bearer <token>`` (401), as a hosted MCP server does."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token
        self.seen: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = Request(scope).headers.get("authorization", "")
            self.seen.append(given)
            if given != f"Bearer {self.token}":
                await JSONResponse({"error": "unauthorized"}, status_code=401)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def serve_http(token: str) -> AsyncIterator[tuple[str, BearerOnly]]:
    """The server over streamable HTTP on loopback: ``(url, the guard that saw every Authorization)``."""
    guard = BearerOnly(build().streamable_http_app(), token)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(guard, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/mcp", guard
    finally:
        server.should_exit = True
        await task


def stdio_command() -> tuple[str, list[str]]:
    """How a test's config starts the server over stdio: this Python, this module."""
    return sys.executable, ["-m", "tests.fakes.mcp_server"]


def run(argv: Any = None) -> None:
    build().run("stdio")


if __name__ == "__main__":
    run()
