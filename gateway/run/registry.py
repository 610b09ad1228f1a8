"""Which ``foldgate run`` processes serve from a home, so ``foldgate reload`` knows whom to signal.

Each serving process leaves a file ``<home>/serving/<pid>`` holding its start time (so a recycled pid is not
signalled) while it runs, and removes it when it ends; a file left by a killed process is skipped, and
removed, by the next reload.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from gateway.config import ConfigError, load_settings
from gateway.server.pids import alive, start_time


def serving_dir(home: Path) -> Path:
    return home / "serving"


@contextlib.contextmanager
def process_registered(home: Path) -> Iterator[None]:
    """While the block runs, this process is listed as serving from ``home``."""
    folder = serving_dir(home)
    entry = folder / str(os.getpid())
    try:
        folder.mkdir(parents=True, exist_ok=True)
        entry.write_text(str(start_time(os.getpid()) or ""), encoding="utf-8")
    except OSError:  # a read-only home: the process runs, and SIGHUP still reloads it
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            entry.unlink()


def serving_processes(home: Path) -> list[int]:
    """The live serving processes of ``home`` (the files of dead ones are removed). A pid whose start time
    could not be recorded (no ``/proc``) counts only while its command line still names foldgate: a recycled
    pid must not be sent a SIGHUP, which would end most programs."""
    pids: list[int] = []
    try:
        entries = sorted(serving_dir(home).iterdir())
    except OSError:  # no such folder (nothing served from here yet), or not ours to read
        return []
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            recorded = entry.read_text(encoding="utf-8").strip()
        except OSError:  # it ended while we looked
            continue
        pid = int(entry.name)
        if alive(pid, int(recorded) if recorded.isdigit() else None) and (recorded.isdigit() or _is_foldgate(pid)):
            pids.append(pid)
        else:
            with contextlib.suppress(OSError):
                entry.unlink()
    return pids


def _is_foldgate(pid: int) -> bool:
    try:
        command = subprocess.run(
            ["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True, timeout=5
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "foldgate" in command or "gateway.cli" in command


def reload_command(args: argparse.Namespace) -> int:
    """``foldgate reload``: check the configuration, then ask every serving process of this home to re-read it."""
    try:
        settings = load_settings(args.config)
    except ConfigError as error:
        print(f"foldgate: reload refused, the running configuration stays: {error.one_line()}", file=sys.stderr)
        return 2
    pids = serving_processes(settings.home_path)
    if not pids:
        print(
            f"foldgate: no foldgate run serves from {settings.home_path}; nothing to reload "
            "(in a container, send SIGHUP to foldgate's process instead)",
            file=sys.stderr,
        )
        return 1
    asked: list[int] = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGHUP)
            asked.append(pid)
        except ProcessLookupError:  # it ended meanwhile
            continue
        except PermissionError:
            print(
                f"foldgate: cannot signal process {pid} — run foldgate reload as the user the gateway runs as",
                file=sys.stderr,
            )
    if asked:
        print(
            f"foldgate: asked {len(asked)} process{'es' if len(asked) != 1 else ''} ({', '.join(map(str, asked))}) to"
            " reload; each says what it changed in its log"
        )
    return 0 if len(asked) == len(pids) else 1
