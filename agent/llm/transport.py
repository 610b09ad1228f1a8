"""An HTTP/1.1 transport for httpx written on asyncio protocols: httpx's API above, our own wire code below.

foldgate talks to providers through httpx, and on the gateway's hot path the HTTP stack
under it is most of the CPU a provider call costs: httpcore's per-request work, or
aiohttp's, is several times the price of the round trip itself. This transport keeps
httpx's requests, responses, timeouts and exception types — so the provider clients and
their error handling are unchanged — and does the rest with one ``asyncio.Protocol`` per
keep-alive connection: the request is serialised in one write, the response parsed in
``data_received`` as it arrives, and a single future per request wakes the caller. The
provider clients go one step further: :meth:`Http1Transport.post` sends a body to a
:class:`PostTarget` whose request head was serialised once, and answers with an
:class:`Exchange`, so a call builds neither an ``httpx.Request`` nor an ``httpx.Response``.

It is deliberately narrow: HTTP/1.1 over TCP or TLS, no proxies, no HTTP/2, no upgrades,
and responses are read whole — it serves request/response JSON endpoints, not streaming.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import zlib
from collections import deque
from collections.abc import Mapping
from typing import NamedTuple

import httpx

__all__ = ["Exchange", "Http1Transport", "PostTarget"]

_DEFAULT_PORTS = {"http": 80, "https": 443}
#: ``request.extensions["timeout"]``: connect/read/write/pool seconds, None for no limit.
_Timeouts = Mapping[str, float | None]
_NO_TIMEOUTS: _Timeouts = {}

#: Bounds on what a server may make us buffer before we call its answer malformed.
_MAX_HEAD = 64 * 1024
_MAX_LINE = 8 * 1024

#: The blank line ending a header section; bare LF line ends are tolerated, as RFC 9112 allows.
_HEAD_END = re.compile(rb"\r?\n\r?\n")
#: A header line: a token name, a colon, the value without surrounding blanks (no obs-fold).
_HEADER_LINE = re.compile(
    rb"^([!#$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*((?:[^\r\n]*[^\r\n \t])?)[ \t]*\r?$", re.MULTILINE
)
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")
_DECODABLE = frozenset((b"gzip", b"x-gzip", b"deflate"))

# Parser states of a connection.
_IDLE, _HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_END, _TRAILERS, _UNTIL_CLOSE = range(8)

#: (http_version, status, reason, headers, body, keep_alive, content_encodings)
_Answer = tuple[bytes, int, bytes, list[tuple[bytes, bytes]], bytes, bool, list[bytes]]


class Exchange(NamedTuple):
    """One answered request: what a JSON API client reads, without an ``httpx.Response`` around it."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes  # whole, with any gzip/deflate content-encoding undone
    http_version: bytes
    reason: bytes


class _Malformed(Exception):
    """The server sent something that is not HTTP/1.1; becomes ``httpx.RemoteProtocolError``."""


