"""The send budget as one reply sees it: which buckets a chat's sends draw from, from the configuration.

A Telegram private chat draws from its chat's bucket and the bot's; a group also from the
group's 20-a-minute bucket (same hash tag as the chat). Each configured rate becomes a
:class:`gateway.delivery.budget.Limit` whose burst plus refill never exceeds the rate in
any window of its length, so the platform's own accounting never sees it broken.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from gateway.config import DeliverySettings
from gateway.delivery.budget import Bucket, Limit, SendBudget
from gateway.platforms.base import IncomingMessage, OpenGate, SendGate


def window_limit(count: float, window_seconds: float, burst_share: float, key: str) -> Limit:
    """``count`` sends per ``window_seconds``: a burst of ``burst_share`` of them, the rest refilled over the window."""
    capacity = count * burst_share
    if capacity < 2:
        raise ValueError(f"{key} = {count:g} leaves a burst of {capacity:g}; a bucket needs room for 2")
    return Limit(capacity=capacity, per_second=(count - capacity) / window_seconds)


class ChatBuckets:
    """The buckets each platform's chats draw from, built once from ``delivery:``."""

    def __init__(self, settings: DeliverySettings) -> None:
        telegram, discord = settings.telegram, settings.discord
        # A burst of 2, refilled at 80% of the rate: no 10-second span sends more than the rate allows either.
        self.telegram_chat = Limit(capacity=2, per_second=telegram.per_chat_per_second * 0.8)
        self.telegram_group = window_limit(
            telegram.per_group_per_minute, 60, 0.5, "delivery.telegram.per_group_per_minute"
        )
        self.telegram_bot = window_limit(telegram.per_bot_per_second, 1, 1 / 6, "delivery.telegram.per_bot_per_second")
        self.discord_channel = window_limit(
            discord.per_channel_per_5_seconds, 5, 0.6, "delivery.discord.per_channel_per_5_seconds"
        )
        self.discord_bot = window_limit(discord.per_bot_per_second, 1, 0.2, "delivery.discord.per_bot_per_second")

    def bot_wide(self, platforms: Iterable[str]) -> list[Bucket]:
        """The bucket every reply of a platform's bot draws from, for each of ``platforms`` that has one."""
        buckets = {"tg": Bucket("tg:bot", self.telegram_bot, "bot"), "dc": Bucket("dc:bot", self.discord_bot, "bot")}
        return [buckets[platform] for platform in platforms if platform in buckets]

    def for_message(self, message: IncomingMessage) -> list[Bucket]:
        """The buckets a reply to ``message`` takes a token from, for every message it sends or edits."""
        tag = message.chat
        if message.platform == "tg":
            buckets = [Bucket(tag, self.telegram_chat, "chat"), Bucket("tg:bot", self.telegram_bot, "bot")]
            if message.chat_id.startswith("-"):  # groups, supergroups and channels have negative ids
                buckets.insert(1, Bucket(tag, self.telegram_group, "group"))
            return buckets
        if message.platform == "dc":
            return [Bucket(tag, self.discord_channel, "channel"), Bucket("dc:bot", self.discord_bot, "bot")]
        return []


class BudgetGate:
    """A :class:`gateway.platforms.base.SendGate` over the shared budget, for one reply's buckets."""

    def __init__(self, budget: SendBudget, buckets: Sequence[Bucket]) -> None:
        self.budget = budget
        self.buckets = list(buckets)

    async def allow_preview(self) -> bool:
        return await self.budget.try_take(self.buckets, priority="preview") == 0.0

    async def await_final(self) -> None:
        await self.budget.take(self.buckets, priority="final")

    async def rate_limited(self, retry_after: float) -> None:
        await self.budget.pause(self.buckets, retry_after)


def gates(budget: SendBudget, settings: DeliverySettings) -> Callable[[IncomingMessage], SendGate]:
    """The runner's gate factory: a :class:`BudgetGate` for platforms with limits, an open gate otherwise."""
    chat_buckets = ChatBuckets(settings)

    def gate(message: IncomingMessage) -> SendGate:
        buckets = chat_buckets.for_message(message)
        return BudgetGate(budget, buckets) if buckets else OpenGate()

    return gate
