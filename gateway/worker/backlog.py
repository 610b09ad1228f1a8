"""Which waiting messages a turn takes in with its own (``gateway.coalesce_backlog``).

After a night offline a chat may hold hundreds of messages; answering each alone costs a
model call apiece and replies to questions the next message already changed. A turn
therefore takes in the consecutive messages behind its head, up to a count. A command ends
the run (it is handled alone, in order), and messages at the end that ask for no reply wait
for their own step, so the reply answers the last message that asked for one. How much of
what it takes in the request carries word for word is :mod:`gateway.worker.admission`'s to say.
"""

from __future__ import annotations

from gateway.commands import parse as parse_command
from gateway.platforms.base import IncomingMessage
from gateway.store.inbox import Inbox


def is_command(message: IncomingMessage) -> bool:
    """Whether the message is a chat command the gateway answers itself (not a turn for the model)."""
    return message.respond and parse_command(message.text.strip()) is not None


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
        if is_command(message):
            break
        taken.append((raw, message))
    while taken and not taken[-1][1].respond:
        taken.pop()
    return taken
