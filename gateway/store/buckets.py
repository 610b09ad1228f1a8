"""The send budget's token buckets in Redis: keys, and the scripts that take, refund, pause and read them.

A bucket is one hash; its key carries the bucket's scope as the Redis Cluster hash tag, so a chat's
buckets live on the slot of that chat's other keys (:meth:`gateway.store.keys.ChatKeys.budget`)::

    {prefix}:{<tag>}:budget:<name>     hash  tokens, ts, blocked_until (server microseconds)

e.g. ``fg:{tg:-100123}:budget:chat`` and ``fg:{tg:-100123}:budget:group`` for a Telegram group and
``fg:{tg:bot}:budget:bot`` for the bot-wide bucket. ``tokens`` is the bucket's content as of ``ts``;
it refills at ``per_second`` up to ``capacity``. A missing hash is a full bucket, which is why a
hash may expire once it would have refilled: every write sets PEXPIRE to the moment the bucket is
full again (after any pause) plus :data:`EXPIRY_MARGIN_MS`, so buckets of dead chats go away.

Every call here is one script (``bucket_*.lua``) on the buckets of ONE hash tag, so it is atomic
and runs on one cluster slot; every decision uses that server's clock (``TIME`` inside the
script). Which buckets a send needs, and what to do when one slot refuses, is the send budget's
(:mod:`gateway.delivery.budget`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

from gateway.store import scripts
from gateway.store.channel import RedisChannel
from gateway.store.keys import ChatKeys
from gateway.store.routes import run

#: How long after a bucket would be full again its hash is kept; a full bucket and a missing hash
#: read the same, so this only covers rounding.
EXPIRY_MARGIN_MS = 500


class Shape(Protocol):
    """A bucket's shape as the scripts take it (:class:`gateway.delivery.budget.Limit` is one)."""

    @property
    def capacity(self) -> float: ...

    @property
    def per_second(self) -> float: ...

    @property
    def preview_reserve(self) -> float: ...


class TokenBuckets:
    """The buckets under one key prefix; each call names the keys of one hash tag and their shapes."""

    def __init__(self, channel: RedisChannel, prefix: str) -> None:
        self.channel = channel
        self.prefix = prefix

    def key(self, tag: str, name: str) -> str:
        """The hash of bucket ``name`` under hash tag ``tag``: ``{prefix}:{<tag>}:budget:<name>``."""
        return ChatKeys(self.prefix, tag).budget(name)

    async def take(self, keys: Sequence[str], shapes: Sequence[Shape], *, preview: bool) -> float:
        """One token from every bucket, or none: 0.0 when granted, else the seconds until all could
        grant. A preview needs ``1 + preview_reserve`` tokens (and takes one), a final one."""
        args: list[str | int] = [EXPIRY_MARGIN_MS, "preview" if preview else "final"]
        for shape in shapes:
            args += [_number(shape.capacity), _number(shape.per_second), _number(shape.preview_reserve)]
        return int(await run(scripts.BUCKET_TAKE, self.channel, keys, args)) / 1_000_000

    async def refund(self, keys: Sequence[str], shapes: Sequence[Shape]) -> None:
        """Give each bucket back the token it gave to a send another slot refused (not to a bucket
        paused since, nor past its capacity)."""
        await run(scripts.BUCKET_REFUND, self.channel, keys, [EXPIRY_MARGIN_MS, *_refill_args(shapes)])

    async def pause(self, keys: Sequence[str], shapes: Sequence[Shape], seconds: float) -> None:
        """Empty the buckets for ``seconds`` from when Redis runs this (a longer pause stands), then at
        most one token."""
        pause_us = math.ceil(seconds * 1_000_000)
        await run(scripts.BUCKET_PAUSE, self.channel, keys, [EXPIRY_MARGIN_MS, pause_us, *_refill_args(shapes)])

    async def peek(self, key: str, shape: Shape) -> tuple[float, float]:
        """The tokens the bucket holds now and the seconds its pause still lasts (writes nothing)."""
        tokens, paused_us = await run(scripts.BUCKET_PEEK, self.channel, [key], _refill_args([shape]))
        return float(tokens), int(paused_us) / 1_000_000


def _refill_args(shapes: Sequence[Shape]) -> list[str]:
    args: list[str] = []
    for shape in shapes:
        args += [_number(shape.capacity), _number(shape.per_second)]
    return args


def _number(value: float) -> str:
    return repr(float(value))
