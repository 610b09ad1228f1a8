"""Whether a recorded process still runs — the same process, not a recycled pid — and stopping one.

"Alive" compares the process start time on Linux (``/proc/<pid>/stat`` field 22), so a
recycled pid is not mistaken for the foldgate or server recorded under it; elsewhere only the
pid is checked (a recycled owner pid then makes foldgate share a server it could have
restarted — harmless).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

from gateway.server.errors import EmbeddedRedisError

log = logging.getLogger(__name__)

#: How long to wait before looking again at a process, a lock or a server that is not ready yet.
POLL_SECONDS = 0.05


class ProcStat(NamedTuple):
    state: str
    parent: int
    started: int


def proc_stat(pid: int) -> ProcStat | None:
    """State, parent pid and start time (clock ticks after boot) from Linux's ``/proc``; None elsewhere or gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes().decode("ascii", errors="replace")
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()  # the command name may hold spaces and parentheses
    try:
        return ProcStat(fields[0], int(fields[1]), int(fields[19]))
    except (IndexError, ValueError):
        return None


def _has_proc() -> bool:
    return sys.platform.startswith("linux") and Path("/proc/self/stat").exists()


def start_time(pid: int) -> int | None:
    """When ``pid`` started (Linux clock ticks), to tell it from a later process given the same pid; None unknown."""
    stat = proc_stat(pid)
    return stat.started if stat else None


def alive(pid: int | None, started: int | None = None) -> bool:
    """Whether ``pid`` is a live process — the same one, when its start time is known. Zombies are gone."""
    if not pid or pid <= 0:
        return False
    if _has_proc():
        stat = proc_stat(pid)
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


def parent_and_command(pid: int) -> tuple[int, str] | None:
    """The parent of ``pid`` and that parent's command line (``/proc`` on Linux, ``ps`` elsewhere)."""
    stat = proc_stat(pid)
    if stat is not None:
        try:
            command = Path(f"/proc/{stat.parent}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            command = ""
        return stat.parent, command
    try:
        parent = int(
            subprocess.run(
                ["ps", "-o", "ppid=", "-p", str(pid)], capture_output=True, text=True, timeout=5
            ).stdout.strip()
        )
        command = subprocess.run(
            ["ps", "-o", "command=", "-p", str(parent)], capture_output=True, text=True, timeout=5
        ).stdout.strip()
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return parent, command


async def signal_and_wait(pid: int, started: int | None, timeout: float, data_dir: Path) -> bool:
    """SIGTERM the server ``pid`` serving ``data_dir``, then SIGKILL after ``timeout``; True once it is gone.

    :raises EmbeddedRedisError: the server belongs to another user.
    """
    for sig, patience in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return True
        except PermissionError:
            raise EmbeddedRedisError(
                f"an embedded Redis (pid {pid}) of another user serves {data_dir}; stop it first"
            ) from None
        deadline = time.monotonic() + patience
        while alive(pid, started) and time.monotonic() < deadline:
            await asyncio.sleep(POLL_SECONDS)
        if not alive(pid, started):
            return True
        log.warning("embedded redis (pid %d) ignored SIGTERM for %.0fs; killing it", pid, timeout)
    return False
