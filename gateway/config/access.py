"""``access:`` — who may spend the owner's tokens: admins, allowed and blocked people, budgets per person and chat.

People are named ``<platform>:<user id>`` (``tg:123456789``, ``dc:80351110224678912``, ``local:local``). The lists
here are the floor: admins add to ``allowed`` and ``blocked`` from the chat (``/allow``, ``/block``,
``/unblock``), kept in Redis for every process; nothing an admin does removes what the file says. With anyone
allowed (here or by an admin), only they and the admins are answered; a blocked person's messages are stored and
never answered.

A budget is in dollars (the pricing table's list prices) and/or tokens, per day, week or month in one
time zone (``budgets.timezone``, so "a day" ends at the owner's midnight). Every model call a message causes
counts — the agent's requests, the summarizer's compactions — reserved at its worst case before it is made and
settled to its cost after, in Redis, so every process of a cluster sees the same spend.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from agent.settings import StrictModel
from gateway.config.errors import require

Period = Literal["day", "week", "month"]


class BudgetLimit(StrictModel):
    """One budget: dollars and/or tokens a period."""

    usd: float | None = Field(None, gt=0)
    tokens: int | None = Field(None, ge=1)
    period: Period = "day"

    @model_validator(mode="after")
    def _something(self) -> BudgetLimit:
        if self.usd is None and self.tokens is None:
            require([("usd", "set usd, tokens or both")])
        return self


class BudgetSettings(StrictModel):
    """``access.budgets`` — what one person, and one chat, may spend a period."""

    per_user: BudgetLimit | None = None
    per_chat: BudgetLimit | None = None
    timezone: str = "UTC"
    #: Shares of a budget (percent) at which the person is told how much is left, once a period each.
    warn_at: list[int] = Field(default_factory=lambda: [75, 90])

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError, OSError) as error:  # OSError: a name no file can have
            raise PydanticCustomError(
                "timezone", "must be an IANA time zone such as Europe/Berlin, got {value!r}", {"value": value}
            ) from error
        return value

    @field_validator("warn_at")
    @classmethod
    def _percentages(cls, value: list[int]) -> list[int]:
        if any(not 0 < percent < 100 for percent in value):
            raise PydanticCustomError("percent", "must hold percentages between 1 and 99", {})
        return sorted(set(value))


#: A person on a platform: ``tg:123456789``.
Person = Annotated[str, Field(pattern=r"^(tg|dc|web|local|api):[^\s:]+$")]


class AccessSettings(StrictModel):
    """``access:`` — who administers the bot, who it answers, and what they may spend."""

    admins: list[Person] = Field(default_factory=list)
    allowed: list[Person] = Field(default_factory=list)
    blocked: list[Person] = Field(default_factory=list)
    budgets: BudgetSettings = Field(default_factory=BudgetSettings)
    #: Messages one person may have answered a minute (a burst of that many, refilled evenly); null: no limit.
    messages_per_minute: float | None = Field(None, gt=0)


def period_bounds(now: datetime, period: Period, zone: str) -> tuple[str, datetime]:
    """The period ``now`` falls in, in ``zone``: its name (``2026-12-04``, ``2026-W49``, ``2026-12``) and when
    the next one begins (aware, in ``zone``)."""
    local = now.astimezone(ZoneInfo(zone))
    day = local.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        return day.strftime("%Y-%m-%d"), _at_midnight(day + timedelta(days=1))
    if period == "week":
        start = day - timedelta(days=day.weekday())
        year, week, _ = start.isocalendar()
        return f"{year}-W{week:02d}", _at_midnight(start + timedelta(days=7))
    first = day.replace(day=1)
    following = (first + timedelta(days=32)).replace(day=1)
    return first.strftime("%Y-%m"), _at_midnight(following)


def _at_midnight(moment: datetime) -> datetime:
    """Midnight of ``moment``'s date in its zone (a day across a clock change is not 24 hours long)."""
    return datetime(moment.year, moment.month, moment.day, tzinfo=moment.tzinfo)
