"""The process a benchmark measures, apart from the fakes and the measuring: started as
``python -m <benchmark module> <flag> <config JSON>``, it takes commands on stdin and answers JSON lines, so
the fakes' CPU and memory stay out of its figures."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class MeasuredChild:
    """A benchmark's measured process (``python -m <module> <flag> <config JSON>``), spoken to in lines: commands
    in, JSON out; anything else it prints (a library's notice) is not an answer."""

    def __init__(self, module: str, flag: str, config: Mapping[str, Any]) -> None:
        self.module = module
        root = Path(__file__).resolve().parent.parent
        environment = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", module, flag, json.dumps(dict(config))],
            cwd=root,
            env=environment,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    async def ask(self, command: str | None = None, timeout: float = 120.0) -> dict[str, Any]:
        """Send ``command`` (if any) and read the child's next JSON line."""
        assert self.process.stdin is not None and self.process.stdout is not None
        if command is not None:
            self.process.stdin.write(command + "\n")
            self.process.stdin.flush()
        deadline = time.monotonic() + timeout
        while True:  # anything else the process prints (a library's notice) is not an answer
            left = deadline - time.monotonic()
            line = await asyncio.wait_for(asyncio.to_thread(self.process.stdout.readline), max(left, 0.001))
            if not line:
                raise RuntimeError(f"the measured process ({self.module}) ended (exit status {self.process.wait()})")
            if line.startswith("{"):
                return json.loads(line)

    def stop(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            assert self.process.stdin is not None
            self.process.stdin.write("stop\n")
            self.process.stdin.close()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
