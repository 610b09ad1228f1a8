"""Which waiting messages a turn takes in with its own (``gateway.coalesce_backlog``).

After a night offline a chat may hold hundreds of messages; answering each alone costs a
model call apiece and replies to questions the next message already changed. A turn
therefore takes in the consecutive messages behind its head, up to a count. A command ends
the run (it is handled alone, in order), and messages at the end that ask for no reply wait
for their own step, so the reply answers the last message that asked for one. How much of
what it takes in the request carries word for word is :mod:`gateway.admission`'s to say.
"""

from __future__ import annotations

from gateway.commands import parse as parse_command
from gateway.store.inbox import Inbox
from gateway.platforms.base import IncomingMessage


def is_command(message: IncomingMessage) -> bool:
    """Whether the message is a chat command the gateway answers itself (not a turn for the model)."""
    return message.respond and parse_command(message.text.strip()) is not None


async def take_backlog(inbox: Inbox, head: IncomingMessage, *, max_messages: int) -> list[tuple[str, IncomingMessage]]:
    """The entries waiting behind ``head`` that its turn takes in, ``(raw, message)`` in order."""
    waiting = await inbox.waiting(head.chat, max_messages)
    try:
        if not waiting or IncomingMessage.model_validate_json(waiting[0]).update_id != head.update_id:
            return []
    except ValueError:
        return []
    taken: list[tuple[str, IncomingMessage]] = []
    for raw in waiting[1:]:
        try:
            message = IncomingMessage.model_validate_json(raw)
        except ValueError:
            break  # the unreadable entry gets its own step (and its quarantine)
        if is_command(message):
            break
        taken.append((raw, message))
    while taken and not taken[-1][1].respond:
        taken.pop()
    return taken
