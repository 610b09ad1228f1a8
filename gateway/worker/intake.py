"""Admission: what becomes of a message a platform hands in, before any worker sees it.

Every message is kept (the inbox is the record of what was said), but not every one is answered:
a blocked person, or one not allowed while only some are, is kept unanswered; a person sending
faster than ``access.messages_per_minute`` is kept and told once. A ``/stop`` is signalled at once,
so the chat's running turn ends without waiting for the command's own turn in the inbox; an
``/approve`` or ``/refuse`` (a button press comes as one) is recorded for the turn that waits for it,
in whichever process, and queued only when it answers nothing. Then the message is put in its
chat's inbox and the dispatcher is woken.
"""

from __future__ import annotations

import asyncio
import time

from gateway.access.rates import MessageRate
from gateway.access.roles import Roles, person_of
from gateway.commands.syntax import ANSWERS
from gateway.commands.syntax import parse as parse_command
from gateway.platforms.base import IncomingMessage
from gateway.store.approvals import Approvals
from gateway.store.inbox import Inbox

#: Commands a person's rate limit never holds back: stopping a reply, answering a question the bot asked.
UNLIMITED = ANSWERS | {"stop"}


class Admission:
    """Takes in what the platforms hand over: who is answered, how fast, and the inbox put."""

    def __init__(self, inbox: Inbox, roles: Roles, rate: MessageRate | None, approvals: Approvals) -> None:
        """``rate`` is None when ``access.messages_per_minute`` sets no limit."""
        self.inbox = inbox
        self.roles = roles
        self.rate = rate
        self.approvals = approvals
        #: Set when an entry is put (and by the runner when a slot frees for a waiting chat): the dispatcher
        #: looks again at once instead of at its next poll.
        self.wake = asyncio.Event()

    async def admit(self, message: IncomingMessage) -> bool:
        """Make an incoming message durable; returns once it is safe to acknowledge the platform (False: a
        redelivery of an update already taken in)."""
        if message.respond and not await self.roles.answers(message):
            message = message.model_copy(update={"respond": False})  # blocked, or not allowed: kept, not answered
        command = parse_command(message.text.strip()) if message.respond else None
        name = command[0] if command is not None else None
        if name == "stop":
            await self.inbox.request_stop(message.chat, time.time())
        if command is not None and name in ANSWERS and await self._answered(message, *command):
            return True  # the turn waiting for it goes on; there is nothing to queue
        if message.respond and name not in UNLIMITED and not await self._within_rate(message):
            message = message.model_copy(update={"respond": False, "limited": True})  # too fast: kept, told once
        queued = await self.inbox.put(message)
        self.wake.set()
        return queued

    async def _within_rate(self, message: IncomingMessage) -> bool:
        """Whether the sender may have this message answered now (always, with no limit set); a ``/stop`` or an
        answer never asks, so it is never held back."""
        return self.rate is None or await self.rate.admits(message)

    async def _answered(self, message: IncomingMessage, name: str, argument: str) -> bool:
        """Record ``/approve <id>`` or ``/refuse <id>`` for the turn that waits for it, in whichever process;
        False when it answers nothing open that its sender may answer (the command then says so in its turn)."""
        approval_id = argument.split()[0] if argument else ""
        try:
            answered = await self.approvals.answer(
                message.chat,
                approval_id,
                approved=name == "approve",
                user_id=message.user_id,
                user_name=message.user_name,
                admin=self.roles.is_admin(person_of(message)),
            )
        except ValueError:  # not an id at all
            return False
        return answered == "recorded"
