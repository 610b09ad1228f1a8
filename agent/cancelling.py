"""Cancelling a task and knowing it has ended, even when a library swallowed the cancellation.

On Python 3.11, ``asyncio.wait_for`` loses a cancellation that arrives just as the operation it
guards completes (CPython gh-86296, fixed in 3.12 by building ``wait_for`` on ``asyncio.timeout``).
redis-py ≥ 8 gives every client a 5 s ``socket_timeout`` and so sends each command through
``wait_for``: a task cancelled while one of its Redis commands is written carries on as if nothing
had happened. A caller that cancels a looping task and then waits for it would wait forever — in
foldgate that was a turn whose ``/stop`` watcher outlived the answer, holding its chat (and
renewing its lock) with nothing left to do. Asking again until the task ends closes that gap and
costs nothing when the first request is honoured.
"""

from __future__ import annotations

import asyncio

#: How long to give a cancelled task before asking it again.
ASK_AGAIN_SECONDS = 0.5


async def cancel_and_wait(*tasks: asyncio.Future, ask_again: float = ASK_AGAIN_SECONDS) -> None:
    """Cancel ``tasks`` and return once every one has ended.

    An error a task ended with is taken as seen (the caller gave up on its outcome), so asyncio
    does not report it as never retrieved.
    """
    pending = {task for task in tasks if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=ask_again)
    for task in tasks:
        if not task.cancelled():
            task.exception()