class _StaleConnection(Exception):
    """A reused connection died before any byte of the answer: the keep-alive race, safe to retry once."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection: writes a request, parses its response as bytes arrive, resolves one future.

    All the per-request work happens in the protocol callbacks, so a request costs one write,
    one or two ``data_received`` calls and one future — no streams, no per-chunk tasks or timeouts.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.transport: asyncio.Transport | None = None
        #: Set once the peer closed, the connection was lost, or we gave up on it: never reuse it then.
        self.closed = False
        #: True once it has served a request; only reused connections may meet the stale keep-alive race.
        self.reused = False
        self.idle_since = 0.0
        self._request: httpx.Request | None = None
        self._waiter: asyncio.Future[_Answer] | None = None
        self._buffer = bytearray()
        self._scan = 0
        self._state = _IDLE
        self._got_bytes = False
        self._no_body = False
        self._version = b""
        self._status = 0
        self._reason = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._encodings: list[bytes] = []
        self._keep_alive = False
        self._remaining = 0
        self._body = bytearray()
        self._trailer_bytes = 0
        self._read_timeout: float | None = None
        self._write_timeout: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._last = 0.0
        self._writing_paused = False

    # -- asyncio callbacks ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # asyncio and uvloop both set TCP_NODELAY on TCP sockets they connect (a test checks it).
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:
            # Bytes nobody asked for: whatever the server meant, this connection can no longer be trusted.
            self.close()
            return
        self._got_bytes = True
        if self._timer is not None:
            self._last = self._loop.time()
        self._buffer += data
        try:
            self._parse()
        except _Malformed as error:
            self._fail(httpx.RemoteProtocolError(str(error), request=self._request))

    def eof_received(self) -> bool:
        self.closed = True
        if self._waiter is not None:
            if self._state == _UNTIL_CLOSE:
                self._finish(bytes(self._body))
            else:
                self._fail(self._lost(None))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._waiter is not None:
            if self._state == _UNTIL_CLOSE and exc is None:
                self._finish(bytes(self._body))
            else:
                self._fail(self._lost(exc))
        elif self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._rearm()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._rearm()

    # -- requests --------------------------------------------------------------------------

    def usable(self, now: float, expiry: float | None) -> bool:
        """Whether an idle connection may carry another request."""
        transport = self.transport
        return (
            not self.closed
            and transport is not None
            and not transport.is_closing()
            and (expiry is None or now - self.idle_since < expiry)
        )

    def send(
        self, request: httpx.Request, data: bytes, no_body: bool, timeouts: _Timeouts
    ) -> asyncio.Future[_Answer]:
        """Write one serialised request; the future resolves with the parsed answer or fails with an httpx error."""
        waiter: asyncio.Future[_Answer] = self._loop.create_future()
        self._request = request
        self._waiter = waiter
        self._state = _HEAD
        self._scan = 0
        self._got_bytes = False
        self._no_body = no_body
        self._read_timeout = timeouts.get("read")
        self._write_timeout = timeouts.get("write")
        try:
            self.transport.write(data)  # type: ignore[union-attr]
        except (OSError, RuntimeError) as error:  # a transport that died between the pool's check and now
            self._waiter = None
            self._state = _IDLE
            self.close()
            if self.reused:
                raise _StaleConnection() from error
            raise httpx.WriteError(f"{type(error).__name__}: {error}", request=request) from error
        self._arm()
        return waiter

    def close(self) -> None:
        """Close for good: gracefully after a complete answer, abruptly when one is unfinished."""
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        unfinished = self._waiter is not None
        self._waiter = None
        self._state = _IDLE
        transport = self.transport
        if transport is not None and not transport.is_closing():
            if unfinished:
                transport.abort()
            else:
                transport.close()

    def abandon(self, error: Exception) -> None:
        """Fail the request in flight (if any) with ``error`` and drop the connection; used by ``aclose``."""
        if self._waiter is not None:
            self._fail(error)
        else:
            self.close()

    # -- timeouts --------------------------------------------------------------------------

    def _arm(self) -> None:
        """Start the request's timeout clock.

        The timer is created lazily and outlives the request: back-to-back requests on a
        connection share one pending timer, which on firing compares ``_last`` (the start or
        the latest bytes) with the period and either fails the request or sleeps again. A
        request therefore costs a clock read, not a timer, unless the pending one fires too late.
        """
        period = self._write_timeout if self._writing_paused else self._read_timeout
        if period is None or self._waiter is None:
            return
        now = self._loop.time()
        self._last = now
        timer = self._timer
        if timer is not None:
            if timer.when() <= now + period:
                return  # it fires in time and checks again then
            timer.cancel()
        self._timer = self._loop.call_later(period, self._on_timer)

    def _rearm(self) -> None:
        """Switch between the write and the read period (rare: only bodies larger than the write buffer)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._arm()

    def _on_timer(self) -> None:
        self._timer = None
        if self._waiter is None:
            return  # nothing in flight: the timer lapses until the next request
        paused = self._writing_paused
        period = self._write_timeout if paused else self._read_timeout
        if period is None:
            return
        remaining = self._last + period - self._loop.time()
        if remaining > 0.001:  # bytes arrived, or a new request started, since the timer was set
            self._timer = self._loop.call_later(remaining, self._on_timer)
            return
        if paused:
            self._fail(httpx.WriteTimeout(f"the request could not be sent within {period:g}s", request=self._request))
        else:
            self._fail(httpx.ReadTimeout(f"no response bytes for {period:g}s", request=self._request))

    # -- outcomes ----------------------------------------------------------------------------

    def _lost(self, exc: Exception | None) -> Exception:
        """What the caller sees when the connection ends before the answer does."""
        if self.reused and not self._got_bytes:
            return _StaleConnection()
        if exc is not None:
            return httpx.ReadError(f"connection lost: {type(exc).__name__}: {exc}", request=self._request)
        if self._got_bytes:
            message = "the server closed the connection before the response was complete"
        else:
            message = "the server closed the connection without sending a response"
        return httpx.RemoteProtocolError(message, request=self._request)

    def _fail(self, error: Exception) -> None:
        waiter = self._waiter
        self.close()
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)

    def _finish(self, body: bytes) -> None:
        waiter = self._waiter
        self._waiter = None
        self._state = _IDLE
        # Leftover bytes after a complete answer mean the server and we disagree on framing.
        keep_alive = self._keep_alive and not self._buffer and not self.closed
        self._body = bytearray()
        if waiter is not None and not waiter.done():
            waiter.set_result(
                (self._version, self._status, self._reason, self._headers, body, keep_alive, self._encodings)
            )

    # -- parsing -----------------------------------------------------------------------------

    def _parse(self) -> None:
        """Advance the response state machine over whatever is buffered."""
        buffer = self._buffer
        while True:
            state = self._state
            if state == _HEAD:
                match = _HEAD_END.search(buffer, self._scan)
                if match is None:
                    if len(buffer) > _MAX_HEAD:
                        raise _Malformed("the response header section is too large")
                    self._scan = max(0, len(buffer) - 3)
                    return
                head = bytes(buffer[: match.start()])
                del buffer[: match.end()]
                self._scan = 0
                self._start(head)
            elif state == _LENGTH:
                needed = self._remaining
                if len(buffer) < needed:
                    return
                if len(buffer) == needed:
                    body = bytes(buffer)
                    buffer.clear()
                else:
                    body = bytes(buffer[:needed])
                    del buffer[:needed]
                self._finish(body)
                return
            elif state == _CHUNK_SIZE:
                end = buffer.find(b"\n")
                if end < 0:
                    if len(buffer) > _MAX_LINE:
                        raise _Malformed("a chunk size line is too long")
                    return
                size = bytes(buffer[:end]).split(b";", 1)[0].strip(b" \t\r")
                del buffer[: end + 1]
                if not _HEX.fullmatch(size):
                    raise _Malformed(f"malformed chunk size {size[:40]!r}")
                self._remaining = int(size, 16)
                self._state = _CHUNK_DATA if self._remaining else _TRAILERS
            elif state == _CHUNK_DATA:
                if not buffer:
                    return
                take = min(len(buffer), self._remaining)
                if take == len(buffer):
                    self._body += buffer
                    buffer.clear()
                else:
                    self._body += buffer[:take]
                    del buffer[:take]
                self._remaining -= take
                if self._remaining:
                    return
                self._state = _CHUNK_END
            elif state == _CHUNK_END:
                if buffer[:2] == b"\r\n":
                    del buffer[:2]
                elif buffer[:1] == b"\n":
                    del buffer[:1]
                elif buffer in (b"", b"\r"):
                    return
                else:
                    raise _Malformed("a chunk is not followed by CRLF")
                self._state = _CHUNK_SIZE
            elif state == _TRAILERS:
                end = buffer.find(b"\n")
                if end < 0:
                    if len(buffer) > _MAX_LINE:
                        raise _Malformed("a trailer line is too long")
                    return
                blank = end == 0 or (end == 1 and buffer[0] == 13)
                del buffer[: end + 1]
                if blank:
                    self._finish(bytes(self._body))
                    return
                self._trailer_bytes += end  # trailers are read and dropped
                if self._trailer_bytes > _MAX_HEAD:
                    raise _Malformed("the trailer section is too large")
            elif state == _UNTIL_CLOSE:
                if buffer:
                    self._body += buffer
                    buffer.clear()
                return
            else:
                return

    def _start(self, head: bytes) -> None:
        """Parse a status line and header section, then choose how the body is framed."""
        end = head.find(b"\n")
        status_line, block = (head, b"") if end < 0 else (head[:end], head[end + 1 :])
        if status_line[-1:] == b"\r":
            status_line = status_line[:-1]
        parts = status_line.split(b" ", 2)
        if (
            len(parts) < 2
            or parts[0] not in (b"HTTP/1.1", b"HTTP/1.0")
            or len(parts[1]) != 3
            or not parts[1].isdigit()
        ):
            raise _Malformed(f"malformed status line {status_line[:100]!r}")
        status = int(parts[1])
        # One C-level pass over the section; a line it cannot read shows up as a missing match.
        headers: list[tuple[bytes, bytes]] = _HEADER_LINE.findall(block) if block else []
        if block and len(headers) != block.count(b"\n") + 1:
            bad = next((line for line in block.split(b"\n") if not _HEADER_LINE.fullmatch(line)), block)
            raise _Malformed(f"malformed header line {bad[:100]!r}")
        lengths: list[bytes] = []
        transfer: list[bytes] = []
        connection: list[bytes] = []
        encodings: list[bytes] = []
        for name, value in headers:
            lowered = name.lower()
            if lowered == b"content-length":
                lengths.append(value)
            elif lowered == b"transfer-encoding":
                transfer.append(value)
            elif lowered == b"connection":
                connection.append(value)
            elif lowered == b"content-encoding":
                encodings.append(value)
        if status < 200:
            if status == 101:
                raise _Malformed("unexpected 101 Switching Protocols: this transport never asks for an upgrade")
            return  # an interim answer (100 Continue, 103 Early Hints): the real one follows
        version = parts[0]
        self._version = version
        self._status = status
        self._reason = parts[2] if len(parts) > 2 else b""
        self._headers = headers
        self._encodings = encodings
        if connection:
            tokens = {token.strip().lower() for value in connection for token in value.split(b",")}
            self._keep_alive = b"close" not in tokens if version == b"HTTP/1.1" else b"keep-alive" in tokens
        else:
            self._keep_alive = version == b"HTTP/1.1"
        if self._no_body or status == 204 or status == 304:
            self._finish(b"")
        elif transfer:
            codings = [c for c in (t.strip().lower() for v in transfer for t in v.split(b",")) if c != b"identity"]
            if codings != [b"chunked"]:
                raise _Malformed(f"unsupported transfer coding {b', '.join(transfer)[:100]!r}")
            if lengths:  # both framings: trust chunked, and do not let this connection carry anything else
                self._keep_alive = False
            self._trailer_bytes = 0
            self._body = bytearray()
            self._state = _CHUNK_SIZE
        elif lengths:
            length = lengths[0]
            if len(lengths) > 1 or b"," in length:  # repeats are allowed only when they agree
                values = {v.strip() for value in lengths for v in value.split(b",")}
                if len(values) != 1:
                    raise _Malformed(f"conflicting Content-Length values {values!r}")
                (length,) = values
            if not length.isdigit():
                raise _Malformed(f"malformed Content-Length {length[:40]!r}")
            self._remaining = int(length)
            if self._remaining:
                self._state = _LENGTH
            else:
                self._finish(b"")
        else:
            self._keep_alive = False  # the body ends when the connection does
            self._body = bytearray()
            self._state = _UNTIL_CLOSE


