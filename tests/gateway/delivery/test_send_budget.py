"""The shared send budget on the real test Redis: bursts and refill, the finals' reserve, pauses seen
by every process, no overshoot under concurrent takers, no leaked tokens, hash tags and expiry.

Every budget decision is made on the Redis server's clock (``TIME`` in its scripts), so the bounds
here are stated on that clock too, read before and after what they bound: a reading taken late
only widens the span, so a busy machine can loosen these checks but never fail them. How long
:meth:`SendBudget.take` sleeps is what it was told to (recorded), not what the machine made of it.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from redis.asyncio import Redis
from redis.crc import key_slot

from gateway.delivery.budget import (
    DISCORD_CHANNEL,
    DISCORD_GLOBAL,
    TELEGRAM_BOT,
    TELEGRAM_CHAT,
    TELEGRAM_GROUP,
    Bucket,
    Limit,
    SendBudget,
)
from gateway.store import ChatKeys
from gateway.store.buckets import EXPIRY_MARGIN_MS
from gateway.store.channel import PipelinedConnection
from tests.fakes.redis_time import TICK, redis_seconds, seconds_since, until_gone

CHAT = "tg:-100777"
#: Refills so slowly that nothing comes back during a test.
STILL = 0.001
#: Seconds before a wait that should end soon is given up as hung (a slow machine never gets near it).
PATIENCE = 60.0


class RecordedSleeps(list[float]):
    """The waits :meth:`SendBudget.take` was told to sleep, each recorded, then slept."""

    async def __call__(self, seconds: float) -> None:
        self.append(seconds)
        await asyncio.sleep(seconds)


@pytest_asyncio.fixture
async def other_channel(redis: Redis) -> AsyncIterator[PipelinedConnection]:
    """A second connection, standing for a second gateway process."""
    connection = PipelinedConnection.like(redis)
    try:
        yield connection
    finally:
        await connection.aclose()


@pytest.fixture
def sleeps() -> RecordedSleeps:
    return RecordedSleeps()


@pytest.fixture
def budget(channel: PipelinedConnection, key_prefix: str, sleeps: RecordedSleeps) -> SendBudget:
    return SendBudget(channel, key_prefix, sleep=sleeps)


@pytest.fixture
def other_budget(other_channel: PipelinedConnection, key_prefix: str) -> SendBudget:
    return SendBudget(other_channel, key_prefix)


async def tokens(redis: Redis, budget: SendBudget, bucket: Bucket) -> float:
    return float(await redis.hget(budget.key(bucket), "tokens"))


async def test_a_burst_of_capacity_then_the_refill_rate(
    budget: SendBudget, sleeps: RecordedSleeps, redis: Redis
) -> None:
    bucket = Bucket(CHAT, Limit(capacity=3, per_second=10), "chat")
    began = await redis_seconds(redis)
    for _ in range(3):
        assert await budget.try_take([bucket], priority="final") == 0.0
    wait = await budget.try_take([bucket], priority="final")
    assert wait <= 0.1 + 1e-6  # one token comes back within 1/10 s
    assert wait > 0.0 or await seconds_since(redis, began) >= 0.1  # refused, unless one had come back already

    for _ in range(5):
        assert await budget.take([bucket], max_wait=PATIENCE)
    assert await seconds_since(redis, began) >= 0.5 - TICK  # five more at 10/s: half a second, never less
    assert all(0.0 < wait <= 0.1 + 1e-6 for wait in sleeps)  # each sleep one token's refill, as Redis said


async def test_previews_leave_the_reserve_to_finals(budget: SendBudget, sleeps: RecordedSleeps) -> None:
    bucket = Bucket(CHAT, Limit(capacity=3, per_second=STILL, preview_reserve=1), "chat")
    assert await budget.try_take([bucket], priority="preview") == 0.0  # 3 -> 2
    assert await budget.try_take([bucket], priority="preview") == 0.0  # 2 -> 1
    assert await budget.try_take([bucket], priority="preview") > 0  # the last token is the finals'
    assert await budget.take([bucket], priority="preview", max_wait=0.05) is False
    assert sleeps == []  # refused previews answer at once, they do not wait
    assert await budget.try_take([bucket], priority="final") == 0.0  # 1 -> 0
    assert await budget.try_take([bucket], priority="final") > 0

    reserved = Bucket(CHAT, Limit(capacity=4, per_second=STILL, preview_reserve=2.5), "big")
    assert await budget.try_take([reserved], priority="preview") == 0.0  # 4 -> 3 (needs 3.5)
    assert await budget.try_take([reserved], priority="preview") > 0
    for _ in range(3):
        assert await budget.try_take([reserved], priority="final") == 0.0


async def test_a_waiting_final_goes_before_previews(budget: SendBudget, other_budget: SendBudget) -> None:
    """A final is granted as soon as one token is back; a preview here needs the bucket full (1 + 4 tokens, a
    second of refill), so only a final that overslept its wait by most of a second could let one in."""
    bucket = Bucket(CHAT, Limit(capacity=5, per_second=5, preview_reserve=4), "chat")
    for _ in range(5):
        assert await budget.try_take([bucket], priority="final") == 0.0
    previews = 0
    finals_done = asyncio.Event()

    async def preview_spam() -> None:
        nonlocal previews
        while not finals_done.is_set():
            previews += await other_budget.try_take([bucket], priority="preview") == 0.0
            await asyncio.sleep(0.005)

    spam = asyncio.create_task(preview_spam())
    for _ in range(3):  # every final gets the token as soon as one is back, before previews see five
        assert await budget.take([bucket], max_wait=PATIENCE)
    finals_done.set()
    await spam
    assert previews == 0


async def test_a_pause_blocks_every_process_then_lets_them_go(
    budget: SendBudget, other_budget: SendBudget, redis: Redis
) -> None:
    held = Bucket(CHAT, Limit(capacity=5, per_second=1), "chat")
    assert await other_budget.try_take([held], priority="final") == 0.0
    paused = await redis_seconds(redis)
    await budget.pause([held], 30)  # the platform said retry_after=30 to one process

    for each in (budget, other_budget):
        wait = await each.try_take([held], priority="final")
        assert 30 - await seconds_since(redis, paused) - TICK <= wait <= 30 + TICK  # finals too, every connection
    assert await other_budget.take([held], max_wait=1) is False  # refused at once: the pause is longer
    await budget.pause([held], 0.1)  # a shorter pause does not cut the longer one short
    wait = await other_budget.try_take([held], priority="final")
    assert wait >= 30 - await seconds_since(redis, paused) - TICK

    retried = Bucket(CHAT, Limit(capacity=5, per_second=1), "retried")
    assert await other_budget.try_take([retried], priority="final") == 0.0
    paused = await redis_seconds(redis)
    await budget.pause([retried], 0.3)
    assert await other_budget.take([retried], max_wait=PATIENCE)  # sleeps the pause out, then goes
    assert await seconds_since(redis, paused) >= 0.3 - TICK  # not before the pause ended
    # after the pause one send goes (the retried one), not the burst the bucket held before: the next waits for
    # a whole token's refill from the pause's end (0.3 s after `paused`), less what has passed since
    wait = await budget.try_take([retried], priority="final")
    assert 1.3 - await seconds_since(redis, paused) - TICK <= wait <= 1.0 + TICK


async def test_concurrent_takers_on_two_connections_never_exceed_the_limit(
    budget: SendBudget, other_budget: SendBudget, redis: Redis
) -> None:
    limit = Limit(capacity=4, per_second=20)
    bucket = Bucket("tg:bot", limit, "bot")
    wanted = 24  # the burst and a second's refill: the budget is used, by 16 takers at once
    grants: list[tuple[float, float]] = []  # the server's clock before each take began and after it returned

    async def taker(each: SendBudget) -> None:
        while len(grants) < wanted:
            asked = await redis_seconds(redis)
            assert await each.take([bucket], max_wait=PATIENCE)
            grants.append((asked, await redis_seconds(redis)))

    async with asyncio.timeout(PATIENCE):
        await asyncio.gather(*(taker(each) for each in (budget, other_budget) for _ in range(8)))
    assert len(grants) >= wanted
    # Each grant happened between its two readings. Over any stretch [start, end] of the server's clock, the
    # grants that fall wholly inside it number at most capacity + per_second * (end - start).
    for start, _ in grants:
        for _, end in grants:
            if end > start:
                inside = sum(1 for asked, done in grants if asked >= start and done <= end)
                assert inside <= limit.capacity + limit.per_second * (end - start) + TICK, (start, end)


async def test_a_refusal_by_the_bot_bucket_leaves_the_chat_bucket_alone(budget: SendBudget, redis: Redis) -> None:
    chat = Bucket(CHAT, Limit(capacity=3, per_second=STILL), "chat")
    group = Bucket(CHAT, Limit(capacity=5, per_second=STILL), "group")
    bot = Bucket("tg:bot", Limit(capacity=1, per_second=STILL, preview_reserve=0), "bot")
    assert await budget.try_take([chat, group, bot], priority="final") == 0.0
    assert await tokens(redis, budget, chat) == pytest.approx(2, abs=0.01)

    assert await budget.try_take([chat, group, bot], priority="final") > 100  # the bot bucket is empty
    assert await tokens(redis, budget, chat) == pytest.approx(2, abs=0.01)  # refunded across slots
    assert await tokens(redis, budget, group) == pytest.approx(4, abs=0.01)
    assert await tokens(redis, budget, bot) == pytest.approx(0, abs=0.01)

    # within one slot it is all or nothing: an empty group bucket takes nothing from the chat's
    other_chat = Bucket("tg:5", Limit(capacity=3, per_second=STILL), "chat")
    other_group = Bucket("tg:5", Limit(capacity=1, per_second=STILL, preview_reserve=0), "group")
    assert await budget.try_take([other_group], priority="final") == 0.0
    assert await budget.try_take([other_chat, other_group], priority="final") > 0
    assert not await redis.exists(budget.key(other_chat))  # never written: still a full bucket
    for _ in range(3):
        assert await budget.try_take([other_chat], priority="final") == 0.0
    assert await budget.try_take([other_chat], priority="final") > 0


async def test_keys_carry_their_scope_hash_tag_and_expire_when_idle(
    budget: SendBudget, redis: Redis, key_prefix: str
) -> None:
    chat = Bucket(CHAT, Limit(capacity=2, per_second=10), "chat")
    bot = Bucket("tg:bot", Limit(capacity=2, per_second=10), "bot")
    assert budget.key(chat) == f"{key_prefix}:{{{CHAT}}}:budget:chat"
    assert budget.key(bot) == f"{key_prefix}:{{tg:bot}}:budget:bot"
    # a chat's bucket sits on the slot of the chat's other keys
    assert key_slot(budget.key(chat).encode()) == key_slot(ChatKeys(key_prefix, CHAT).session.encode())
    assert key_slot(budget.key(chat).encode()) == key_slot(CHAT.encode())

    taken = await redis_seconds(redis)
    assert await budget.try_take([chat, bot], priority="final") == 0.0
    for bucket in (chat, bot):  # one token short: full again in 0.1 s, and kept the margin past that
        ttl = await redis.pttl(budget.key(bucket))
        assert EXPIRY_MARGIN_MS - await seconds_since(redis, taken) * 1000 - 1 <= ttl <= 100 + EXPIRY_MARGIN_MS + 1
    paused = await redis_seconds(redis)
    await budget.pause([chat], 0.3)
    ttl = await redis.pttl(budget.key(chat))
    assert ttl >= 300 + EXPIRY_MARGIN_MS - await seconds_since(redis, paused) * 1000 - 1  # a pause outlives its expiry

    await until_gone(redis, budget.key(bot), PATIENCE)  # Redis lets the idle bot bucket go
    # gone means full
    assert await budget.try_take([bot], priority="final") == 0.0
    assert await budget.try_take([bot], priority="final") == 0.0


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ((0, 1), "capacity must be at least 1"),
        ((-3, 1), "capacity must be at least 1"),
        ((0.5, 1), "capacity must be at least 1"),
        ((3, 0), "per_second must be above 0"),
        ((3, -1), "per_second must be above 0"),
        ((math.inf, 1), "capacity must be a finite number"),
        ((3, math.nan), "per_second must be a finite number"),
        ((True, 1), "capacity must be a finite number"),
        (("3", 1), "capacity must be a finite number"),
        ((3, 1, -1), "preview_reserve must be 0 or more"),
        ((3, 1, 2.5), "leaves previews no token"),
        ((1, 1), "leaves previews no token"),
    ],
)
def test_bad_limits_are_refused_clearly(arguments: tuple[object, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Limit(*arguments)  # type: ignore[arg-type]


async def test_bad_buckets_and_calls_are_refused_clearly(budget: SendBudget, channel: PipelinedConnection) -> None:
    limit = Limit(capacity=2, per_second=1)
    for tag in ("", "tg:{1}", "a}b"):
        with pytest.raises(ValueError, match="key_tag must be a non-empty string without braces"):
            Bucket(tag, limit)
    with pytest.raises(ValueError, match="name must be"):
        Bucket(CHAT, limit, "")
    with pytest.raises(ValueError, match="must be a Limit"):
        Bucket(CHAT, (2, 1))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="prefix"):
        SendBudget(channel, "fg{x}")

    bucket = Bucket(CHAT, limit)
    with pytest.raises(ValueError, match="priority"):
        await budget.try_take([bucket], priority="urgent")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="named twice"):
        await budget.try_take([bucket, Bucket(CHAT, Limit(capacity=5, per_second=1))], priority="final")
    with pytest.raises(ValueError, match="max_wait"):
        await budget.take([bucket], max_wait=-1)
    for seconds in (-1, math.nan, math.inf):
        with pytest.raises(ValueError, match="pause seconds"):
            await budget.pause([bucket], seconds)
    assert await budget.try_take([], priority="final") == 0.0  # nothing to limit


def test_the_platform_defaults_stay_under_the_published_limits() -> None:
    assert TELEGRAM_CHAT.per_second == 1.0
    assert TELEGRAM_GROUP.capacity + TELEGRAM_GROUP.per_second * 60 <= 20
    assert TELEGRAM_BOT.capacity + TELEGRAM_BOT.per_second * 1 <= 30
    assert DISCORD_CHANNEL.capacity + DISCORD_CHANNEL.per_second * 5 <= 5
    assert DISCORD_GLOBAL.capacity + DISCORD_GLOBAL.per_second * 1 <= 50
    for limit in (TELEGRAM_CHAT, TELEGRAM_GROUP, TELEGRAM_BOT, DISCORD_CHANNEL, DISCORD_GLOBAL):
        assert limit.preview_reserve >= 1  # every default keeps a token for finals
