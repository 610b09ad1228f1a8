"""Chat locks and fencing: one worker per chat, and a worker that lost its lock cannot write."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from gateway.store import Lock, SessionStore, StaleLock
from tests.fakes.redis_time import until_gone

CHAT = "tg:424242"


def turn() -> list[dict[str, str]]:
    return [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi there"}]


async def state_of(store: SessionStore, sid: str) -> tuple[list[str], dict[str, str]]:
    keys = store.keys(CHAT)
    return await store.redis.lrange(keys.active(sid), 0, -1), await store.redis.hgetall(keys.meta(sid))


async def test_one_holder_at_a_time_and_every_acquisition_gets_a_larger_fence(store: SessionStore) -> None:
    first = await store.acquire_lock(CHAT, 30)
    assert isinstance(first, Lock) and first.chat == CHAT
    assert await store.acquire_lock(CHAT, 30) is None
    assert await store.acquire_lock("tg:other", 30) is not None  # locks are per chat

    assert await store.release_lock(first) is True
    assert await store.release_lock(first) is False
    second = await store.acquire_lock(CHAT, 30)
    assert second is not None and second.fence > first.fence and second.token != first.token


async def test_extend_keeps_the_lock_and_fails_once_it_is_lost(store: SessionStore, redis: Redis) -> None:
    lock = await store.acquire_lock(CHAT, 1)
    assert lock is not None
    await store.extend_lock(lock, 120)
    assert await redis.pttl(store.keys(CHAT).lock) > 60_000

    await redis.delete(store.keys(CHAT).lock)  # as if it had expired
    with pytest.raises(StaleLock):
        await store.extend_lock(lock, 120)
    assert await redis.exists(store.keys(CHAT).lock) == 0  # a lost lock is not re-taken by extend


async def test_an_expired_lock_refuses_every_write_and_writes_nothing(store: SessionStore) -> None:
    sid = await store.current_session(CHAT)
    lock = await store.acquire_lock(CHAT, 30)
    assert lock is not None
    await store.append(CHAT, sid, turn(), lock=lock)
    before = await state_of(store, sid)
    await store.extend_lock(lock, 0.05)
    await until_gone(store.redis, store.keys(CHAT).lock)  # the lock's last 50 ms ran out

    with pytest.raises(StaleLock):
        await store.append(CHAT, sid, [{"role": "user", "content": "late"}], lock=lock)
    with pytest.raises(StaleLock):
        await store.update_meta(CHAT, sid, lock=lock, last_prompt_tokens=10)
    with pytest.raises(StaleLock):
        await store.commit_compaction(
            CHAT, sid, [{"role": "user", "content": "summary"}], lock=lock, in_place=True, compaction_id="late"
        )
    assert await state_of(store, sid) == before
    assert await store.redis.exists(store.keys(CHAT).compaction("late")) == 0
    assert await store.acquire_lock(CHAT, 30) is not None


async def test_a_taken_over_lock_cannot_overwrite_the_new_holders_history(store: SessionStore, redis: Redis) -> None:
    sid = await store.current_session(CHAT)
    old = await store.acquire_lock(CHAT, 30)
    assert old is not None
    await store.append(CHAT, sid, turn(), lock=old)
    await redis.delete(store.keys(CHAT).lock)  # the old holder stalled past its TTL
    new = await store.acquire_lock(CHAT, 30)
    assert new is not None

    await store.append(CHAT, sid, [{"role": "user", "content": "newer turn"}], lock=new)
    newer_history = await store.active(CHAT, sid)
    with pytest.raises(StaleLock):
        await store.commit_compaction(
            CHAT, sid, [{"role": "user", "content": "stale summary"}], lock=old, in_place=True, compaction_id="old"
        )
    with pytest.raises(StaleLock):
        await store.append(CHAT, sid, [{"role": "assistant", "content": "stale reply"}], lock=old)
    assert await store.active(CHAT, sid) == newer_history
    assert await store.release_lock(old) is False  # the stale holder cannot free the new holder's lock
    assert await redis.get(store.keys(CHAT).lock) == new.token


async def test_an_older_fence_is_refused_even_if_its_token_reappears(store: SessionStore, redis: Redis) -> None:
    sid = await store.current_session(CHAT)
    old = await store.acquire_lock(CHAT, 30)
    assert old is not None
    await redis.delete(store.keys(CHAT).lock)
    new = await store.acquire_lock(CHAT, 30)
    assert new is not None
    await store.append(CHAT, sid, turn(), lock=new)
    await store.release_lock(new)
    # A failed-over replica restores the old lock value: the fence still tells the writers apart.
    await redis.set(store.keys(CHAT).lock, old.token, px=30_000)

    with pytest.raises(StaleLock, match="newer lock holder"):
        await store.append(CHAT, sid, [{"role": "user", "content": "from the past"}], lock=old)
    assert len(await store.active(CHAT, sid)) == 2
    assert (await store.meta(CHAT, sid)).fence == new.fence


async def test_a_lock_of_another_chat_authorises_nothing(store: SessionStore) -> None:
    sid = await store.current_session(CHAT)
    foreign = await store.acquire_lock("tg:other", 30)
    assert foreign is not None
    with pytest.raises(StaleLock):
        await store.append(CHAT, sid, turn(), lock=foreign)


async def test_a_lock_without_a_positive_ttl_is_refused(store: SessionStore) -> None:
    with pytest.raises(ValueError):
        await store.acquire_lock(CHAT, 0)
    assert await store.redis.exists(store.keys(CHAT).lock) == 0
