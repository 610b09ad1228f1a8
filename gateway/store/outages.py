"""Each chat's outage record in Redis: since when the model provider has been failing the chat.

The record lives beside the chat's other keys (:attr:`gateway.store.keys.ChatKeys.outage`), so
every process agrees on the one notice a chat gets per outage and on when the bound runs out.
What a failure means for the chat (the wait before the next try, the notices) is decided in
:mod:`gateway.outage`; this module only counts.
"""

from __future__ import annotations

from gateway.store import scripts
from gateway.store.channel import RedisChannel
from gateway.store.keys import ChatKeys
from gateway.store.routes import run


class OutageRecords:
    """Per chat: when its outage began and how many tries have failed, one hash each."""

    def __init__(self, channel: RedisChannel, prefix: str) -> None:
        self.channel = channel
        self.prefix = prefix

    def key(self, chat: str) -> str:
        return ChatKeys(self.prefix, chat).outage

    async def failed(
        self, chat: str, *, now: float, started: float, stale_after: float, ttl_seconds: int
    ) -> tuple[float, int]:
        """Count a try begun at ``started`` that failed at ``now``: (since when the outage runs, tries).

        A try begun more than ``stale_after`` seconds after the last failure starts a new outage;
        the record expires ``ttl_seconds`` after its last failure.
        """
        since, tries = await run(
            scripts.OUTAGE_FAILED,
            self.channel,
            [self.key(chat)],
            [repr(now), repr(started), repr(stale_after), ttl_seconds],
        )
        return float(since), int(tries)

    async def ended(self, chat: str) -> None:
        """Forget the chat's outage: its next failure starts a new one."""
        await self.channel.call("DEL", self.key(chat))
