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
    """The live serving processes of ``home`` (the files of dead ones are removed)."""
    pids: list[int] = []
    folder = serving_dir(home)
    for entry in sorted(folder.iterdir()) if folder.is_dir() else []:
        if not entry.name.isdigit():
            continue
        recorded = entry.read_text(encoding="utf-8").strip()
        if alive(int(entry.name), int(recorded) if recorded.isdigit() else None):
            pids.append(int(entry.name))
        else:
            with contextlib.suppress(OSError):
                entry.unlink()
    return pids


def reload_command(args: argparse.Namespace) -> int:
    """``foldgate reload``: check the configuration, then ask every serving process of this home to re-read it."""
    try:
        settings = load_settings(args.config)
    except ConfigError as error:
        print(f"foldgate: reload refused, the running configuration stays: {error.one_line()}", file=sys.stderr)
        return 2
    pids = serving_processes(settings.home_path)
    if not pids:
        print(f"foldgate: no foldgate run serves from {settings.home_path}; nothing to reload "
              "(in a container, send SIGHUP to foldgate's process instead)", file=sys.stderr)
        return 1
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGHUP)
    print(f"foldgate: asked {len(pids)} process{'es' if len(pids) != 1 else ''} ({', '.join(map(str, pids))}) to reload;"
          " each says what it changed in its log")
    return 0
