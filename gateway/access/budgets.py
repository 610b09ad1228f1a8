"""One turn's model calls, metered against the budgets of the person who sent its message and of its chat.

Every call (:class:`agent.metering.MeteredModel`) reserves its worst case against each budget that applies — the
prompt as counted plus every output token it may write, in dollars at the model's list price (cache writes at
their higher price) and in tokens — and settles to what the provider reported. A call is admitted while what is
spent and reserved stays under the limit, so the one that crosses it is the last: all processes together overspend
by one call's reservation at most. When only reservations of calls in flight fill the budget, a call waits for
them to settle rather than be refused. A budget that is spent refuses the call
(:class:`~agent.metering.BudgetExceeded`): the turn keeps the message and says, once per chat and period, what was
spent and when it resets. Crossing a share of a budget (``warn_at``) adds a line above the reply,
once per period.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from agent.metering import BudgetExceeded, settled
from agent.pricing import UnknownPrice, cost, price_for, transcription_usd
from agent.usage import Usage
from gateway.config.access import BudgetLimit, BudgetSettings, period_bounds
from gateway.media.errors import MediaError
from gateway.media.transcribe import HeardTally, Transcriber
from gateway.platforms.base import IncomingMessage
from gateway.store.spend import Spend, SpendStore

log = logging.getLogger(__name__)

#: Seconds a period's records are kept after it ends (``/usage`` of yesterday, a late settlement).
KEEP_AFTER_SECONDS = 86_400
#: A call finding the budget held by calls in flight (not spent) asks again this often, for at most this long.
HELD_POLL_SECONDS = 0.2
HELD_WAIT_SECONDS = 30.0


@dataclass(frozen=True)
class Held:
    """One budget's reservation for a call in flight."""

    subject: str
    who: str
    limit: BudgetLimit
    period: str
    ends: datetime
    reservation: str


def subjects(message: IncomingMessage, budgets: BudgetSettings) -> list[tuple[str, str, BudgetLimit]]:
    """``(subject, who in words, limit)`` of each budget the message's calls count against."""
    found = []
    if budgets.per_user is not None and message.user_id:
        found.append((f"user:{message.platform}:{message.user_id}", "your", budgets.per_user))
    if budgets.per_chat is not None:
        found.append((f"chat:{message.chat}", "this chat's", budgets.per_chat))
    return found


def worst_usd(model: str, prompt_tokens: int, max_output_tokens: int) -> float:
    """The most a call may cost at list prices (0 for a model the pricing table does not know)."""
    price = price_for(model)
    if price is None:
        return 0.0
    per_prompt_token = max(price.input, price.cache_write_5m, price.cache_write_1h)
    return float(per_prompt_token * prompt_tokens + price.output * max_output_tokens) / 1_000_000


def spent_usd(usage: Usage | None, model: str, cache_ttl: str) -> float:
    if usage is None:
        return 0.0
    try:
        return float(cost(usage, model, cache_ttl))
    except UnknownPrice:
        return 0.0


class BudgetUsedUp(BudgetExceeded):
    """A budget with no room left until its period ends (``ends``), which a refusal can name as a time rather
    than only in the notice's words."""

    def __init__(self, notice: str, key: str, ends: datetime) -> None:
        super().__init__(notice, key)
        self.ends = ends