class _Pool:
    """Connections to one (scheme, host, port): idle ones reused last-in first-out, at most ``limit`` open.

    A slot is counted from the moment a connection starts opening until it is closed; callers
    beyond the limit queue in FIFO order and are handed either an idle connection or a free slot.
    """

    def __init__(self, owner: Http1Transport, key: tuple[str, str, int], limit: int) -> None:
        self._owner = owner
        self._key = key
        self._limit = limit
        self.idle: list[_Connection] = []
        self.connections: set[_Connection] = set()
        self.waiters: deque[asyncio.Future[_Connection | None]] = deque()
        self._slots = 0

    def take_idle(self) -> _Connection | None:
        """The most recently used idle connection that is still good, without awaiting anything."""
        idle = self.idle
        expiry = self._owner.keepalive_expiry
        while idle:
            connection = idle.pop()
            if connection.usable(connection._loop.time(), expiry):
                return connection
            self._discard(connection)
        return None

    async def acquire(self, request: httpx.Request, timeouts: _Timeouts) -> _Connection:
        """An idle connection, else a new one within the limit, else the next one released (FIFO)."""
        connection = self.take_idle()
        if connection is not None:
            return connection
        if self._slots < self._limit:
            self._slots += 1
            return await self._open_in_slot(request, timeouts)
        return await self._wait(request, timeouts)

    async def connect(self, request: httpx.Request, timeouts: _Timeouts) -> _Connection:
        """A new connection for a slot the caller already holds."""
        connection = await self._owner._connect(self._key, request, timeouts.get("connect"))
        self.connections.add(connection)
        return connection

    async def replace(
        self, stale: _Connection, request: httpx.Request, timeouts: _Timeouts
    ) -> _Connection:
        """Close ``stale`` and open a new connection in its slot (if that fails, releasing ``stale`` frees it)."""
        stale.close()
        self.connections.discard(stale)
        return await self.connect(request, timeouts)

    def release(self, connection: _Connection, keep_alive: bool) -> None:
        """Back to the pool after a complete keep-alive answer; closed (and its slot freed) otherwise."""
        if keep_alive and not connection.closed and not self._owner._closed:
            connection.reused = True
            waiter = self._next_waiter()
            if waiter is not None:
                waiter.set_result(connection)
                return
            connection.idle_since = connection._loop.time()
            self.idle.append(connection)
            return
        self._discard(connection)

    def close(self, error: Exception) -> None:
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_exception(error)
        self.waiters.clear()
        for connection in list(self.connections):
            connection.abandon(httpx.ReadError("the transport was closed while the request was in flight",
                                               request=connection._request))
        self.connections.clear()
        self.idle.clear()

    # -- internals ----------------------------------------------------------------------------

    async def _open_in_slot(self, request: httpx.Request, timeouts: _Timeouts) -> _Connection:
        try:
            return await self.connect(request, timeouts)
        except BaseException:
            self._free_slot()
            raise

    async def _wait(self, request: httpx.Request, timeouts: _Timeouts) -> _Connection:
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[_Connection | None] = loop.create_future()
        self.waiters.append(waiter)
        limit = timeouts.get("pool")
        timer = loop.call_later(limit, self._expire, waiter, request, limit) if limit is not None else None
        try:
            granted = await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                # Handed a connection or slot, but cancelled before resuming: pass it on to the next caller.
                handed = waiter.result()
                if handed is None:
                    self._free_slot()
                else:
                    self.release(handed, True)
            else:
                try:
                    self.waiters.remove(waiter)
                except ValueError:
                    pass
            raise
        finally:
            if timer is not None:
                timer.cancel()
        if granted is None:
            return await self._open_in_slot(request, timeouts)
        return granted

    @staticmethod
    def _expire(waiter: asyncio.Future[_Connection | None], request: httpx.Request, limit: float) -> None:
        if not waiter.done():
            waiter.set_exception(httpx.PoolTimeout(f"no free connection within {limit:g}s", request=request))

    def _next_waiter(self) -> asyncio.Future[_Connection | None] | None:
        waiters = self.waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                return waiter
        return None

    def _discard(self, connection: _Connection) -> None:
        connection.close()
        if connection in self.connections:
            self.connections.discard(connection)
        self._free_slot()

    def _free_slot(self) -> None:
        waiter = self._next_waiter()
        if waiter is not None:
            waiter.set_result(None)  # the slot passes straight to the longest waiting caller
        else:
            self._slots -= 1


