"""The Redis commands of the message path, sent over one auto-pipelined connection.

Each message costs a handful of Redis round trips (intake, claim, snapshot, commit,
finish). Through redis-py every command pays about 100 µs of this process's CPU on top
of the round trip itself (connection-pool checkout, retry and timeout wrappers,
observability hooks), which made Redis the largest share of a message's cost.
:class:`PipelinedConnection` speaks RESP directly on one asyncio connection: every command
issued during one event-loop iteration, by any chat, leaves in one write, and replies are
matched to callers in order (hiredis parses them). A command costs a few microseconds and a
busy gateway sends one write for many chats.

Order: commands issued on one :class:`PipelinedConnection` reach Redis in the order they were
issued, so :meth:`RedisChannel.call_in_order` sends a sequence in one round trip and Redis
runs it in that order (not atomically; the store's scripts are the atomic steps).

Failures: nothing is retried here. A lost connection fails every command in flight with
:class:`redis.exceptions.ConnectionError` (whether Redis ran it is unknown, exactly as with
a lost reply) and the next command reconnects; the store's fenced, idempotent scripts and
a failed turn's retry of its whole inbox entry (:mod:`gateway.worker.failures`) make resending
safe where it is needed. A server that stops answering for ``reply_timeout`` seconds is treated
as a lost connection.

Redis Cluster routes each command by its keys' slot; there :class:`RedisPyChannel` sends the
same commands through redis-py's cluster client, one at a time.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import socket
import ssl
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import hiredis
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import SSLConnection, UnixDomainSocketConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError, NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.startup_errors import StartupError

Arg = str | int | float | bytes
Command = Sequence[Arg]


class RedisChannel(Protocol):
    """Where the store and the inbox send their commands; replies come back as RESP2 values (str, int, list, None)."""

    def call(self, *args: Arg) -> Awaitable[Any]:
        """Run one command (await the result); an error reply raises :class:`redis.exceptions.ResponseError`."""
        ...

    async def call_in_order(self, *commands: Command) -> list[Any]:
        """Run ``commands`` in the given order; their replies (the first error reply raises)."""
        ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class Script:
    """A Lua script, run by its SHA1 (loaded on first use, and again after a server restart)."""

    source: str
    sha: str

    @classmethod
    def of(cls, source: str) -> Script:
        return cls(source, hashlib.sha1(source.encode()).hexdigest())

    async def run(self, channel: RedisChannel, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        """EVALSHA; when the server does not know the script, EVAL once, which also caches it there."""
        try:
            return await channel.call("EVALSHA", self.sha, len(keys), *keys, *args)
        except ResponseError as error:
            if not is_noscript(error):
                raise
        return await channel.call("EVAL", self.source, len(keys), *keys, *args)


def is_noscript(error: ResponseError) -> bool:
    """Whether the server did not know the script (redis-py and raw replies name it differently)."""
    return isinstance(error, NoScriptError) or str(error).startswith("NOSCRIPT")


def pack(args: Command) -> bytes:
    """One command as a RESP array of bulk strings (what redis-py would send for the same arguments).

    hiredis packs in C, about three times faster than a Python loop. It takes only exact
    str/bytes/int/float, so subclasses (an ``IntEnum``, say) are converted first; a bool, None
    or any other type is refused with a :class:`DataError`, as redis-py refuses it.
    """
    # hiredis's stub declares a one-element tuple where any number of arguments is meant.
    try:
        return hiredis.pack_command(args if type(args) is tuple else tuple(args))  # type: ignore[arg-type]
    except TypeError:
        return hiredis.pack_command(tuple(_plain(arg) for arg in args))  # type: ignore[arg-type]


def _plain(arg: Any) -> str | bytes | int | float:
    kind: type[Any]
    for kind in (str, bytes, int, float):
        if isinstance(arg, kind) and not isinstance(arg, bool):
            return kind(arg)
    raise DataError(f"invalid Redis argument {arg!r} of type {type(arg).__name__}: use str, bytes, int or float")


@dataclass(frozen=True)
class Address:
    """Where and how to connect: TCP (optionally TLS) or a unix socket, plus AUTH and SELECT."""

    host: str = "127.0.0.1"
    port: int = 6379
    path: str | None = None
    db: int = 0
    username: str | None = None
    password: str | None = None
    tls: ssl.SSLContext | None = None
    connect_timeout: float = 5.0
    #: ``socket_timeout``: how long a reply may take before the connection counts as lost (None: the channel's own).
    reply_timeout: float | None = None
    client_name: str | None = None
    keepalive: bool = False

    @classmethod
    def of(cls, redis: Redis) -> Address:
        """The server a redis-py client talks to, with the same credentials and database."""
        pool = redis.connection_pool
        options = pool.connection_kwargs
        tls = None
        if issubclass(pool.connection_class, SSLConnection):
            tls = ssl.create_default_context(cafile=options.get("ssl_ca_certs"))
            if options.get("ssl_cert_reqs") in ("none", ssl.CERT_NONE):
                tls.check_hostname = False
                tls.verify_mode = ssl.CERT_NONE
        return cls(
            host=options.get("host", "127.0.0.1"),
            port=int(options.get("port", 6379)),
            path=options.get("path") if issubclass(pool.connection_class, UnixDomainSocketConnection) else None,
            db=int(options.get("db") or 0),
            username=options.get("username"),
            password=options.get("password"),
            tls=tls,
            connect_timeout=float(options.get("socket_connect_timeout") or 5.0),
            reply_timeout=float(options["socket_timeout"]) if options.get("socket_timeout") else None,
            client_name=options.get("client_name") or None,
            keepalive=bool(options.get("socket_keepalive")),
        )


class _Resp(asyncio.Protocol):
    """One connection: writes batched per loop iteration, replies handed to waiters in order."""

    def __init__(self, reply_timeout: float, owner: PipelinedConnection) -> None:
        self.loop = asyncio.get_running_loop()
        self.owner = owner
        self.reader = hiredis.Reader(encoding="utf-8", replyError=ResponseError)
        self.waiters: collections.deque[asyncio.Future[Any]] = collections.deque()
        self.outgoing: list[bytes] = []
        self.transport: asyncio.Transport | None = None
        self.lost: Exception | None = None
        self.reply_timeout = reply_timeout
        self.progress = 0.0  # monotonic time of the last reply (or of the first wait after an idle spell)
        self.watchdog: asyncio.TimerHandle | None = None

    @property
    def usable(self) -> bool:
        return self.lost is None and self.transport is not None and not self.transport.is_closing()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a stream connection's transport

    def send(self, packed: bytes) -> asyncio.Future[Any]:
        if self.lost is not None:
            raise RedisConnectionError(str(self.lost))
        waiter = self.loop.create_future()
        if not self.waiters and self.watchdog is None:
            self.watchdog = self.loop.call_later(self.reply_timeout, self._check_progress)
        self.waiters.append(waiter)
        if not self.outgoing:
            self.loop.call_soon(self._flush)
        self.outgoing.append(packed)
        return waiter

    def _flush(self) -> None:
        if self.outgoing and self.usable:
            assert self.transport is not None
            if len(self.waiters) == len(self.outgoing):  # nothing older awaits a reply: the wait starts now
                self.progress = time.monotonic()
            self.transport.writelines(self.outgoing)
            self.owner.writes += 1
        self.outgoing.clear()

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while True:
            try:
                reply = self.reader.gets()
            except UnicodeDecodeError as error:  # hiredis consumed the whole reply: only its caller fails
                reply = DataError(f"Redis sent text that is not UTF-8: {error}")
            except hiredis.ProtocolError as error:
                self._fail(RedisConnectionError(f"Redis protocol error: {error}"))
                return
            if reply is False:
                break
            if not self.waiters:
                self._fail(RedisConnectionError("Redis sent a reply nobody asked for"))
                return
            waiter = self.waiters.popleft()
            if not waiter.done():  # a caller that gave up (cancelled) still has its reply consumed here
                if isinstance(reply, (ResponseError, DataError)):
                    waiter.set_exception(reply)
                else:
                    waiter.set_result(reply)
        self.progress = time.monotonic()

    def _check_progress(self) -> None:
        self.watchdog = None
        if not self.waiters or self.lost is not None:
            return
        due = self.progress + self.reply_timeout
        if time.monotonic() >= due:
            self._fail(RedisTimeoutError(f"Redis sent no reply for {self.reply_timeout:g} s"))
        else:
            self.watchdog = self.loop.call_at(self.loop.time() + (due - time.monotonic()), self._check_progress)

    def _fail(self, error: Exception) -> None:
        if self.lost is None:
            self.lost = error
        if self.transport is not None:
            self.transport.abort()
        self._fail_waiters()

    def _fail_waiters(self) -> None:
        error = self.lost or RedisConnectionError("connection to Redis closed")
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_exception(error)
        if self.watchdog is not None:
            self.watchdog.cancel()
            self.watchdog = None

    def connection_lost(self, exc: Exception | None) -> None:
        if self.lost is None:
            self.lost = RedisConnectionError(f"connection to Redis lost: {exc or 'closed by the server'}")
        self._fail_waiters()


class PipelinedConnection:
    """A :class:`RedisChannel` on one connection to a single Redis server, reconnecting when lost."""

    def __init__(self, address: Address, *, reply_timeout: float = 30.0) -> None:
        self.address = address
        self.reply_timeout = reply_timeout
        self._resp: _Resp | None = None
        self._connecting: asyncio.Task[_Resp] | None = None
        self._closed = False
        #: Commands sent and writes that carried them (a write holds every command of one loop iteration).
        self.commands = 0
        self.writes = 0

    @classmethod
    def like(cls, redis: Redis, **options: Any) -> PipelinedConnection:
        """A connection to the same server, database, credentials and URL options as a redis-py client."""
        address = Address.of(redis)
        if address.reply_timeout is not None:
            options.setdefault("reply_timeout", address.reply_timeout)
        return cls(address, **options)

    async def _connection(self) -> _Resp:
        resp = self._resp
        if resp is not None and resp.usable:
            return resp
        if self._closed:
            raise RedisConnectionError("the connection was closed")
        if self._connecting is None or self._connecting.done():
            self._connecting = asyncio.ensure_future(self._connect())
        connecting = self._connecting
        try:
            return await asyncio.shield(connecting)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if connecting.cancelled() and current is not None and not current.cancelling():
                raise RedisConnectionError("the connection was closed while connecting") from None
            raise

    async def _connect(self) -> _Resp:
        loop = asyncio.get_running_loop()
        address = self.address
        try:
            async with asyncio.timeout(address.connect_timeout):
                if address.path:
                    _, resp = await loop.create_unix_connection(lambda: _Resp(self.reply_timeout, self), address.path)
                else:
                    _, resp = await loop.create_connection(
                        lambda: _Resp(self.reply_timeout, self),
                        address.host,
                        address.port,
                        ssl=address.tls,
                        server_hostname=address.host if address.tls else None,
                    )
                transport = resp.transport
                assert transport is not None  # connection_made set it before the connection was handed over
                setup: list[Command] = []
                if address.password:
                    setup.append(
                        ("AUTH", address.username, address.password) if address.username else ("AUTH", address.password)
                    )
                if address.db:
                    setup.append(("SELECT", address.db))
                if address.client_name:
                    setup.append(("CLIENT", "SETNAME", address.client_name))
                if address.keepalive:
                    sock = transport.get_extra_info("socket")
                    if sock is not None:
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
                try:
                    for command in setup:
                        await resp.send(pack(command))
                except BaseException:
                    transport.close()
                    raise
        except (TimeoutError, OSError) as error:
            where = address.path or f"{address.host}:{address.port}"
            raise RedisConnectionError(
                f"cannot connect to Redis at {where}: {error or type(error).__name__}"
            ) from error
        self._resp = resp
        return resp

    def call(self, *args: Arg) -> Awaitable[Any]:
        # Connected (the usual case): the reply's future itself, with no coroutine around it.
        resp = self._resp
        if resp is not None and resp.usable:
            self.commands += 1
            return resp.send(pack(args))
        return self._call_after_connecting(args)

    async def _call_after_connecting(self, args: Command) -> Any:
        resp = await self._connection()
        self.commands += 1
        return await resp.send(pack(args))

    async def call_in_order(self, *commands: Command) -> list[Any]:
        resp = self._resp if self._resp is not None and self._resp.usable else await self._connection()
        packed = [pack(command) for command in commands]  # a command that cannot be packed sends nothing
        waiters = [resp.send(data) for data in packed]  # queued now, so they leave in this order
        self.commands += len(commands)
        try:
            replies: list[Any] = []
            error: ResponseError | None = None
            for waiter in waiters:
                try:
                    replies.append(await waiter)
                except ResponseError as reply:
                    error = error or reply
                    replies.append(reply)
            if error is not None:
                raise error
            return replies
        finally:
            for waiter in waiters:  # after a failure: later replies are consumed and dropped, never reported
                if not waiter.done():
                    waiter.cancel()
                elif not waiter.cancelled():
                    waiter.exception()

    async def aclose(self) -> None:
        self._closed = True
        if self._connecting is not None:
            self._connecting.cancel()
        if self._resp is not None and self._resp.transport is not None:
            self._resp.transport.close()
        self._resp = None


class RedisPyChannel:
    """A :class:`RedisChannel` through a redis-py client (Redis Cluster routes each command by its keys)."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    async def call(self, *args: Arg) -> Any:
        return await self.redis.execute_command(*args)

    async def call_in_order(self, *commands: Command) -> list[Any]:
        return [await self.redis.execute_command(*command) for command in commands]

    async def aclose(self) -> None:
        return None  # the redis-py client belongs to the caller


