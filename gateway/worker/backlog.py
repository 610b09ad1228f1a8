"""Which waiting messages a turn takes in with its own (``gateway.coalesce_backlog``).

After a night offline a chat may hold hundreds of messages; answering each alone costs a
model call apiece and replies to questions the next message already changed. A turn
therefore takes in the consecutive messages behind its head, up to a count. A command ends
the run (it is handled alone, in order), and messages at the end that ask for no reply wait
for their own step, so the reply answers the last message that asked for one.

A night's backlog can be larger than the model's whole window, so it cannot simply ride in
the request. The request carries the newest messages of the backlog verbatim, within a share
of the window (:func:`verbatim_limit`, :func:`verbatim_start`); every message before them is
stored in the session first, where the hygiene pass weighs it with the rest of the session and
the request's own part, and folds it into the summary (archived, searchable) when the whole
would pass 85% of the window. Every message is stored once, in order, and the turn answers the
newest one that asked.

An album whose parts came as messages of their own (a Telegram webhook delivers one part at a
time) is taken in whole whatever the setting: its turn waits until no new part has come for
the album window, and the parts behind the head join it, answered once (:func:`take_album`).

A message whose sender waits for its own answer (``IncomingMessage.awaits_own_reply``: an API request) is
never coalesced either way: joined to another turn it would get no reply of its own, so each is its own turn,
in order (:func:`answered_alone`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence

from gateway.commands.syntax import parse as parse_command
from gateway.platforms.base import IncomingMessage
from gateway.store.inbox import Inbox


def is_command(message: IncomingMessage) -> bool:
    """Whether the message is a chat command the gateway answers itself (not a turn for the model)."""
    return message.respond and parse_command(message.text.strip()) is not None


def answered_alone(message: IncomingMessage) -> bool:
    """Whether the message's turn must be its own: a command, a client's own tools or tool results (their
    reply belongs to that request), or a sender waiting for the answer to this very message."""
    return is_command(message) or bool(message.client_tools or message.tool_results) or message.awaits_own_reply


class ParsedEntries:
    """The inbox entries one turn reads, each parsed once: the head it was handed, the entries it takes in
    behind it, and the same entries when they are read again (the provider stayed away)."""

    def __init__(self, head_raw: str) -> None:
        """Raises ValueError when the head entry cannot be read (it goes to the quarantine)."""
        self.head_raw = head_raw
        self.head = IncomingMessage.model_validate_json(head_raw)
        self._parsed = {head_raw: self.head}

    def parse(self, raw: str) -> IncomingMessage:
        """The message of entry ``raw``; raises ValueError when it cannot be read."""
        message = self._parsed.get(raw)
        if message is None:
            message = self._parsed[raw] = IncomingMessage.model_validate_json(raw)
        return message


async def take_backlog(inbox: Inbox, entries: ParsedEntries, *, max_messages: int) -> list[tuple[str, IncomingMessage]]:
    """The entries waiting behind the head of ``entries`` that its turn takes in, ``(raw, message)`` in order."""
    head = entries.head
    if head.awaits_own_reply:  # its sender waits for its own answer: the entries behind it wait for theirs
        return []
    waiting = await inbox.waiting(head.chat, max_messages)
    try:
        if not waiting or entries.parse(waiting[0]).update_id != head.update_id:
            return []
    except ValueError:
        return []
    taken: list[tuple[str, IncomingMessage]] = []
    for raw in waiting[1:]:
        try:
            message = entries.parse(raw)
        except ValueError:
            break  # the unreadable entry gets its own step (and its quarantine)
        if answered_alone(message):
            break
        taken.append((raw, message))
    while taken and not taken[-1][1].respond:
        taken.pop()
    return taken


#: Share of the window the verbatim part of a backlog may take at most, whatever is configured.
VERBATIM_SHARE = 0.25


def verbatim_limit(configured: int, context_length: int) -> int:
    """Tokens of a backlog the request carries verbatim: ``gateway.coalesce_max_tokens``, clamped to a
    quarter of the window (the other three quarters are the session's, the tools' and the answer's)."""
    return max(1, min(configured, int(context_length * VERBATIM_SHARE)))


def verbatim_start(sizes: Sequence[int], limit: int) -> int:
    """Where the verbatim part of a backlog of messages costing ``sizes`` begins: the newest messages
    within ``limit`` tokens, and the newest one always (it is bounded on its own, like any message)."""
    start, used = len(sizes), 0
    while start > 0 and (start == len(sizes) or used + sizes[start - 1] <= limit):
        start -= 1
        used += sizes[start]
    return start


#: Seconds without a new part after which an album whose parts come one by one is taken as complete.
ALBUM_WINDOW = 1.0
#: The longest an album's turn waits for its parts, however they trickle in.
ALBUM_MAX_WAIT = 15.0
#: Telegram's most parts in one album.
MAX_ALBUM_PARTS = 10


async def take_album(
    inbox: Inbox,
    entries: ParsedEntries,
    *,
    window: float = ALBUM_WINDOW,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> list[tuple[str, IncomingMessage]]:
    """The other parts of the head's album, ``(raw, message)`` in order, once the album is complete: no new part
    for ``window`` seconds, another message of the chat behind it, or :data:`ALBUM_MAX_WAIT` passed."""
    started = last_change = clock()
    seen = 0
    while True:
        parts, closed = await _album_parts(inbox, entries)
        now = clock()
        if len(parts) != seen:
            seen, last_change = len(parts), now
        if closed or now - last_change >= window or now - started >= ALBUM_MAX_WAIT:
            return parts
        await sleep(min(window / 5, 0.2))


async def _album_parts(inbox: Inbox, entries: ParsedEntries) -> tuple[list[tuple[str, IncomingMessage]], bool]:
    """The parts of the head's album waiting right behind it, and whether something else follows them."""
    head = entries.head
    waiting = await inbox.waiting(head.chat, MAX_ALBUM_PARTS + 1)
    try:
        if not waiting or entries.parse(waiting[0]).update_id != head.update_id:
            return [], True
    except ValueError:
        return [], True
    parts: list[tuple[str, IncomingMessage]] = []
    for raw in waiting[1:]:
        try:
            message = entries.parse(raw)
        except ValueError:
            return parts, True
        if message.album != head.album:
            return parts, True
        parts.append((raw, message))
    return parts, False
