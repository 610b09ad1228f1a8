"""``<home>/redis/server.json``: which server runs on a home and which foldgate owns it, under ``server.lock``.

The record holds the server's URL, its pid and start time, and the pid and start time of
the foldgate that owns it (start times: :func:`gateway.server.pids.start_time`, against
recycled pids). Every look at it that may lead to starting or stopping a server happens
under an exclusive ``flock`` on ``server.lock``, so two foldgates starting at once do not
both open the AOF. A ``server.url`` from an older foldgate (the URL alone, no owner) is
still read, so its server is recognised.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent import json_codec
from gateway.server.errors import EmbeddedRedisError
from gateway.server.pids import POLL_SECONDS, start_time

log = logging.getLogger(__name__)

_RECORD_VERSION = 1


@dataclass(frozen=True)
class ServerRecord:
    """What ``server.json`` (or an older foldgate's ``server.url``) says about the running server."""

    url: str
    pid: int | None = None
    started: int | None = None
    owner_pid: int | None = None
    owner_started: int | None = None


class RecordFile:
    """The record and its lock under one data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.path = data_dir / "server.json"
        self.legacy_path = data_dir / "server.url"  # written by older foldgates; read to recognise their servers
        self.lock_path = data_dir / "server.lock"

    @contextlib.asynccontextmanager
    async def exclusive(self, timeout: float) -> AsyncIterator[None]:
        """Hold ``server.lock`` so only one foldgate at a time inspects, starts or stops this home's server.

        :raises EmbeddedRedisError: another holder kept it for ``timeout`` seconds.
        """
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
                    await asyncio.sleep(POLL_SECONDS)
                except OSError as error:  # a file system without locks: go on as before locking existed
                    log.debug("no lock on %s: %s", self.lock_path, error)
                    break
            yield
        finally:
            os.close(descriptor)  # releases the lock

    def read(self) -> ServerRecord | None:
        """The recorded server, or None; a half-written or foreign ``server.json`` is removed and not trusted."""
        try:
            data: dict[str, Any] = json_codec.loads(self.path.read_text(encoding="utf-8"))
            return ServerRecord(
                str(data["url"]), data.get("pid"), data.get("started"), data.get("owner_pid"), data.get("owner_started")
            )
        except FileNotFoundError:
            pass
        except (ValueError, KeyError, TypeError, AttributeError):
            self.path.unlink(missing_ok=True)  # half-written or foreign: the caller's checks decide
        try:
            url = self.legacy_path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return None
        return ServerRecord(url) if url else None

    def forget(self) -> None:
        self.path.unlink(missing_ok=True)
        self.legacy_path.unlink(missing_ok=True)

    def write(self, url: str, pid: int, started: int | None) -> None:
        """Record the server at ``url`` as owned by this process (replaced whole, so a reader never sees half)."""
        record = {
            "version": _RECORD_VERSION,
            "url": url,
            "pid": pid,
            "started": started,
            "owner_pid": os.getpid(),
            "owner_started": start_time(os.getpid()),
            "data_dir": str(self.data_dir),
        }
        draft = self.path.with_suffix(".json.tmp")
        draft.write_text(json_codec.dumps_text(record) + "\n", encoding="utf-8")
        os.replace(draft, self.path)
        self.legacy_path.unlink(missing_ok=True)
