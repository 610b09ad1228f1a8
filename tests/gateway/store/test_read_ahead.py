"""The step that hands out an inbox entry also reads the session for it, and that read is never stale."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from redis.asyncio import Redis

from gateway.store import SessionStore
from gateway.store import caches as store_caches
from gateway.store.channel import PipelinedConnection
from tests.fakes.redis_time import until_gone

CHAT = "tg:5150"


def turn(number: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"question {number}: is ticket T-{number:03d} closed?"},
        {"role": "assistant", "content": f"answer {number}: T-{number:03d} closed on day {number}"},
    ]


@pytest_asyncio.fixture(params=[0, 1_000_000], ids=["no-cache", "cache"])
async def worker(
    request: pytest.FixtureRequest, redis: Redis, key_prefix: str, channel: PipelinedConnection
) -> SessionStore:
    return SessionStore(redis, key_prefix, channel=channel, transcript_cache_tokens=request.param)


@pytest_asyncio.fixture
async def reader(redis: Redis, key_prefix: str) -> AsyncIterator[SessionStore]:
    """Another process's store, with no cache and nothing read ahead: what Redis holds right now."""
    channel = PipelinedConnection.like(redis)
    try:
        yield SessionStore(redis, key_prefix, channel=channel)
    finally:
        await channel.aclose()


async def history(store: SessionStore, turns: int) -> str:
    sid = await store.current_session(CHAT)
    lock = await store.acquire_lock(CHAT, 30)
    assert lock is not None
    await store.append(CHAT, sid, [m for n in range(turns) for m in turn(n)], lock=lock)
    await store.release_lock(lock)
    return sid


async def queue(redis: Redis, store: SessionStore, *entries: str) -> None:
    await redis.rpush(store.keys(CHAT).inbox, *entries)


def plain(snapshot: tuple[str, Any, list[dict[str, Any]]]) -> tuple[str, int, int, list[tuple[str, str]]]:
    sid, meta, messages = snapshot
    return sid, meta.version, meta.tokens, [(m["_id"], m["content"]) for m in messages]


async def commands_during(channel: PipelinedConnection, read: Any) -> tuple[int, Any]:
    before = channel.commands
    result = await read
    return channel.commands - before, result


async def test_claim_reads_the_session_for_its_entry(
    worker: SessionStore, reader: SessionStore, redis: Redis, channel: PipelinedConnection
):
    await history(worker, 5)
    await queue(redis, worker, "entry-1")
    lock, head = await worker.claim(CHAT, 30)
    assert lock is not None and head == "entry-1"

    sent, snapshot = await commands_during(channel, worker.snapshot(CHAT))

    assert sent == 0
    assert plain(snapshot) == plain(await reader.snapshot(CHAT))
    assert len(snapshot[2]) == 10


async def test_finish_entry_reads_the_session_after_its_own_write(
    worker: SessionStore, reader: SessionStore, redis: Redis, channel: PipelinedConnection
):
    sid = await history(worker, 3)
    await queue(redis, worker, "entry-1", "entry-2")
    lock, head = await worker.claim(CHAT, 30)
    assert lock is not None
    await worker.snapshot(CHAT)
    await worker.append(CHAT, sid, turn(3), lock=lock, meta={"last_entry_id": "tg:1"})

    head = await worker.finish_entry(lock, sid, "entry-1", replied_entry_id="tg:1")
    sent, snapshot = await commands_during(channel, worker.snapshot(CHAT))

    assert head == "entry-2" and sent == 0
    assert snapshot[1].replied_entry_id == "tg:1" and snapshot[2][-1]["content"].startswith("answer 3")
    assert plain(snapshot) == plain(await reader.snapshot(CHAT))


async def test_no_read_ahead_when_the_inbox_is_empty(worker: SessionStore, redis: Redis, channel: PipelinedConnection):
    sid = await history(worker, 1)
    await queue(redis, worker, "entry-1")
    lock, _ = await worker.claim(CHAT, 30)
    assert lock is not None
    await worker.snapshot(CHAT)

    assert await worker.finish_entry(lock, sid, "entry-1") is None
    sent, _ = await commands_during(channel, worker.snapshot(CHAT))
    assert sent == 1