class Http1Transport(httpx.AsyncBaseTransport):
    """``ChatClient(..., transport=Http1Transport())`` or ``httpx.AsyncClient(transport=...)``.

    Keep-alive pools per (scheme, host, port), at most ``limit_per_host`` connections each; an
    idle connection older than ``keepalive_expiry`` seconds is closed instead of reused, since
    servers drop idle ones on their own schedule. ``ssl_context`` overrides the default
    verification context for https.

    Failures are httpx's transport exceptions, so callers keep one error mapping. The only
    retry is the keep-alive race: a reused connection that dies before any byte of the answer
    (the server had already closed it) gets the request once more on a new connection. A new
    connection, or one that had started answering, is never retried — the request may have run.
    """

    def __init__(
        self,
        *,
        limit_per_host: int = 100,
        ssl_context: ssl.SSLContext | None = None,
        keepalive_expiry: float | None = 15.0,
    ) -> None:
        if limit_per_host < 1:
            raise ValueError(f"limit_per_host must be at least 1, got {limit_per_host}")
        self.limit_per_host = limit_per_host
        self.keepalive_expiry = keepalive_expiry
        self._ssl_context = ssl_context
        self._pools: dict[tuple[str, str, int], _Pool] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        exchange = await self.exchange(request)
        return httpx.Response(exchange.status, headers=exchange.headers, content=exchange.body, request=request,
                              extensions={"http_version": exchange.http_version, "reason_phrase": exchange.reason})

    async def exchange(self, request: httpx.Request) -> Exchange:
        """Send ``request``; the answer as plain values, its body read whole and decoded.

        :meth:`handle_async_request` wraps this in an ``httpx.Response``.
        """
        key = _pool_key(request)
        try:
            body = request.content
        except httpx.RequestNotRead:
            body = await request.aread()
        data = _serialise(request, body)
        timeouts = request.extensions.get("timeout") or _NO_TIMEOUTS
        return await self._round_trip(key, data, request.method == "HEAD", timeouts, request)

    async def post(self, target: PostTarget, body: bytes, timeouts: _Timeouts = _NO_TIMEOUTS) -> Exchange:
        """POST ``body`` to a fixed target whose request head was serialised once.

        What a JSON API client sends on every call: no ``httpx.Request`` is built per call.
        """
        data = b"%bContent-Length: %d\r\n\r\n%b" % (target.head, len(body), body)
        return await self._round_trip(target.key, data, False, timeouts, target.request)

    async def _round_trip(
        self, key: tuple[str, str, int], data: bytes, no_body: bool, timeouts: _Timeouts, request: httpx.Request
    ) -> Exchange:
        """Write ``data`` on a pooled connection to ``key``; ``request`` names the call in httpx errors."""
        if self._closed:
            raise RuntimeError("this Http1Transport is closed; make a new one to send more requests")
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            # Connections belong to the loop that opened them; a new loop (another asyncio.run) starts afresh.
            self._pools = {}
            self._loop = loop
        pool = self._pools.get(key)
        if pool is None:
            pool = self._pools[key] = _Pool(self, key, self.limit_per_host)
        connection = pool.take_idle() or await pool.acquire(request, timeouts)
        keep_alive = False
        try:
            try:
                answer = await connection.send(request, data, no_body, timeouts)
            except _StaleConnection:
                # The server closed the idle connection as we reused it: one more try on a new one.
                connection = await pool.replace(connection, request, timeouts)
                answer = await connection.send(request, data, no_body, timeouts)
            keep_alive = answer[5]
        finally:
            pool.release(connection, keep_alive)
        return _decoded(request, answer)

    async def aclose(self) -> None:
        """Close every connection; requests in flight fail with ``httpx.ReadError``, later ones with RuntimeError."""
        self._closed = True
        pools, self._pools = self._pools, {}
        for pool in pools.values():
            pool.close(RuntimeError("the Http1Transport was closed while waiting for a connection"))
        if pools:
            await asyncio.sleep(0)  # let the closed transports report connection_lost

    # -- internals ----------------------------------------------------------------------------

    def _tls(self) -> ssl.SSLContext:
        if self._ssl_context is None:
            context = ssl.create_default_context()
            context.set_alpn_protocols(["http/1.1"])
            self._ssl_context = context
        return self._ssl_context

    async def _connect(
        self, key: tuple[str, str, int], request: httpx.Request, timeout: float | None
    ) -> _Connection:
        scheme, host, port = key
        loop = asyncio.get_running_loop()
        connection = _Connection(loop)
        tls = self._tls() if scheme == "https" else None
        try:
            async with asyncio.timeout(timeout):
                await loop.create_connection(
                    lambda: connection, host, port, ssl=tls, server_hostname=host if tls is not None else None
                )
        except TimeoutError as error:
            raise httpx.ConnectTimeout(f"no connection to {host}:{port} within {timeout:g}s", request=request) from error
        except OSError as error:  # refused, unreachable, DNS (gaierror) and TLS (SSLError) failures
            raise httpx.ConnectError(f"cannot connect to {host}:{port}: {error}", request=request) from error
        if self._closed:
            connection.close()
            raise RuntimeError("the Http1Transport was closed while connecting")
        return connection


