"""A forward HTTP proxy on loopback that records what it was asked to reach (for HTTPS_PROXY / HTTP_PROXY tests).

It speaks the two forms a client uses (RFC 9110 §9.3.6, RFC 9112 §3.2.2):

- ``CONNECT host:port`` — for ``https://`` targets: the proxy opens a TCP connection to the
  target, answers ``200 Connection established`` and relays bytes both ways (the TLS
  session is end to end: the proxy sees none of it);
- an absolute URI, ``GET http://host:port/path HTTP/1.1`` — for ``http://`` targets: the
  proxy sends the request on in origin form (``GET /path``, hop-by-hop and ``Proxy-*``
  headers removed, ``Connection: close``) and relays the answer back.

Every request's target is appended, as the client wrote it, to :attr:`ConnectProxy.targets`
(``"localhost:8443"`` for a tunnel, ``"http://127.0.0.1:8080/v1/models"`` for a forwarded
request). ``require_auth=("user", "pass")`` makes the proxy answer ``407`` with
``Proxy-Authenticate: Basic`` unless the request carries those credentials in
``Proxy-Authorization``; refused targets go to :attr:`ConnectProxy.refused`. A target that
cannot be reached is a ``502``, one that does not answer within ``connect_timeout`` a ``504``.

Why not a library: ``pproxy`` (the usual embeddable asyncio proxy) reports targets only
as log text, and its Basic-auth state is a class-level table remembering a client IP as
authenticated for 30 days, across instances — a test of ``407`` would pass or fail by
what ran before it. This relay is small and keeps per-instance state.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from urllib.parse import urlsplit

_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "proxy-authenticate",
        "te",
        "trailer",
        "upgrade",
    }
)
_MAX_HEAD = 64 * 1024


def _status(code: int, reason: str, extra: str = "") -> bytes:
    return f"HTTP/1.1 {code} {reason}\r\n{extra}Content-Length: 0\r\nConnection: close\r\n\r\n".encode("latin-1")


def _parse_head(head: bytes) -> tuple[str, str, str, list[tuple[str, str]]]:
    """``(method, target, version, headers)`` of a request head; ValueError when it is not HTTP/1.x."""
    lines = head.decode("latin-1").split("\r\n")
    method, target, version = lines[0].split(" ")
    if not version.startswith("HTTP/1."):
        raise ValueError(version)
    headers = []
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers.append((name.strip(), value.strip()))
    return method.upper(), target, version, headers


def _split_authority(authority: str, default_port: int) -> tuple[str, int]:
    """``host:port`` (IPv6 literals in brackets) as a host and a port number."""
    if authority.startswith("["):
        host, _, rest = authority[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, colon, port = authority.rpartition(":")
        if not colon:
            host, port = authority, ""
    return host, int(port) if port else default_port


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Copy until end of stream, then pass the half-close on."""
    try:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
    except (ConnectionError, OSError):
        pass


class ConnectProxy:
    """See the module docstring. ``async with ConnectProxy() as proxy: … proxy.url … proxy.targets``."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        require_auth: tuple[str, str] | None = None,
        connect_timeout: float = 5.0,
    ) -> None:
        self.host = host
        self.port = port
        self.require_auth = require_auth
        self.connect_timeout = connect_timeout
        self.targets: list[str] = []
        self.refused: list[str] = []
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def auth_url(self) -> str:
        """``url`` with the required credentials in it (as ``HTTPS_PROXY`` carries them)."""
        if self.require_auth is None:
            return self.url
        user, password = self.require_auth
        return f"http://{user}:{password}@{self.host}:{self.port}"

    async def start(self) -> ConnectProxy:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, limit=_MAX_HEAD)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> ConnectProxy:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # -- one client connection --------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self._handle(reader, writer)
        except (ConnectionError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            pass  # stop() ends relays still open
        finally:
            self._connections.discard(task)
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        try:
            method, target, version, headers = _parse_head(head[:-4])
        except ValueError:
            writer.write(_status(400, "Bad Request"))
            return
        if not self._authorized(headers):
            self.refused.append(target)
            writer.write(
                _status(407, "Proxy Authentication Required", 'Proxy-Authenticate: Basic realm="fake-proxy"\r\n')
            )
            await writer.drain()
            return
        self.targets.append(target)
        if method == "CONNECT":
            await self._tunnel(target, reader, writer)
        elif target.lower().startswith("http://"):
            await self._forward(method, target, version, headers, reader, writer)
        else:
            writer.write(_status(400, "Bad Request"))

    def _authorized(self, headers: list[tuple[str, str]]) -> bool:
        if self.require_auth is None:
            return True
        expected = "Basic " + base64.b64encode(":".join(self.require_auth).encode()).decode()
        return any(name.lower() == "proxy-authorization" and value == expected for name, value in headers)

    async def _open(
        self, host: str, port: int, writer: asyncio.StreamWriter
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """A connection to the target, or None after answering the client 502/504."""
        try:
            return await asyncio.wait_for(asyncio.open_connection(host, port), self.connect_timeout)
        except TimeoutError:
            writer.write(_status(504, "Gateway Timeout"))
        except OSError:
            writer.write(_status(502, "Bad Gateway"))
        await writer.drain()
        return None

    async def _tunnel(self, authority: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        host, port = _split_authority(authority, 443)
        upstream = await self._open(host, port, writer)
        if upstream is None:
            return
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        await self._relay(reader, writer, *upstream)

    async def _forward(
        self,
        method: str,
        url: str,
        version: str,
        headers: list[tuple[str, str]],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        parts = urlsplit(url)
        host, port = _split_authority(parts.netloc.rpartition("@")[2], 80)
        upstream = await self._open(host, port, writer)
        if upstream is None:
            return
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        kept = [(name, value) for name, value in headers if name.lower() not in _HOP_BY_HOP]
        lines = [f"{method} {path} {version}", *(f"{name}: {value}" for name, value in kept), "Connection: close"]
        upstream[1].write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        await self._relay(reader, writer, *upstream)

    @staticmethod
    async def _relay(
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        upstream_reader: asyncio.StreamReader,
        upstream_writer: asyncio.StreamWriter,
    ) -> None:
        try:
            await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))
        finally:
            upstream_writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await upstream_writer.wait_closed()
