"""A reply shown as messages edited in place (Telegram groups, Discord channels).

The first preview sends a message; later ones edit it. Past the platform's limit the reply
continues in a new message, and earlier messages keep the part they hold — the split of
the non-streaming path applies, and it is stable as text grows, because a chunk's
boundary is chosen within its first ``limit`` units only. The final text edits what
differs, sends what is missing and deletes messages a longer preview needed but the final
reply does not. Every message sent or edited takes a token of the send budget (previews
only while the budget keeps its reserve for finals); a platform's 429 pauses the budget
for every process. The final text goes out under the platform's one retry policy for final
sends (:mod:`gateway.platforms.retry`), as a reply sent whole does. A message whose post
cannot be recorded in the reply's journal (Redis away) is taken down again, since the attempt
that follows could not find it to edit; one recorded but gone from the platform (deleted by a
person) is posted anew by the messenger.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Protocol

from gateway.platforms.base import Journal, PlatformRateLimited, SendGate
from gateway.platforms.retry import SendRetry, budget_pause
from gateway.platforms.split import Units, split_message


class Messenger(Protocol):
    """One chat's message primitives on a platform."""

    async def post(self, text: str, *, index: int) -> str:
        """Send the reply's message at position ``index`` (within the limit); its id. Raises
        :class:`PlatformRateLimited` on a 429. ``index`` counts messages an attempt before a crash posted,
        so a platform that deduplicates posts by position keeps them apart."""
        ...

    async def edit(self, message_id: str, text: str) -> None:
        """Replace a message's text (an edit to the same text is not an error)."""
        ...

    async def delete(self, message_id: str) -> None:
        """Remove a message the reply no longer needs."""
        ...


class EditedReply:
    """A :class:`gateway.platforms.base.Surface` of messages edited in place.

    ``retry`` is the platform's policy for final sends; ``what`` names the reply's messages in its log lines.
    """

    def __init__(
        self,
        messenger: Messenger,
        gate: SendGate,
        *,
        limit: int,
        units: Units,
        retry: SendRetry,
        what: str,
        interval: float = 1.0,
        journal: Journal | None = None,
    ) -> None:
        self.messenger = messenger
        self.retry = retry
        self.what = what
        self.gate = gate
        self.limit = limit
        self.units: Units = units
        self.interval = interval
        self.journal = journal
        #: ``(message id, text shown)`` of each message the reply occupies so far.
        self.messages: list[tuple[str, str]] = []
        self._restored = journal is None

    async def _restore(self) -> None:
        """Take over the messages an attempt before a crash posted, with the text each was last recorded
        showing: one that already shows its final chunk is not edited again (in a group, every edit
        waits for Telegram's 20 messages a minute)."""
        self._restored = True
        recorded = await self.journal.load() if self.journal is not None else {}
        index = 0
        while str(index) in recorded:
            self.messages.append((recorded[str(index)], recorded.get(f"{index}:text", "")))
            index += 1

    def _first_change(self, chunks: list[str]) -> int | None:
        return next(
            (i for i, chunk in enumerate(chunks) if i >= len(self.messages) or self.messages[i][1] != chunk), None
        )

    async def preview(self, text: str) -> bool:
        if not self._restored:
            await self._restore()
        chunks = split_message(text, self.limit, units=self.units)
        index = self._first_change(chunks)
        if index is None:
            return True
        if not await self.gate.allow_preview():
            return False
        try:
            await self._show(index, chunks[index])
        except PlatformRateLimited as limited:
            await self.gate.rate_limited(limited.retry_after)
            return False
        return index == len(chunks) - 1  # an earlier part changed: the next frame shows the rest

    async def finish(self, text: str) -> None:
        if not self._restored:
            await self._restore()
        chunks = split_message(text, self.limit, units=self.units)
        pause = budget_pause(self.gate)
        while (index := self._first_change(chunks)) is not None:
            await self.gate.await_final()
            # retries=0: a transient failure goes back to the delivery's attempts, which enter through the budget again
            await self.retry.run(functools.partial(self._show, index, chunks[index]), self.what, pause=pause, retries=0)
        for message_id, _ in self.messages[len(chunks) :]:  # the final reply is shorter than a preview was
            await self.messenger.delete(message_id)
        del self.messages[len(chunks) :]

    async def _show(self, index: int, chunk: str) -> None:
        facts = {f"{index}:text": chunk}  # a retry does not edit a message that already shows its chunk
        if index < len(self.messages):
            message_id = self.messages[index][0]
            await self.messenger.edit(message_id, chunk)
            self.messages[index] = (message_id, chunk)
        else:
            message_id = await self.messenger.post(chunk, index=index)
            self.messages.append((message_id, chunk))
            facts[str(index)] = message_id  # before the reply goes on: a retry edits it instead of posting again
        if self.journal is None:
            return
        try:
            await self.journal.record(facts)
        except Exception:
            if str(index) in facts:  # posted, but a retry cannot find it (Redis away): not left beside the retry's
                del self.messages[index]
                with contextlib.suppress(Exception):
                    await self.messenger.delete(message_id)
            raise