def _pool_key(request: httpx.Request) -> tuple[str, str, int]:
    """(scheme, host, port): which pool serves the request."""
    url = request.url
    default_port = _DEFAULT_PORTS.get(url.scheme)
    if default_port is None:
        raise httpx.UnsupportedProtocol(f"Http1Transport speaks http and https, not {url.scheme!r}", request=request)
    return url.scheme, url.raw_host.decode("ascii"), url.port or default_port


def _head(request: httpx.Request) -> tuple[bytes, bool]:
    """The request line and header lines, without Content-Length and the blank line that ends the head,
    and whether the request carried a length or transfer-encoding header (its body is then sent with a length)."""
    url = request.url
    parts = [request.method.encode("ascii"), b" ", url.raw_path, b" HTTP/1.1\r\nHost: ", url.netloc, b"\r\n"]
    lines = 2  # the request line and Host
    had_length = False
    accept_encoding = False
    for name, value in request.headers.raw:
        lowered = name.lower()
        if lowered == b"host":
            parts[4] = value
            continue
        if lowered == b"content-length" or lowered == b"transfer-encoding":
            had_length = True  # the body is sent whole, with its real length
            continue
        if lowered == b"accept-encoding":
            accept_encoding = True
        parts += (name, b": ", value, b"\r\n")
        lines += 1
    if not accept_encoding:
        parts.append(b"Accept-Encoding: gzip, deflate\r\n")
        lines += 1
    head = b"".join(parts)
    # One CR and one LF per line, or a name, value or target carried its own and would smuggle in a header.
    if head.count(b"\n") != lines or head.count(b"\r") != lines:
        raise httpx.LocalProtocolError("a header name or value contains CR or LF", request=request)
    return head, had_length


