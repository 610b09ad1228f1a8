"""The server found recorded on a home at start: gone, shared with its live owner, or left behind and stopped.

Starting on a home whose ``server.json`` names a server (the caller holds ``server.lock``):

* the server is gone: the stale record is removed and a new server starts;
* the owner is alive: this foldgate *shares* the server — it connects to its URL and
  leaves it running when it closes. Only the owner stops it; a sharer still connected
  then simply loses its connection (foldgate's usual Redis errors), which is why the
  notice says so. A gateway may not share (``share=False``: one ``foldgate run`` per home);
* the owner is gone but the server still runs (an older foldgate without the watcher, or
  a watcher killed on macOS): the server is sent SIGTERM, waited for until it has exited
  (its AOF is complete), and a new one starts on the same files.

A ``server.url`` from an older foldgate has no owner pid: its server's parent is taken as the
owner when it is still a Python/foldgate process, and as gone otherwise.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path

from gateway.server.errors import EmbeddedRedisError, EmbeddedRedisInUse
from gateway.server.pids import POLL_SECONDS, alive, parent_and_command, signal_and_wait, start_time
from gateway.server.probe import answers_ping, identify
from gateway.server.record import RecordFile, ServerRecord


@dataclass(frozen=True)
class Shared:
    """The server this foldgate now uses without owning it."""

    url: str
    pid: int
    started: int | None
    owner: int


@dataclass(frozen=True)
class Settled:
    """What became of the recorded server: shared, or out of the way so a new one may start."""

    shared: Shared | None = None
    #: One line for the user when the start is not the plain one (a shared or a stopped left-behind server).
    notice: str | None = None


async def settle_previous(
    records: RecordFile,
    *,
    home: Path,
    socket_url: str,
    share: bool,
    startup_timeout: float,
    shutdown_timeout: float,
) -> Settled:
    """Deal with the server recorded under ``home``, whose own socket would be ``socket_url``.

    :raises EmbeddedRedisInUse: its owner is another live foldgate and ``share`` is false.
    :raises EmbeddedRedisError: it cannot be shared (it does not answer) or stopped.
    """
    data_dir = records.data_dir
    record = records.read()
    if record is None:
        return Settled()
    pid = await _server_pid(record, socket_url, data_dir)
    if pid is None:
        records.forget()  # that server is gone (or the URL now reaches another one)
        return Settled()
    started = start_time(pid)
    owner, gone_owner = _owner(record, pid)
    if owner is not None:
        shared = Shared(record.url, pid, started, owner)
        return Settled(shared, await _join(shared, home=home, data_dir=data_dir, share=share, timeout=startup_timeout))
    if not await signal_and_wait(pid, started, shutdown_timeout, data_dir):
        raise EmbeddedRedisError(
            f"could not stop the embedded Redis (pid {pid}) left running on {data_dir}; stop it by hand"
        )
    if await identify(record.url) is not None:  # e.g. its pid is not visible from this pid namespace
        raise EmbeddedRedisError(f"a server still serves {data_dir} at {record.url}; stop it first")
    records.forget()
    by = f"an earlier foldgate (pid {gone_owner})" if gone_owner else "an earlier foldgate"
    return Settled(notice=f"foldgate: stopped an embedded Redis (pid {pid}) left running by {by} on {data_dir}")


async def _server_pid(record: ServerRecord, socket_url: str, data_dir: Path) -> int | None:
    """Pid of the recorded server when it still runs and serves ``data_dir``; None when it is gone."""
    identity = await identify(record.url)
    if identity is not None and (record.url == socket_url or identity[1] == data_dir):
        return identity[0]  # our socket, or a loopback port whose server keeps its data here
    if identity is None and record.started is not None and alive(record.pid, record.started):
        return record.pid  # the recorded process itself, just not answering (yet)
    return None


def _owner(record: ServerRecord, pid: int) -> tuple[int | None, int | None]:
    """The live foldgate owning server ``pid`` (None: nobody), and the recorded owner pid for the notice."""
    if record.owner_pid is not None:
        owner = record.owner_pid if alive(record.owner_pid, record.owner_started) else None
        return owner, record.owner_pid
    parent = parent_and_command(pid)  # an older foldgate's server.url: its parent, if still foldgate, owns it
    if parent is not None and parent[0] > 1 and any(word in parent[1] for word in ("python", "foldgate")):
        return parent[0], None
    return None, None


async def _join(shared: Shared, *, home: Path, data_dir: Path, share: bool, timeout: float) -> str:
    """Wait until the shared server answers PING; the notice that says whose server it is.

    :raises EmbeddedRedisInUse: another foldgate owns it and this one may not share.
    """
    if not share and shared.owner != os.getpid():
        raise EmbeddedRedisInUse(
            f"another foldgate (pid {shared.owner}) runs a gateway on {home}; one `foldgate run` per home:"
            " quit that one, or give this one its own FOLDGATE_HOME (gateways that should share chats"
            " share a Redis server through redis.url)"
        )
    deadline = time.monotonic() + timeout
    while not await answers_ping(shared.url, timeout=0.5):
        if not alive(shared.pid, shared.started) or time.monotonic() > deadline:
            raise EmbeddedRedisError(
                f"the embedded Redis on {data_dir} (pid {shared.pid}, run by foldgate pid {shared.owner})"
                " does not answer; stop that foldgate and start again"
            )
        await asyncio.sleep(POLL_SECONDS)
    if shared.owner == os.getpid():
        return f"foldgate: using the embedded Redis this process already runs on {data_dir}"
    return (
        f"foldgate: using the embedded Redis of foldgate pid {shared.owner} on {data_dir};"
        " it stops when that foldgate stops"
    )
