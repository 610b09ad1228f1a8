"""Gateway worker processes (:mod:`tests.fakes.worker_process`) on one Redis, started and stopped by a test,
and what they sent (each worker records its replies in a Redis list, ``<prefix>:sent``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.fakes import waiting

#: The checkout: the workers run from it, with it on their path.
ROOT = Path(__file__).resolve().parents[2]


def start_worker(
    redis_url: str, prefix: str, base_url: str, *, options: Sequence[str] = (), **gateway: Any
) -> subprocess.Popen:
    """A gateway worker process (:mod:`tests.fakes.worker_process`) with the shipped gateway settings, but for the
    keys of that section named here (``lock_ttl_seconds=2``); ``options`` are more of its command-line options
    (``--context-length 16000``)."""
    argv = [
        sys.executable,
        "-m",
        "tests.fakes.worker_process",
        "--redis",
        redis_url,
        "--prefix",
        prefix,
        "--base-url",
        base_url,
    ]
    if gateway:
        argv += ["--gateway", json.dumps(gateway)]
    argv += list(options)
    return subprocess.Popen(argv, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})


#: The one wait the tests use, importable from here too (the workers' conditions are coroutines: it awaits them).
wait_for = waiting.wait_for


async def sent(redis, prefix: str) -> list[dict]:
    """Every reply the workers under ``prefix`` sent, in order."""
    return [json.loads(raw) for raw in await redis.lrange(f"{prefix}:sent", 0, -1)]


def stop(process: subprocess.Popen) -> None:
    """SIGTERM a worker and wait for it to end (killing it if it does not within 20 s)."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def _count(redis, key: str, wanted: int) -> bool:
    """Whether the list at ``key`` holds at least ``wanted`` entries (the workers that registered, say)."""
    return await redis.llen(key) >= wanted
