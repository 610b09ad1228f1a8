"""Spending against budgets, shared by every process: a model call's worst case is reserved before it is made and
settled to what it cost after (``spend_reserve.lua``, ``spend_settle.lua``: one atomic step each).

Each budget's subject and period has two hashes beside each other (one hash tag per subject, so a cluster keeps
them on one slot)::

    {prefix}:{<subject>}:spent:<period>      hash  spent_usd, spent_tokens, reserved_usd, reserved_tokens
                                                   (dollars in millionths), warned_<percent> (a warning given)
    {prefix}:{<subject>}:reserved:<period>   hash  reservation id -> "<usd> <tokens> <expiry ms>"
    {prefix}:{<subject>}:reserved:<period>:settled   set  the reservations settled (a settlement counts once)

``<subject>`` is ``user:tg:42`` or ``chat:tg:-100123``; ``<period>`` names the day, week or month in the budget's
time zone (``2026-12-04``, ``2026-W49``, ``2026-12``), so a new period starts from nothing. A reservation that is
never settled (its process died) is let go after ``hold`` seconds. The keys expire a day after the period ends.

For the operator's list of who spent what, each settlement also adds to two sorted sets of the period (written after
the settlement, not with it: they are for reading, the budget is the hashes above)::

    {prefix}:{spend}:<kind>:<period>:usd     zset  subject -> micro-dollars spent
    {prefix}:{spend}:<kind>:<period>:tokens  zset  subject -> tokens spent
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

from gateway.store import scripts
from gateway.store.channel import RedisChannel
from gateway.store.keys import ChatKeys, check_key_part, text_of
from gateway.store.routes import run

#: Dollars are kept in millionths (integers: Redis adds them exactly).
MICRO = 1_000_000
#: Seconds a reservation holds without being settled (a model call takes minutes at most).
HOLD_SECONDS = 900


@dataclass(frozen=True)
class Spend:
    """What a subject spent in a period, and what is reserved for calls in flight."""

    usd: float = 0.0
    tokens: int = 0
    reserved_usd: float = 0.0
    reserved_tokens: int = 0


class SpendStore:
    """Every subject's spending, per period."""

    def __init__(self, channel: RedisChannel, prefix: str) -> None:
        self.channel = channel
        self.prefix = check_key_part("prefix", prefix)

    def _keys(self, subject: str, period: str) -> list[str]:
        keys = ChatKeys(self.prefix, check_key_part("subject", subject))
        return [keys.spent(check_key_part("period", period)), keys.reserved(period)]

    async def reserve(
        self,
        subject: str,
        period: str,
        *,
        usd: float,
        tokens: int,
        usd_limit: float | None,
        token_limit: int | None,
        keep_seconds: float,
    ) -> tuple[str | None, Spend]:
        """Reserve a call's worst case; ``(reservation id, what was spent before)``, the id None when refused."""
        reservation = secrets.token_hex(6)
        admitted, spent_usd, spent_tokens, reserved_usd, reserved_tokens = await run(
            scripts.SPEND_RESERVE,
            self.channel,
            self._keys(subject, period),
            [
                reservation,
                _micro(usd),
                max(0, tokens),
                -1 if usd_limit is None else _micro(usd_limit),
                -1 if token_limit is None else token_limit,
                int(time.time() * 1000),
                HOLD_SECONDS * 1000,
                int(keep_seconds * 1000),
            ],
        )
        spent = Spend(int(spent_usd) / MICRO, int(spent_tokens), int(reserved_usd) / MICRO, int(reserved_tokens))
        return (reservation if int(admitted) else None), spent

    async def settle(
        self,
        subject: str,
        period: str,
        reservation: str,
        *,
        usd: float,
        tokens: int,
        keep_seconds: float,
        whole: bool = False,
    ) -> Spend:
        """Let the reservation go and add what the call cost (``whole``: what was reserved); what is spent now. A
        reservation settled before is not settled again (a settlement sent twice counts once)."""
        spent_usd, spent_tokens = await run(
            scripts.SPEND_SETTLE,
            self.channel,
            [*self._keys(subject, period), self._settled(subject, period)],
            [reservation, _micro(usd), max(0, tokens), int(keep_seconds * 1000), 1 if whole else 0],
        )
        by_usd, by_tokens = self._index(subject.partition(":")[0], period)
        await self.channel.call_in_order(
            ("ZADD", by_usd, "GT", int(spent_usd), subject),
            ("ZADD", by_tokens, "GT", int(spent_tokens), subject),
            ("PEXPIRE", by_usd, int(keep_seconds * 1000)),
            ("PEXPIRE", by_tokens, int(keep_seconds * 1000)),
        )
        return Spend(int(spent_usd) / MICRO, int(spent_tokens))

    def _settled(self, subject: str, period: str) -> str:
        return f"{self._keys(subject, period)[1]}:settled"

    def _index(self, kind: str, period: str) -> tuple[str, str]:
        base = ChatKeys(self.prefix, "spend").base
        return f"{base}:{check_key_part('kind', kind)}:{period}:usd", f"{base}:{kind}:{period}:tokens"

    async def ranking(self, kind: str, period: str, *, by: str = "usd", limit: int = 100) -> list[tuple[str, Spend]]:
        """The ``limit`` subjects of ``kind`` (``user``, ``chat``) that spent most in ``period``, by dollars or
        tokens."""
        index = self._index(kind, period)[0 if by == "usd" else 1]
        subjects = [text_of(value) for value in await self.channel.call("ZREVRANGE", index, 0, limit - 1)]
        return [(subject, await self.spent(subject, period)) for subject in subjects]

    async def spent(self, subject: str, period: str) -> Spend:
        raw = await self.channel.call(
            "HMGET", self._keys(subject, period)[0], "spent_usd", "spent_tokens", "reserved_usd", "reserved_tokens"
        )
        usd, tokens, reserved_usd, reserved_tokens = (int(value or 0) for value in raw)
        return Spend(usd / MICRO, tokens, reserved_usd / MICRO, reserved_tokens)

    async def first_warning(self, subject: str, period: str, percent: int) -> bool:
        """Whether the warning at ``percent`` of the budget is given now for the first time in the period."""
        return bool(await self.channel.call("HSETNX", self._keys(subject, period)[0], f"warned_{percent}", 1))


def _micro(usd: float) -> int:
    return max(0, round(usd * MICRO))