def _serialise(request: httpx.Request, body: bytes) -> bytes:
    """The request head and body as one buffer, so a request is one write (and usually one segment)."""
    head, had_length = _head(request)
    if body or had_length:
        return b"%bContent-Length: %d\r\n\r\n%b" % (head, len(body), body)
    return head + b"\r\n"


class PostTarget:
    """A URL and headers that are POSTed to again and again (:meth:`Http1Transport.post`).

    The request head is checked and serialised once; each call adds only its Content-Length
    and body.
    """

    def __init__(self, url: httpx.URL | str, headers: Mapping[str, str]) -> None:
        #: Names the calls in httpx errors; its own body is empty.
        self.request = httpx.Request("POST", url, headers=headers)
        self.key = _pool_key(self.request)
        self.head, _ = _head(self.request)


def _decoded(request: httpx.Request, answer: _Answer) -> Exchange:
    version, status, reason, headers, body, _, encodings = answer
    if encodings:
        codings = [t for t in (t.strip().lower() for v in encodings for t in v.split(b",")) if t and t != b"identity"]
        if all(coding in _DECODABLE for coding in codings):
            try:
                for coding in reversed(codings if body else ()):  # no body (HEAD, 204): nothing to decode
                    body = _inflate(body) if coding == b"deflate" else _gunzip(body)
            except zlib.error as error:
                raise httpx.RemoteProtocolError(f"undecodable {b', '.join(codings).decode()} body: {error}",
                                                request=request) from error
            # Decoded here, so httpx must not try again.
            headers = [(name, value) for name, value in headers if name.lower() != b"content-encoding"]
    return Exchange(status, headers, body, version, reason)


def _gunzip(data: bytes) -> bytes:
    """gzip, every member (concatenated gzip files are one valid body); padding after the last is ignored."""
    out = []
    while data[:2] == b"\x1f\x8b" or not out:
        decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out.append(decompressor.decompress(data))
        if not decompressor.eof:
            raise zlib.error("truncated gzip stream")
        data = decompressor.unused_data
    return b"".join(out)


def _inflate(data: bytes) -> bytes:
    """``deflate`` is meant to be zlib-wrapped, but some servers send raw deflate; accept both."""
    if not data:
        return data
    try:
        return zlib.decompress(data)
    except zlib.error:
        return zlib.decompress(data, -zlib.MAX_WBITS)