@pytest.mark.parametrize("write", ["append", "update_meta", "new_session"])
async def test_a_write_after_the_read_ahead_is_seen(
    write: str, worker: SessionStore, reader: SessionStore, redis: Redis, channel: PipelinedConnection
):
    sid = await history(worker, 2)
    await queue(redis, worker, "entry-1")
    lock, _ = await worker.claim(CHAT, 30)
    assert lock is not None
    if write == "append":
        await worker.append(CHAT, sid, turn(2), lock=lock)
    elif write == "update_meta":
        await worker.update_meta(CHAT, sid, lock=lock, model="gpt-4o-mini")
    else:
        await worker.new_session(CHAT, parent=sid, lock=lock)

    sent, snapshot = await commands_during(channel, worker.snapshot(CHAT))

    assert sent == 1
    assert plain(snapshot) == plain(await reader.snapshot(CHAT))


async def test_a_read_ahead_serves_one_snapshot(worker: SessionStore, redis: Redis, channel: PipelinedConnection):
    await history(worker, 2)
    await queue(redis, worker, "entry-1")
    await worker.claim(CHAT, 30)
    first_sent, first = await commands_during(channel, worker.snapshot(CHAT))
    again_sent, again = await commands_during(channel, worker.snapshot(CHAT))

    assert (first_sent, again_sent) == (0, 1)
    assert plain(first) == plain(again)


async def test_releasing_the_lock_drops_the_read_ahead(
    worker: SessionStore, reader: SessionStore, redis: Redis, channel: PipelinedConnection
):
    await history(worker, 2)
    await queue(redis, worker, "entry-1")
    lock, _ = await worker.claim(CHAT, 30)
    assert lock is not None
    await worker.release_lock(lock)
    other = await reader.acquire_lock(CHAT, 30)  # another process takes the chat and writes
    assert other is not None
    await reader.append(CHAT, await reader.current_session(CHAT), turn(2), lock=other)

    sent, snapshot = await commands_during(channel, worker.snapshot(CHAT))

    assert sent == 1 and len(snapshot[2]) == 6


async def test_a_chat_without_a_session_gets_one(worker: SessionStore, redis: Redis):
    await queue(redis, worker, "entry-1")
    lock, head = await worker.claim(CHAT, 30)
    assert lock is not None and head == "entry-1"

    sid, meta, messages = await worker.snapshot(CHAT)

    assert sid and messages == [] and meta.count == 0
    assert await redis.get(worker.keys(CHAT).session) == sid


async def test_a_worker_that_stalled_past_its_lock_reads_afresh(
    worker: SessionStore,
    reader: SessionStore,
    redis: Redis,
    channel: PipelinedConnection,
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setattr(store_caches, "READ_AHEAD_SECONDS", 0.05)
    sid = await history(worker, 2)
    await queue(redis, worker, "entry-1")
    lock, _ = await worker.claim(CHAT, 0.1)
    assert lock is not None
    # stalled: the lock expired (Redis' word for it; its 0.1 s are past, and the 0.05 s of the read-ahead with
    # them), and another worker answered the entry
    await until_gone(redis, worker.keys(CHAT).lock)
    other = await reader.acquire_lock(CHAT, 30)
    assert other is not None
    await reader.append(CHAT, sid, turn(2), lock=other, meta={"last_entry_id": "tg:1"})

    sent, snapshot = await commands_during(channel, worker.snapshot(CHAT))

    assert sent == 1
    assert snapshot[1].last_entry_id == "tg:1" and len(snapshot[2]) == 6


async def test_a_failed_claim_leaves_nothing_read_ahead(
    worker: SessionStore, reader: SessionStore, redis: Redis, channel: PipelinedConnection
):
    await history(worker, 1)
    await queue(redis, worker, "entry-1")
    lock, _ = await worker.claim(CHAT, 30)
    assert lock is not None
    await redis.delete(worker.keys(CHAT).lock)
    other = await reader.acquire_lock(CHAT, 30)  # another worker holds the chat now
    assert other is not None and (await worker.claim(CHAT, 30))[0] is None

    sent, _ = await commands_during(channel, worker.snapshot(CHAT))
    assert sent == 1
