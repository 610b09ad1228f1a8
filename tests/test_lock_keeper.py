"""The lock keeper: held chats keep their locks past the ttl, lost ones stop their turn, let-go ones expire."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from gateway.store import Lock, SessionStore
from gateway.store.channel import PipelinedConnection
from gateway.store.inbox import Inbox
from gateway.worker.lock_keeper import LockKeeper

TTL = 0.6


async def turn_forever() -> None:
    await asyncio.Event().wait()


@pytest.fixture
def inbox(redis: Redis, key_prefix: str, channel: PipelinedConnection) -> Inbox:
    return Inbox(redis, key_prefix, channel=channel)


async def hold(keeper: LockKeeper, store: SessionStore, chat: str,
               inbox: Inbox | None = None) -> tuple[Lock, asyncio.Task[None]]:
    """Take the chat's lock (and, with ``inbox``, lease the chat as a worker does) and keep it."""
    lock = await store.acquire_lock(chat, TTL)
    assert lock is not None
    if inbox is not None:
        await inbox.lease(chat, TTL)
    owner = asyncio.create_task(turn_forever())
    keeper.hold(lock, owner)
    return lock, owner


async def test_held_locks_outlive_their_ttl_and_expire_once_let_go(store: SessionStore, inbox: Inbox, redis: Redis):
    keeper = LockKeeper(store, inbox, TTL)
    held = [await hold(keeper, store, f"tg:{n}", inbox) for n in range(20)]
    first_lease = await redis.zscore(inbox.ready_key, "tg:0")
    try:
        await asyncio.sleep(TTL * 2.5)
        for lock, owner in held:
            assert await redis.get(store.keys(lock.chat).lock) == lock.token
            assert not owner.done()
        lease = await redis.zscore(inbox.ready_key, "tg:0")
        assert lease > first_lease + TTL  # the chat's lease in the ready set is pushed along with its lock

        first, _ = held[0]
        keeper.let_go(first)
        await asyncio.sleep(TTL * 2)
        assert await redis.get(store.keys(first.chat).lock) is None
        assert await redis.get(store.keys(held[1][0].chat).lock) == held[1][0].token
    finally:
        for _, owner in held:
            owner.cancel()
        await keeper.close()


async def test_a_lock_taken_away_cancels_its_turn(store: SessionStore, inbox: Inbox, redis: Redis):
    keeper = LockKeeper(store, inbox, TTL)
    lock, owner = await hold(keeper, store, "tg:1")
    other, other_owner = await hold(keeper, store, "tg:2")
    try:
        await redis.delete(store.keys(lock.chat).lock)  # expired, or another worker took the chat
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(owner, TTL * 3)
        assert keeper.held == 1 and not other_owner.done()
    finally:
        other_owner.cancel()
        await keeper.close()


async def test_redis_failing_for_a_whole_ttl_cancels_the_turn(store: SessionStore, inbox: Inbox,
                                                              monkeypatch: pytest.MonkeyPatch):
    keeper = LockKeeper(store, inbox, TTL)
    lock, owner = await hold(keeper, store, "tg:1")

    async def unreachable(lock: Lock, ttl_seconds: float) -> None:
        raise ConnectionError("Redis is unreachable")

    monkeypatch.setattr(store, "extend_lock", unreachable)
    try:
        await asyncio.sleep(TTL * 0.8)
        assert not owner.done()  # one failed pass is retried, the turn goes on
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(owner, TTL * 3)
    finally:
        await keeper.close()


async def test_the_keeper_stops_when_nothing_is_held_and_starts_again(store: SessionStore, inbox: Inbox,
                                                                      redis: Redis):
    keeper = LockKeeper(store, inbox, TTL)
    lock, owner = await hold(keeper, store, "tg:1")
    keeper.let_go(lock)
    owner.cancel()
    await asyncio.sleep(TTL * 0.6)
    assert keeper._task is not None and keeper._task.done()

    again, again_owner = await hold(keeper, store, "tg:2")
    try:
        await asyncio.sleep(TTL * 1.5)
        assert await redis.get(store.keys(again.chat).lock) == again.token
    finally:
        again_owner.cancel()
        await keeper.close()


async def test_an_extension_on_its_way_when_the_lock_is_let_go_does_not_re_mark_the_chat(
        store: SessionStore, inbox: Inbox, redis: Redis, monkeypatch: pytest.MonkeyPatch):
    keeper = LockKeeper(store, inbox, TTL)
    lock, owner = await hold(keeper, store, "tg:1")
    original = store.extend_lock
    started = asyncio.Event()

    async def slow_extend(lock: Lock, ttl_seconds: float) -> None:
        started.set()
        await asyncio.sleep(0.1)
        await original(lock, ttl_seconds)

    monkeypatch.setattr(store, "extend_lock", slow_extend)
    try:
        await asyncio.wait_for(started.wait(), TTL)
        keeper.let_go(lock)  # the worker is done: it unmarks the chat next
        await inbox.unmark(lock.chat)
        await asyncio.sleep(0.3)
        assert await redis.zscore(inbox.ready_key, lock.chat) is None
    finally:
        owner.cancel()
        await keeper.close()


async def test_a_lock_held_while_the_keeper_closes_is_still_kept(store: SessionStore, inbox: Inbox, redis: Redis):
    keeper = LockKeeper(store, inbox, TTL)
    first, first_owner = await hold(keeper, store, "tg:1")
    late = await store.acquire_lock("tg:2", TTL)
    assert late is not None
    late_owner = asyncio.create_task(turn_forever())
    closing = asyncio.create_task(keeper.close())
    await asyncio.sleep(0)  # close() is waiting for the old task to end
    keeper.hold(late, late_owner)
    await closing
    try:
        await asyncio.sleep(TTL * 1.8)
        assert await redis.get(store.keys(late.chat).lock) == late.token
        assert not late_owner.done()
    finally:
        first_owner.cancel()
        late_owner.cancel()
        await keeper.close()


async def test_an_extension_never_marks_a_chat_its_worker_unmarked(store: SessionStore, inbox: Inbox, redis: Redis):
    keeper = LockKeeper(store, inbox, TTL)
    lock, owner = await hold(keeper, store, "tg:1", inbox)
    try:
        await inbox.unmark(lock.chat)  # the worker is about to release the chat; its lock is still kept
        await asyncio.sleep(TTL * 0.8)  # a pass or two extend the lock meanwhile
        assert await redis.get(store.keys(lock.chat).lock) == lock.token
        assert await redis.zscore(inbox.ready_key, lock.chat) is None
    finally:
        owner.cancel()
        await keeper.close()
