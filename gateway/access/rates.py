"""How fast one person may have messages answered (``access.messages_per_minute``): a token bucket per person in
Redis, shared by every process, so a flood from one member of a group is kept without being answered while the
others in the group, and every other chat, are answered as usual. Admins are not limited."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.access.roles import Roles, person_of
from gateway.platforms.base import IncomingMessage
from gateway.store.buckets import TokenBuckets


@dataclass(frozen=True)
class PerPerson:
    """One person's bucket: a burst of ``capacity`` messages, refilled at ``per_second``."""

    capacity: float
    per_second: float
    preview_reserve: float = 0.0


class MessageRate:
    """Whether a person's message may be answered now (one token of their bucket)."""

    def __init__(self, buckets: TokenBuckets, per_minute: float, roles: Roles) -> None:
        self.buckets = buckets
        self.shape = PerPerson(capacity=max(1.0, per_minute), per_second=per_minute / 60)
        self.roles = roles

    async def admits(self, message: IncomingMessage) -> bool:
        person = person_of(message)
        if self.roles.is_admin(person):
            return True
        return await self.buckets.take([self._key(person)], [self.shape], preview=False) == 0.0

    async def seconds_until_admitted(self, message: IncomingMessage) -> float:
        """Seconds until the sender's next message would be answered (0.0: now), taking nothing: a platform that
        must answer at once (the API's 429) asks before it hands the message in, which then takes the token."""
        person = person_of(message)
        if self.roles.is_admin(person):
            return 0.0
        tokens, paused = await self.buckets.peek(self._key(person), self.shape)
        if tokens >= 1 and paused <= 0:
            return 0.0
        return max(paused, (1 - min(tokens, 1.0)) / self.shape.per_second)

    def _key(self, person: str) -> str:
        return self.buckets.key(f"user:{person}", "messages")
