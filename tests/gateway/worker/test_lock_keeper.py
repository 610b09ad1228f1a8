"""The lock keeper: held chats keep their locks past the ttl, lost ones stop their turn, let-go ones expire.

The keeper's passes run when the test lets them (:class:`Passes` is its ``sleep``), so "a pass or two" is a count
of passes, not a guess at how long they take. Only Redis' expiry is real time, because it is the subject: that a
ttl has passed is Redis' own word (a lock nobody keeps is gone), and so is a let-go lock's expiry (its key is
gone). The waits for those end on the event; ``PATIENCE`` only ends a test that hangs.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from redis.asyncio import Redis

from gateway.store import Lock, SessionStore
from gateway.store.channel import PipelinedConnection
from gateway.store.inbox import Inbox
from gateway.worker.lock_keeper import LockKeeper
from tests.fakes.waiting import wait_for

#: The locks' time to live in Redis. While the test waits on Redis it lets the keeper pass every ``PACE``, so a
#: kept lock could only expire in a stall of the whole process for nearly a whole ttl.
TTL = 1.5
#: Seconds between two passes the test lets run while it waits for Redis to expire a key.
PACE = 0.05
#: Seconds before a wait for an event is given up as a hang.
PATIENCE = 30.0


class VirtualClock:
    """A clock that moves only when :class:`Passes` ends one of the keeper's sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Passes:
    """The keeper's ``sleep``, in the test's hands: each sleep is recorded (``waits``) and lasts until :meth:`run`
    lets the next pass go. With ``clock``, that clock moves on by the wait as it ends."""

    def __init__(self, clock: VirtualClock | None = None) -> None:
        self.clock = clock
        self.waits: list[float] = []
        self._sleep: asyncio.Future[None] | None = None
        self._asleep = asyncio.Event()  # set exactly while a sleep of the keeper is pending

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleep = woken
        self._asleep.set()
        try:
            await woken
        finally:  # woken, or cancelled with the keeper's task
            if self._sleep is woken:
                self._sleep = None
                self._asleep.clear()

    async def run(self, keeper: LockKeeper) -> None:
        """Let the keeper's next pass run; return once it is over (the keeper sleeps again, or has ended)."""
        await self.between_passes(keeper)
        sleeping = self._sleep
        assert sleeping is not None, "the keeper has ended: there is no pass to run"
        if self.clock is not None:
            self.clock.now += self.waits[-1]
        sleeping.set_result(None)
        self._sleep = None
        self._asleep.clear()
        await self.between_passes(keeper)

    async def between_passes(self, keeper: LockKeeper) -> None:
        """Return once the keeper sleeps until its next pass, or has ended."""
        task = keeper._task
        assert task is not None, "the keeper was never started"
        asleep = asyncio.ensure_future(self._asleep.wait())
        try:
            await asyncio.wait([asleep, task], timeout=PATIENCE, return_when=asyncio.FIRST_COMPLETED)
        finally:
            asleep.cancel()
        assert self._asleep.is_set() or task.done(), "the keeper neither went back to sleep nor ended"


async def passes_until_gone(keeper: LockKeeper, passes: Passes, redis: Redis, key: str) -> None:
    """Let the keeper pass every ``PACE`` until Redis has let ``key`` expire: what the keeper holds is set back to
    a full ttl at each pass meanwhile."""

    async def gone() -> bool:
        if not await redis.exists(key):
            return True
        await passes.run(keeper)
        return False

    await wait_for(gone, PATIENCE, what=f"Redis to let {key} expire", interval=PACE)


async def a_ttl_passes(keeper: LockKeeper, passes: Passes, store: SessionStore, redis: Redis) -> None:
    """Return once a ttl has passed on Redis' clock (a lock taken now, kept by nobody, is gone), the keeper passing
    meanwhile, and after one pass more: the last pass came after that ttl."""
    nobodys = await store.acquire_lock("tg:kept-by-nobody", TTL)
    assert nobodys is not None
    await passes_until_gone(keeper, passes, redis, store.keys(nobodys.chat).lock)
    await passes.run(keeper)


async def turn_forever() -> None:
    await asyncio.Event().wait()


@pytest.fixture
def inbox(redis: Redis, key_prefix: str, channel: PipelinedConnection) -> Inbox:
    return Inbox(redis, key_prefix, channel=channel)


async def hold(
    keeper: LockKeeper, store: SessionStore, chat: str, inbox: Inbox | None = None
) -> tuple[Lock, asyncio.Task[None]]:
    """Take the chat's lock (and, with ``inbox``, lease the chat as a worker does) and keep it."""
    lock = await store.acquire_lock(chat, TTL)
    assert lock is not None
    if inbox is not None:
        await inbox.lease(chat, TTL)
    owner = asyncio.create_task(turn_forever())
    keeper.hold(lock, owner)
    return lock, owner


async def test_held_locks_outlive_their_ttl_and_expire_once_let_go(store: SessionStore, inbox: Inbox, redis: Redis):
    passes = Passes()
    keeper = LockKeeper(store, inbox, TTL, sleep=passes)
    held = [await hold(keeper, store, f"tg:{n}", inbox) for n in range(20)]
    try:
        await a_ttl_passes(keeper, passes, store, redis)
        for lock, owner in held:
            assert await redis.get(store.keys(lock.chat).lock) == lock.token
            assert not owner.done()
        pushed_to_at_least = time.time() + TTL  # the ready set's clock, before the next pass
        await passes.run(keeper)
        lease = await redis.zscore(inbox.ready_key, "tg:0")
        assert lease >= pushed_to_at_least  # the chat's lease in the ready set is pushed along with its lock
        assert set(passes.waits) == {TTL / 3}  # the keeper's own pace: three passes to a ttl

        first, _ = held[0]
        keeper.let_go(first)
        await passes_until_gone(keeper, passes, redis, store.keys(first.chat).lock)  # nobody keeps it: it expires
        assert await redis.get(store.keys(held[1][0].chat).lock) == held[1][0].token
    finally:
        for _, owner in held:
            owner.cancel()
        await keeper.close()


