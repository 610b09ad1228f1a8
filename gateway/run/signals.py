"""How the serving process is asked to end, and what it does with replies still being written.

Kept apart from the run itself so the rule (Ctrl-C at once, SIGTERM with a grace period, a
second signal at once) reads in one place and the deploy files can be checked against it.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from typing import TYPE_CHECKING, TextIO

from gateway.progress import is_terminal, plural

if TYPE_CHECKING:
    from gateway.bots import Fleet

#: Seconds a SIGTERM (a service manager stopping foldgate) lets running turns finish before they are cancelled.
TERM_GRACE_SECONDS = 60.0  # the shipped service files allow 90 s before they kill


class ShutdownSignals:
    """How the process was asked to end. Ctrl-C (SIGINT) ends it at once: running turns are cancelled and
    their messages, still in the inbox, are answered on the next start. SIGTERM lets them finish for
    :data:`TERM_GRACE_SECONDS`; a second signal of either kind ends it at once."""

    def __init__(self) -> None:
        self.received: list[int] = []
        #: Set by the first signal: the process ends.
        self.stop = asyncio.Event()
        #: Set when running turns are not to be waited for.
        self.at_once = asyncio.Event()

    def __call__(self, sig: int) -> None:
        self.received.append(sig)
        self.stop.set()
        if sig == signal.SIGINT or len(self.received) > 1:
            self.at_once.set()

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):  # loops without signal support: Ctrl-C still ends the run
                loop.add_signal_handler(sig, self, sig)

    @property
    def grace_seconds(self) -> float:
        return 0.0 if self.at_once.is_set() else TERM_GRACE_SECONDS


class ReloadSignal:
    """SIGHUP (``foldgate reload`` sends it): read the configuration again and apply what changed in the bots."""

    def __init__(self) -> None:
        self.requested = asyncio.Event()

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        with contextlib.suppress(NotImplementedError, AttributeError):  # no SIGHUP here: reloading is not offered
            loop.add_signal_handler(signal.SIGHUP, self.requested.set)


async def shut_down(gateway: Fleet, signals: ShutdownSignals, out: TextIO) -> None:
    """Close the bots as the signals ask, saying in one line what happens to turns still running."""
    lead = "\n" if is_terminal(out) else ""  # the terminal chat may be showing its "working" status
    busy = gateway.busy_chats
    if busy and not signals.at_once.is_set():
        out.write(
            f"{lead}foldgate: waiting up to {signals.grace_seconds:g} s for {plural(busy, 'reply')} being"
            " written; Ctrl-C or a second SIGTERM ends at once\n"
        )
        out.flush()
        lead = ""
    cancelled = await gateway.close(grace_seconds=signals.grace_seconds, cut_short=signals.at_once)
    if cancelled:
        out.write(
            f"{lead}foldgate: stopped; {plural(cancelled, 'message')} being answered will be answered"
            " on the next start\n"
        )
        out.flush()
