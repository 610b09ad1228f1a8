"""Who admins allowed and blocked from the chat, shared by every process: two small sets, read on every message.

    {prefix}:{access}:allowed    set  people an admin allowed (``tg:123``)
    {prefix}:{access}:blocked    set  people an admin blocked

The configuration's lists are the floor (:mod:`gateway.config.access`); these sets hold what admins added, so a
change is seen by every process at the next message, and outlives restarts.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.store.channel import RedisChannel
from gateway.store.keys import ChatKeys, check_key_part, text_of


@dataclass(frozen=True)
class AdminChanges:
    """What admins allowed and blocked."""

    allowed: frozenset[str] = frozenset()
    blocked: frozenset[str] = frozenset()


class AccessLists:
    """The people admins allowed and blocked."""

    def __init__(self, channel: RedisChannel, prefix: str) -> None:
        self.channel = channel
        keys = ChatKeys(check_key_part("prefix", prefix), "access")
        self.allowed_key, self.blocked_key = f"{keys.base}:allowed", f"{keys.base}:blocked"

    async def read(self) -> AdminChanges:
        allowed, blocked = await self.channel.call_in_order(
            ("SMEMBERS", self.allowed_key), ("SMEMBERS", self.blocked_key)
        )
        return AdminChanges(frozenset(map(text_of, allowed)), frozenset(map(text_of, blocked)))

    async def allow(self, person: str) -> None:
        """Allow ``person`` (and unblock them)."""
        await self.channel.call_in_order(("SADD", self.allowed_key, person), ("SREM", self.blocked_key, person))

    async def block(self, person: str) -> None:
        await self.channel.call_in_order(("SADD", self.blocked_key, person), ("SREM", self.allowed_key, person))

    async def unblock(self, person: str) -> bool:
        """Whether ``person`` was blocked by an admin (one blocked in the configuration stays blocked)."""
        return bool(await self.channel.call("SREM", self.blocked_key, person))
