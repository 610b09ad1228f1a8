"""One send budget for every gateway process: token buckets in Redis.

Telegram and Discord ban a bot that sends too fast, and they count the bot's sends, not one
process's: several processes each keeping its own budget were flood-banned from a group for two
hours. So the buckets live in Redis and every process draws from the same ones.

Buckets in Redis
----------------
Each bucket is a hash under the hash tag of its scope (a chat's buckets on that chat's slot), taken,
refunded, paused and read by the store's scripts (:mod:`gateway.store.buckets`: the key layout,
the refill and the expiry). This module decides which buckets a send needs and how long to wait.

Time
----
Every decision uses the clock of the Redis server holding the bucket (``TIME`` inside the
script), so processes with skewed clocks agree. A token is granted at the moment Redis runs the
script; a refusal answers the seconds from that moment until the bucket could grant, and a caller
that sleeps that long after the reply arrived wakes at or after that moment (only clock rate
drift matters). Another process may take the token first; :meth:`SendBudget.take` then retries.
On a Redis Cluster each bucket follows its own node's clock, which is consistent for that bucket.

Priorities
----------
``final`` (a reply's real messages) needs one token. ``preview`` (a streaming draft or edit) needs
``1 + preview_reserve`` tokens and takes one, so a preview never takes a bucket below its reserve
and the finals always find it. Previews are meant for :meth:`SendBudget.try_take`, which answers at
once; a refused preview is dropped (the caller merges it into its next frame), never queued.
Finals wait in :meth:`SendBudget.take`; because a final is served as soon as one token is back and
a preview only once ``1 + reserve`` are, waiting finals go before previews.

Several buckets, several slots
------------------------------
A send usually needs several buckets (chat, group, bot). Buckets of one hash tag are taken in
one script, all or nothing. Buckets of different tags live on different slots (a Lua script may
touch one slot only), so :meth:`SendBudget.try_take` runs one script per tag, all at once (one
round trip on the pipelined channel), and when any of them refuses it *refunds* the tokens the
others gave. Refund rather than check-then-take: a granted send, the usual case, costs one round
trip instead of two, and a read-only check would race anyway. A refund restores a bucket exactly
(refill is linear and capped, so "take, refill, give back one, cap" equals "refill, cap"); a
bucket paused in between is not given the token back (the pause set its content). The cost is a
moment (one round trip) in which the refunded bucket looks one token poorer to other senders, and a
process that dies between take and refund loses that token until the refill returns it
(1 / per_second seconds) — it can only ever send less, never more, than the limit.

Pauses
------
:meth:`SendBudget.pause` is a platform's 429 ``retry_after``: every process sees the bucket empty
until then, finals included. When the pause ends the bucket holds at most one token (the retried
send), so the next burst does not hit the platform straight after its 429; it refills from there.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from gateway.store.buckets import TokenBuckets
from gateway.store.channel import RedisChannel
from gateway.store.keys import check_key_part

Priority = Literal["final", "preview"]
PRIORITIES: tuple[Priority, ...] = ("final", "preview")


@dataclass(frozen=True)
class Limit:
    """A token bucket's shape: ``capacity`` sends at once, refilled at ``per_second``.

    Over any window of ``W`` seconds a bucket grants at most ``capacity + per_second * W`` sends,
    so to stay under "N per W" choose ``capacity + per_second * W <= N``. ``preview_reserve``
    tokens are kept for finals: a preview is granted only while the bucket holds
    ``1 + preview_reserve``; it must leave previews a chance (at most ``capacity - 1``).
    """

    capacity: float
    per_second: float
    preview_reserve: float = 1.0

    def __post_init__(self) -> None:
        for name in ("capacity", "per_second", "preview_reserve"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"Limit.{name} must be a finite number, got {value!r}")
        if self.capacity < 1:
            raise ValueError(f"Limit.capacity must be at least 1 (a send costs one token), got {self.capacity!r}")
        if self.per_second <= 0:
            raise ValueError(f"Limit.per_second must be above 0 (a bucket that never refills), got {self.per_second!r}")
        if self.preview_reserve < 0:
            raise ValueError(f"Limit.preview_reserve must be 0 or more, got {self.preview_reserve!r}")
        if self.preview_reserve > self.capacity - 1:
            raise ValueError(
                f"Limit.preview_reserve {self.preview_reserve!r} leaves previews no token in a bucket of capacity "
                f"{self.capacity!r}: a preview needs 1 + preview_reserve tokens; raise capacity or lower the reserve"
            )


# The platforms' published limits, each as a bucket that stays under them over their window.
#: Telegram: about one message per second in a chat, short bursts tolerated.
TELEGRAM_CHAT = Limit(capacity=2, per_second=1.0)
#: Telegram: 20 messages per minute in a group (10 at once + 10 over the minute).
TELEGRAM_GROUP = Limit(capacity=10, per_second=10 / 60)
#: Telegram: about 30 messages per second for the whole bot (5 + 25 in any second).
TELEGRAM_BOT = Limit(capacity=5, per_second=25.0)
#: Discord: 5 messages per 5 seconds in a channel (3 + 2 in any 5 seconds).
DISCORD_CHANNEL = Limit(capacity=3, per_second=0.4)
#: Discord: 50 requests per second for the whole bot (10 + 40 in any second).
DISCORD_GLOBAL = Limit(capacity=10, per_second=40.0)


@dataclass(frozen=True)
class Bucket:
    """One bucket: its scope's hash tag (``"tg:123"``, ``"tg:bot"``), its limit and its name
    within the scope (a group chat has a ``chat`` and a ``group`` bucket under one tag)."""

    key_tag: str
    limit: Limit
    name: str = "send"

    def __post_init__(self) -> None:
        check_key_part("Bucket.key_tag", self.key_tag)
        check_key_part("Bucket.name", self.name)
        if not isinstance(self.limit, Limit):
            raise ValueError(f"Bucket.limit must be a Limit, got {self.limit!r}")


@dataclass(frozen=True)
class BucketState:
    """A bucket as every process sees it now: the sends it would grant at once, and how long a
    platform's 429 still pauses it."""

    bucket: Bucket
    tokens: float
    paused_seconds: float


