"""Progress for long commands: a redrawn bar on a terminal, a few plain lines anywhere else.

A bar redrawn with ``\\r`` is readable on a terminal but turns into one enormous line in a
log file or a CI pipe, so the output's ``isatty()`` decides: a terminal gets the bar, any
other stream gets a line at every tenth of the work (and after a long silence), so a log
of any run stays a dozen lines long.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import TextIO

BAR_WIDTH = 30
#: A terminal is redrawn at most this often, so a fast loop does not spend its time printing.
REDRAW_SECONDS = 0.1
#: Away from a terminal, a line at every this fraction of the work ...
LINE_EVERY_FRACTION = 0.1
#: ... and after this long without one, so a slow step still shows the run is alive.
LINE_EVERY_SECONDS = 30.0


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    """``1 message``, ``2 messages``: counts read right in every line printed."""
    return f"{count:,} {singular if count == 1 else (plural_form or singular + 's')}"


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal; a stream without ``isatty`` (or a closed one) is not."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


class Progress:
    """Counts ``total`` units of work on ``stream`` (usually stderr); ``stream=None`` prints nothing.

    Use as a context manager, or call :meth:`close` at the end: a terminal then gets its
    final newline, a pipe its last line.
    """

    def __init__(
        self, total: int, unit: str, stream: TextIO | None, *, label: str = "", terminal: bool | None = None
    ) -> None:
        self.total = max(0, total)
        self.unit = unit
        self.stream = stream
        self.label = label
        self.terminal = is_terminal(stream) if terminal is None and stream is not None else bool(terminal)
        self.done = 0
        self.note = ""
        self._drawn_at = float("-inf")
        self._printed_step = -1
        self._printed_done = -1
        self._closed = False

    def update(self, done: int | None = None, *, advance: int = 1, note: str | None = None) -> None:
        """Set the count to ``done`` (or add ``advance``); ``note`` (kept until changed) says what runs now."""
        count = self.done + advance if done is None else done
        self.done = min(self.total, count) if self.total else count
        if note is not None:
            self.note = note
        if self.stream is None or self._closed:
            return
        now = time.monotonic()
        finished = self.total and self.done >= self.total
        if self.terminal:
            if finished or now - self._drawn_at >= REDRAW_SECONDS:
                self._draw_bar(now)
            return
        step = int(self.done / (self.total * LINE_EVERY_FRACTION)) if self.total else self.done
        if step > self._printed_step or (
            now - self._drawn_at >= LINE_EVERY_SECONDS and self.done != self._printed_done
        ):
            self._print_line(now)
            self._printed_step = step

    def close(self) -> None:
        """End the display: the bar's line is finished, a pipe gets the final count if it has not yet."""
        if self.stream is None or self._closed:
            return
        self.note = ""
        if self.terminal:
            self._draw_bar(time.monotonic())
            self.stream.write("\n")
            self.stream.flush()
        elif self.done != self._printed_done:
            self._print_line(time.monotonic())
        self._closed = True

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def _text(self, percent: bool = False) -> str:
        counted = f"{self.done:,}/{plural(self.total, self.unit)}" if self.total else plural(self.done, self.unit)
        if percent and self.total:
            counted += f" ({100 * self.done // self.total}%)"
        head = f"{self.label}: " if self.label else ""
        tail = f" — {self.note}" if self.note else ""
        return f"{head}{counted}{tail}"

    def _draw_bar(self, now: float) -> None:
        assert self.stream is not None
        filled = int(BAR_WIDTH * self.done / self.total) if self.total else 0
        # \x1b[K clears what a longer previous note left on the line.
        self.stream.write(f"\r[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {self._text()}\x1b[K")
        self.stream.flush()
        self._drawn_at = now

    def _print_line(self, now: float) -> None:
        assert self.stream is not None
        self.stream.write(f"{self._text(percent=True)}\n")
        self.stream.flush()
        self._drawn_at = now
        self._printed_done = self.done
