"""A held chat's inbox entries, each handed in raw and walked to its end as a turn.

The runner takes a chat's lock and hands over its entries one by one; here each is parsed once
(an unreadable one goes to the quarantine), run as a :class:`~gateway.worker.turn.Turn`, settled by
:mod:`gateway.worker.failures` when it fails, then delivered and finished, which hands back the
entry that follows. The runner only dispatches chats and drains their inboxes.
"""

from __future__ import annotations

import logging

from gateway.store import Lock
from gateway.worker.backlog import ParsedEntries
from gateway.worker.failures import TurnFailures
from gateway.worker.turn import Turn, TurnParts

log = logging.getLogger(__name__)


class HeldChat:
    """A chat whose lock this worker holds: each inbox entry handed in becomes a turn, run to its end."""

    def __init__(self, parts: TurnParts, chat: str, lock: Lock, *, retry_delay: float) -> None:
        """``retry_delay``: seconds before a failed entry's first retry (see :class:`TurnFailures`)."""
        self.parts = parts
        self.chat, self.lock = chat, lock
        self.failures = TurnFailures(retry_delay)

    async def take(self, raw: str) -> str | None:
        """Handle the inbox entry ``raw`` to its end; the next entry (the same one again to retry it)."""
        try:
            entries = ParsedEntries(raw)
        except ValueError:
            log.error("%s: unreadable inbox entry moved to quarantine: %.200r", self.chat, raw)
            await self.parts.inbox.drop_bad(self.chat, raw)
            return await self.parts.inbox.head(self.chat)
        turn = Turn(self.parts, self.chat, self.lock, entries)
        try:
            outcome = await turn.run()
        except BaseException as error:
            settled = await self.failures.settle(turn, error)
            if settled is None:
                return raw
            outcome = settled
        self.failures.ended(turn)
        await turn.deliver(outcome)
        return await turn.finish(outcome)