class SendBudget:
    """The shared send budget: every process builds one on its channel with the same prefix.

    Every process must give a bucket the same :class:`Limit` (limits travel with each call, not
    in Redis); a lowered capacity takes effect at once. ``sleep`` is how :meth:`take` waits for a
    refill: the waits come from Redis, so a test that records them sees what was asked for, not
    what a busy machine made of it.
    """

    def __init__(
        self, channel: RedisChannel, prefix: str = "fg", *, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    ) -> None:
        self.buckets = TokenBuckets(channel, check_key_part("prefix", prefix))
        self.sleep = sleep

    def key(self, bucket: Bucket) -> str:
        """The hash holding ``bucket``: ``{prefix}:{<tag>}:budget:<name>``."""
        return self.buckets.key(bucket.key_tag, bucket.name)

    def _by_tag(self, buckets: Sequence[Bucket]) -> list[list[Bucket]]:
        """The buckets grouped by hash tag (one script each), refusing one bucket named twice."""
        groups: dict[str, list[Bucket]] = {}
        seen: set[str] = set()
        for bucket in buckets:
            if not isinstance(bucket, Bucket):
                raise ValueError(f"expected a Bucket, got {bucket!r}")
            key = self.key(bucket)
            if key in seen:
                raise ValueError(f"bucket {key} is named twice in one send")
            seen.add(key)
            groups.setdefault(bucket.key_tag, []).append(bucket)
        return list(groups.values())

    async def try_take(self, buckets: Sequence[Bucket], *, priority: Priority) -> float:
        """Take one token from every bucket, or none: 0.0 when granted, else the seconds until the
        buckets could grant (answers at once; with no buckets, nothing limits the send)."""
        if priority not in PRIORITIES:
            raise ValueError(f"priority must be one of {PRIORITIES}, got {priority!r}")
        groups = self._by_tag(buckets)
        if not groups:
            return 0.0
        waits = await asyncio.gather(
            *(
                self.buckets.take(self._keys(group), self._limits(group), preview=priority == "preview")
                for group in groups
            ),
            return_exceptions=True,
        )
        granted = [group for group, wait in zip(groups, waits) if not isinstance(wait, BaseException) and wait == 0.0]
        if len(granted) == len(groups):
            return 0.0
        await self._refund(granted)  # some slot refused or failed: the others give their tokens back
        refused: list[float] = []
        for wait in waits:
            if isinstance(wait, BaseException):
                raise wait
            refused.append(wait)
        return max(refused)

    async def take(
        self, buckets: Sequence[Bucket], *, priority: Priority = "final", max_wait: float | None = None
    ) -> bool:
        """Wait until every bucket gives a token (sleeping the reported time, then asking again);
        False, without waiting it out, as soon as the next wait would pass ``max_wait`` seconds."""
        if max_wait is not None and (
            isinstance(max_wait, bool) or not isinstance(max_wait, (int, float)) or not max_wait >= 0
        ):
            raise ValueError(f"max_wait must be None or a number of seconds >= 0, got {max_wait!r}")
        loop = asyncio.get_running_loop()
        deadline = None if max_wait is None else loop.time() + max_wait
        while True:
            wait = await self.try_take(buckets, priority=priority)
            if wait == 0.0:
                return True
            if deadline is not None and loop.time() + wait > deadline:
                return False
            await self.sleep(wait)

    async def pause(self, buckets: Sequence[Bucket], seconds: float) -> None:
        """A platform's 429 ``retry_after``: every process finds these buckets empty for ``seconds``
        from when Redis runs this (finals included), then one token, then the usual refill. A longer
        pause already in place stands; 0 seconds still drains a burst down to one token."""
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not (0 <= seconds < math.inf):
            raise ValueError(f"pause seconds must be a finite number >= 0, got {seconds!r}")
        await asyncio.gather(
            *(self.buckets.pause(self._keys(group), self._limits(group), seconds) for group in self._by_tag(buckets))
        )

    async def peek(self, bucket: Bucket) -> BucketState:
        """The bucket's state now, on its server's clock (writes nothing)."""
        tokens, paused_seconds = await self.buckets.peek(self.key(bucket), bucket.limit)
        return BucketState(bucket, tokens, paused_seconds)

    async def _refund(self, groups: list[list[Bucket]]) -> None:
        if groups:
            await asyncio.gather(*(self.buckets.refund(self._keys(group), self._limits(group)) for group in groups))

    def _keys(self, group: list[Bucket]) -> list[str]:
        return [self.key(bucket) for bucket in group]

    @staticmethod
    def _limits(group: list[Bucket]) -> list[Limit]:
        return [bucket.limit for bucket in group]
