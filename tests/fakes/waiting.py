"""Waiting, in a test, for something to have happened: the one poll every test uses.

A test that needs a reply sent, a key gone or a process up asks for exactly that and goes on the moment it
holds; it never sleeps "long enough". The timeout only ends a test that hangs, so it is generous: a busy
machine makes the wait longer, never the test wrong. When it does run out, the error says what was awaited
(``what``, or where the condition was written), so a hang reads as the missing event, not as a bare timeout.

- :func:`wait_for` — in a coroutine; the condition may be a plain function or a coroutine function (a Redis
  query), and the wait gives the event loop back between checks, so the tasks being waited on can run.
- :func:`wait_for_sync` — in plain code (a test driving OS processes, a script run in a subprocess), where
  there is no loop to give back to.

Both return the condition's first truthy value, so a wait for "the record, once it is there" is one call.
"""

from __future__ import annotations

import asyncio
import inspect
import linecache
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Seconds before a wait for something that should come soon is given up as a hang; a busy machine never
#: gets near it.
PATIENCE = 30.0
#: Seconds between two checks: short enough that a test goes on almost as soon as its condition holds, long
#: enough that a condition asking Redis or reading a file costs nothing that matters.
INTERVAL = 0.02


async def wait_for(
    condition: Callable[[], Any],
    timeout: float = PATIENCE,
    *,
    what: str | None = None,
    interval: float = INTERVAL,
) -> Any:
    """Return ``condition()``'s first truthy value (awaited when it is awaitable), checking every ``interval``
    seconds; raise :class:`TimeoutError` naming ``what`` was awaited once ``timeout`` seconds have passed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() >= deadline:
            raise TimeoutError(_gave_up(condition, what, timeout))
        await asyncio.sleep(interval)


def wait_for_sync(
    condition: Callable[[], Any],
    timeout: float = PATIENCE,
    *,
    what: str | None = None,
    interval: float = INTERVAL,
) -> Any:
    """:func:`wait_for` for code without an event loop: the same checks, blocking between them."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(_gave_up(condition, what, timeout))
        time.sleep(interval)


def _gave_up(condition: Callable[[], Any], what: str | None, timeout: float) -> str:
    return f"still waiting for {what or _described(condition)} after {timeout:g} s"


def _described(condition: Callable[[], Any]) -> str:
    """Where a condition nobody named was written, and that line: enough to tell which wait hung."""
    code = getattr(condition, "__code__", None)
    if code is None:  # a bound method, a partial: its repr names it
        return repr(condition)
    line = linecache.getline(code.co_filename, code.co_firstlineno).strip()
    return f"the condition at {Path(code.co_filename).name}:{code.co_firstlineno} ({line})"