async def test_a_lock_taken_away_cancels_its_turn(store: SessionStore, inbox: Inbox, redis: Redis):
    passes = Passes()
    keeper = LockKeeper(store, inbox, TTL, sleep=passes)
    lock, owner = await hold(keeper, store, "tg:1")
    other, other_owner = await hold(keeper, store, "tg:2")
    try:
        await redis.delete(store.keys(lock.chat).lock)  # expired, or another worker took the chat
        await passes.run(keeper)  # the next pass finds it lost
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(owner, PATIENCE)
        assert keeper.held == 1 and not other_owner.done()
    finally:
        other_owner.cancel()
        await keeper.close()


async def test_redis_failing_for_a_whole_ttl_cancels_the_turn(
    store: SessionStore, inbox: Inbox, monkeypatch: pytest.MonkeyPatch
):
    clock = VirtualClock()
    passes = Passes(clock)
    keeper = LockKeeper(store, inbox, TTL, clock=clock, sleep=passes)
    lock, owner = await hold(keeper, store, "tg:1")

    async def unreachable(lock: Lock, ttl_seconds: float) -> None:
        raise ConnectionError("Redis is unreachable")

    monkeypatch.setattr(store, "extend_lock", unreachable)
    try:
        await passes.run(keeper)
        assert keeper.held == 1 and not owner.done()  # one failed pass is retried, the turn goes on
        while keeper.held:
            await passes.run(keeper)
        assert clock.now == TTL  # given up at the first pass a whole ttl after the last extension, not before
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(owner, PATIENCE)
    finally:
        await keeper.close()


async def test_the_keeper_stops_when_nothing_is_held_and_starts_again(store: SessionStore, inbox: Inbox, redis: Redis):
    passes = Passes()
    keeper = LockKeeper(store, inbox, TTL, sleep=passes)
    lock, owner = await hold(keeper, store, "tg:1")
    await passes.between_passes(keeper)  # running, asleep until its first pass
    keeper.let_go(lock)
    owner.cancel()
    first_task = keeper._task
    await passes.run(keeper)  # a pass with nothing left to keep
    assert first_task is not None and first_task.done()

    again, again_owner = await hold(keeper, store, "tg:2")
    try:
        assert keeper._task is not first_task and not keeper._task.done()
        await a_ttl_passes(keeper, passes, store, redis)
        assert await redis.get(store.keys(again.chat).lock) == again.token
    finally:
        again_owner.cancel()
        await keeper.close()


async def test_an_extension_on_its_way_when_the_lock_is_let_go_does_not_re_mark_the_chat(
    store: SessionStore, inbox: Inbox, redis: Redis, monkeypatch: pytest.MonkeyPatch
):
    passes = Passes()
    keeper = LockKeeper(store, inbox, TTL, sleep=passes)
    lock, owner = await hold(keeper, store, "tg:1")
    original = store.extend_lock
    started, arrives = asyncio.Event(), asyncio.Event()

    async def late_extend(lock: Lock, ttl_seconds: float) -> None:
        started.set()
        await arrives.wait()  # on its way until the test lets it arrive
        await original(lock, ttl_seconds)

    monkeypatch.setattr(store, "extend_lock", late_extend)
    try:
        passing = asyncio.create_task(passes.run(keeper))
        await asyncio.wait_for(started.wait(), PATIENCE)
        keeper.let_go(lock)  # the worker is done: it unmarks the chat next
        await inbox.unmark(lock.chat)
        arrives.set()
        await asyncio.wait_for(passing, PATIENCE)  # the pass, its extension included, is over
        assert await redis.zscore(inbox.ready_key, lock.chat) is None
    finally:
        owner.cancel()
        await keeper.close()


async def test_a_lock_held_while_the_keeper_closes_is_still_kept(store: SessionStore, inbox: Inbox, redis: Redis):
    passes = Passes()
    keeper = LockKeeper(store, inbox, TTL, sleep=passes)
    first, first_owner = await hold(keeper, store, "tg:1")
    late = await store.acquire_lock("tg:2", TTL)
    assert late is not None
    late_owner = asyncio.create_task(turn_forever())
    closing = asyncio.create_task(keeper.close())
    await asyncio.sleep(0)  # close() is waiting for the old task to end
    keeper.hold(late, late_owner)
    await closing
    try:
        await a_ttl_passes(keeper, passes, store, redis)
        assert await redis.get(store.keys(late.chat).lock) == late.token
        assert not late_owner.done()
    finally:
        first_owner.cancel()
        late_owner.cancel()
        await keeper.close()


async def test_an_extension_never_marks_a_chat_its_worker_unmarked(store: SessionStore, inbox: Inbox, redis: Redis):
    passes = Passes()
    keeper = LockKeeper(store, inbox, TTL, sleep=passes)
    lock, owner = await hold(keeper, store, "tg:1", inbox)
    try:
        await inbox.unmark(lock.chat)  # the worker is about to release the chat; its lock is still kept
        for _ in range(2):  # two passes extend the lock meanwhile
            await passes.run(keeper)
        assert await redis.get(store.keys(lock.chat).lock) == lock.token
        assert await redis.zscore(inbox.ready_key, lock.chat) is None
    finally:
        owner.cancel()
        await keeper.close()