class ChatMeter:
    """``agent.metering.Meter`` for one turn (see the module docstring); ``notes`` get the warnings."""

    def __init__(
        self,
        store: SpendStore,
        budgets: BudgetSettings,
        message: IncomingMessage,
        *,
        cache_ttl: str,
        notes: list[str],
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.store = store
        self.budgets = budgets
        self.subjects = subjects(message, budgets)
        self.cache_ttl = cache_ttl
        self.notes = notes
        self.clock = clock
        self.sleep = sleep

    @property
    def active(self) -> bool:
        """Whether any budget applies to this turn's calls."""
        return bool(self.subjects)

    async def reserve(self, model: str, prompt_tokens: int, max_output_tokens: int) -> list[Held]:
        """A model call's worst case reserved against every budget (see :meth:`reserve_amount`)."""
        return await self.reserve_amount(
            worst_usd(model, prompt_tokens, max_output_tokens), prompt_tokens + max_output_tokens
        )

    async def reserve_amount(self, usd: float, tokens: int) -> list[Held]:
        """Every budget's reservation, asked for at once; when one refuses, the others let go and it is raised."""
        now = datetime.fromtimestamp(self.clock(), UTC)
        tasks = [
            asyncio.ensure_future(self._reserve(subject, who, limit, now, usd, tokens))
            for subject, who, limit in self.subjects
        ]
        try:
            await asyncio.gather(*tasks, return_exceptions=True)
        except BaseException:  # stopped while reserving: what was reserved is let go, nothing held for nothing
            for task in tasks:
                task.cancel()
            await settled(self.settle_amount(_granted(tasks), 0.0, 0))
            raise
        held = _granted(tasks)
        failure = next((task.exception() for task in tasks if task.exception() is not None), None)
        if failure is not None:
            await settled(self.settle_amount(held, 0.0, 0))  # the budgets that did reserve let go
            raise failure
        return held

    async def _reserve(
        self, subject: str, who: str, limit: BudgetLimit, now: datetime, usd: float, tokens: int
    ) -> Held:
        period, ends = period_bounds(now, limit.period, self.budgets.timezone)
        keep = (ends - now).total_seconds() + KEEP_AFTER_SECONDS
        waited = 0.0
        while True:
            reservation, spent = await self.store.reserve(
                subject,
                period,
                usd=usd,
                tokens=tokens,
                usd_limit=limit.usd,
                token_limit=limit.tokens,
                keep_seconds=keep,
            )
            if reservation is not None:
                return Held(subject, who, limit, period, ends, reservation)
            if _used_up(limit, spent):
                raise BudgetUsedUp(over_budget(who, limit, spent.usd, spent.tokens, ends), f"{subject}:{period}", ends)
            if waited >= HELD_WAIT_SECONDS:  # not spent, only held: said each time, never as "used up"
                raise BudgetExceeded(
                    f"⏳ {who.capitalize()} budget is held by replies still being written; "
                    "your message is saved: ask again in a moment."
                )
            # Only calls in flight hold the rest of the budget: once they settle to what they really cost there
            # is room again, so wait for them rather than refuse a budget that is not spent.
            await self.sleep(HELD_POLL_SECONDS)
            waited += HELD_POLL_SECONDS

    async def settle(self, handle: object, model: str, usage: Usage | None, *, whole: bool = False) -> None:
        tokens = usage.prompt_tokens + usage.completion_tokens if usage is not None else 0
        await self.settle_amount(handle, spent_usd(usage, model, self.cache_ttl), tokens, whole=whole)

    async def settle_amount(self, handle: object, usd: float, tokens: int, *, whole: bool = False) -> None:
        """Each reservation settled to what the call cost (``whole``: what it reserved), warnings given."""
        assert isinstance(handle, list)
        now = datetime.now(UTC)

        async def one(held: Held) -> None:
            keep = max((held.ends - now).total_seconds() + KEEP_AFTER_SECONDS, KEEP_AFTER_SECONDS)
            spent = await self.store.settle(
                held.subject, held.period, held.reservation, usd=usd, tokens=tokens, keep_seconds=keep, whole=whole
            )
            await self._warn(held, spent.usd, spent.tokens)

        await asyncio.gather(*(one(held) for held in handle))

    async def _warn(self, held: Held, usd: float, tokens: int) -> None:
        limit = held.limit
        used = max(usd / limit.usd if limit.usd else 0.0, tokens / limit.tokens if limit.tokens else 0.0)
        for percent in reversed(self.budgets.warn_at):
            if used * 100 >= percent:
                if await self.store.first_warning(held.subject, held.period, percent):
                    self.notes.append(
                        f"ℹ️ {percent}% of {held.who} {_period_word(limit)} budget is used "
                        f"({budget_amount(limit, usd, tokens)}); it resets {reset_time(held.ends)}."
                    )
                return


def _used_up(limit: BudgetLimit, spent: Spend) -> bool:
    """Whether what is spent (not what calls in flight hold) reaches the limit."""
    return (limit.usd is not None and spent.usd >= limit.usd) or (
        limit.tokens is not None and spent.tokens >= limit.tokens
    )


def over_budget(who: str, limit: BudgetLimit, usd: float, tokens: int, ends: datetime) -> str:
    """The reply when a budget has no room left: what was spent, of what, and when it resets."""
    return (
        f"⛔ {who.capitalize()} {_period_word(limit)} budget is used up ({budget_amount(limit, usd, tokens)}). "
        f"Your message is saved; I can answer again {reset_time(ends)}."
    )


def _period_word(limit: BudgetLimit) -> str:
    return {"day": "daily", "week": "weekly", "month": "monthly"}[limit.period]


def budget_amount(limit: BudgetLimit, usd: float, tokens: int) -> str:
    parts = []
    if limit.usd is not None:
        parts.append(f"${usd:.4f} of ${limit.usd:.2f}")
    if limit.tokens is not None:
        parts.append(f"{tokens:,} of {limit.tokens:,} tokens")
    return ", ".join(parts)


def reset_time(ends: datetime) -> str:
    return f"at {ends.strftime('%H:%M')} {ends.tzname()} on {ends.strftime('%a %d %b')}"


def _granted(tasks: list[asyncio.Future[Held]]) -> list[Held]:
    """The reservations of the tasks that got one."""
    return [task.result() for task in tasks if task.done() and not task.cancelled() and task.exception() is None]


class MeteredTranscriber:
    """A transcriber whose every transcription counts against the turn's budgets: reserved once at the model's
    price for the whole audio before anything is sent, settled after to what the endpoint heard — the audio's
    price as reserved when it went whole (the endpoint does not say what it billed), the seconds of the pieces it
    took when a voice too long for it went in pieces (a refused request costs nothing). Refused by a budget, it
    raises a :class:`~gateway.media.errors.MediaError` that tells the person why it was not transcribed."""

    def __init__(self, transcriber: Transcriber, meter: ChatMeter) -> None:
        self.transcriber = transcriber
        self.meter = meter
        self.model = transcriber.model

    async def transcribe(self, data: bytes, *, name: str, mime: str, seconds: float = 0.0) -> str:
        usd = transcription_usd(self.model, seconds or len(data) / LOWEST_BYTES_PER_SECOND)
        try:
            held = await self.meter.reserve_amount(usd, 0)
        except BudgetExceeded as over:
            raise MediaError(f"it was not transcribed: {over.notice.lstrip('⛔⏳ ')}") from over
        tally = HeardTally()
        try:
            words = await self.transcriber.transcribe(data, name=name, mime=mime, seconds=seconds, tally=tally)
        except MediaError:  # refused or failed: only the pieces heard before are billed
            await settled(self.meter.settle_amount(held, self._heard_usd(tally, usd), 0))
            raise
        except BaseException:  # stopped while it was being heard: what was sent is paid for
            await settled(self.meter.settle_amount(held, self._heard_usd(tally, usd, in_flight=True), 0))
            raise
        await settled(self.meter.settle_amount(held, self._heard_usd(tally, usd), 0))
        return words

    def _heard_usd(self, tally: HeardTally, whole_usd: float, *, in_flight: bool = False) -> float:
        """What the endpoint heard costs: ``whole_usd`` (the reservation) when the voice went whole unmeasured,
        else its seconds in pieces (with the request in flight when stopped)."""
        sending = tally.sending if in_flight else 0.0
        if tally.seconds is None or sending is None:
            return whole_usd
        return transcription_usd(self.model, tally.seconds + sending)


#: Bytes a second of the most compressed voice takes (Opus at 16 kbit/s): an audio whose length is not known is
#: priced as if it were that long, never less.
LOWEST_BYTES_PER_SECOND = 2_000