#: redis-py connection options :class:`Address` does not carry over; a client using one keeps the redis-py route.
_REDIS_PY_ONLY = ("credential_provider", "ssl_certfile", "ssl_keyfile", "ssl_ca_path", "ssl_ca_data")


#: URL options the pipelined connection does not implement, with the value each may keep (its default).
_NOT_CARRIED = {"health_check_interval": (0, None), "protocol": (2, "2", None)}


class UnsupportedRedisOption(StartupError):
    """A Redis URL option foldgate's connection would otherwise ignore without a word."""

    def __init__(self, message: str) -> None:
        super().__init__(message, setting="redis.url")


def channel_for(redis: Redis) -> RedisChannel:
    """The fastest channel to the server(s) of ``redis``: pipelined for one server, redis-py for a
    Cluster or for connection options (client certificates, credential providers) only redis-py has.

    The pipelined connection honours the URL's database, credentials, TLS, ``socket_timeout``,
    ``socket_connect_timeout``, ``client_name`` and ``socket_keepalive``; a URL asking for what it
    does not do (a health-check interval, RESP3) is refused rather than silently ignored.
    """
    if isinstance(redis, RedisCluster):
        return RedisPyChannel(redis)
    options = redis.connection_pool.connection_kwargs
    for name, defaults in _NOT_CARRIED.items():
        if options.get(name) not in defaults:
            raise UnsupportedRedisOption(
                f"the Redis URL option {name}={options[name]} is not supported by foldgate's "
                "Redis connection — remove it from the URL"
            )
    if (
        any(options.get(name) for name in _REDIS_PY_ONLY)
        or options.get("ssl_check_hostname") is False
        or options.get("ssl_cert_reqs") == "optional"
    ):
        return RedisPyChannel(redis)
    return PipelinedConnection.like(redis)
