"""The transcript cache: a turn reads only new messages, yet always sees exactly what Redis holds."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from redis.asyncio import Redis

from agent.messages import with_content
from gateway.store import SessionStore, TranscriptCache
from gateway.store.channel import PipelinedConnection

CHAT = "tg:4242"


def turn(number: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"question {number} about invoice INV-{number:04d}"},
        {"role": "assistant", "content": f"answer {number}: paid on day {number}"},
    ]


@pytest_asyncio.fixture
async def cached(redis: Redis, key_prefix: str, channel: PipelinedConnection) -> SessionStore:
    return SessionStore(redis, key_prefix, channel=channel, transcript_cache_tokens=1_000_000)


@pytest_asyncio.fixture
async def other_process(redis: Redis, key_prefix: str) -> AsyncIterator[SessionStore]:
    """A second store on its own connection and cache, as another gateway process would have."""
    channel = PipelinedConnection.like(redis)
    try:
        yield SessionStore(redis, key_prefix, channel=channel, transcript_cache_tokens=1_000_000)
    finally:
        await channel.aclose()


def plain(messages: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    return [(m["_id"], m["content"]) for m in messages]


async def test_a_second_read_fetches_only_the_new_messages(cached: SessionStore, channel: PipelinedConnection):
    sid = await cached.current_session(CHAT)
    lock = await cached.acquire_lock(CHAT, 30)
    await cached.append(CHAT, sid, [m for n in range(30) for m in turn(n)], lock=lock)
    _, _, first = await cached.snapshot(CHAT)
    await cached.append(CHAT, sid, turn(30), lock=lock)

    replies: list[Any] = []
    call = channel.call

    async def recording(*args: Any) -> Any:
        reply = await call(*args)
        replies.append(reply)
        return reply

    channel.call = recording  # type: ignore[method-assign]
    _, meta, second = await cached.snapshot(CHAT)
    del channel.call
    ((sid_, _pairs, ids, wanted, bodies),) = replies
    assert len(ids) == 62 and len(wanted) == len(bodies) == 2  # 60 held, 2 new ones crossed the wire
    assert plain(second) == plain(await cached.active(CHAT, sid)) and len(second) == meta.count == 62
    assert plain(second[:60]) == plain(first)


async def test_writes_by_another_process_compactions_included_are_seen(
    cached: SessionStore, other_process: SessionStore
):
    sid = await cached.current_session(CHAT)
    lock = await cached.acquire_lock(CHAT, 30)
    await cached.append(CHAT, sid, [m for n in range(10) for m in turn(n)], lock=lock)
    await cached.snapshot(CHAT)  # now held here

    await other_process.append(CHAT, sid, turn(10), lock=lock)
    _, _, live = await other_process.snapshot(CHAT)
    summary = {"role": "user", "content": "[summary] invoices 0-7 were paid"}
    folded = [live[0], summary, with_content(live[3], "[stub]"), *live[16:]]
    await other_process.commit_compaction(CHAT, sid, folded, lock=lock, in_place=True, compaction_id="elsewhere")

    _, meta, seen = await cached.snapshot(CHAT)
    assert plain(seen) == plain(await cached.active(CHAT, sid))
    assert [m["content"] for m in seen[:3]] == [live[0]["content"], summary["content"], "[stub]"]
    assert meta.count == len(seen) == 3 + len(live) - 16


async def test_an_old_message_back_in_the_list_is_read_even_though_it_is_not_new(cached: SessionStore):
    sid = await cached.current_session(CHAT)
    lock = await cached.acquire_lock(CHAT, 30)
    await cached.append(CHAT, sid, [m for n in range(4) for m in turn(n)], lock=lock)
    _, _, everything = await cached.snapshot(CHAT)
    await cached.commit_compaction(CHAT, sid, everything[4:], lock=lock, in_place=True, compaction_id="fold")
    await cached.snapshot(CHAT)  # held: only the last four
    # A compaction may keep any stored id, an archived one too: it must be read, not assumed held.
    await cached.commit_compaction(
        CHAT, sid, [everything[0], *everything[4:]], lock=lock, in_place=True, compaction_id="restore"
    )
    _, _, seen = await cached.snapshot(CHAT)
    assert plain(seen) == plain([everything[0], *everything[4:]])


async def test_a_rotated_session_is_read_whole(cached: SessionStore):
    sid = await cached.current_session(CHAT)
    lock = await cached.acquire_lock(CHAT, 30)
    await cached.append(CHAT, sid, [m for n in range(4) for m in turn(n)], lock=lock)
    _, _, everything = await cached.snapshot(CHAT)
    commit = await cached.commit_compaction(
        CHAT, sid, everything[2:], lock=lock, in_place=False, compaction_id="rotate"
    )
    new_sid, _, seen = await cached.snapshot(CHAT)
    assert new_sid == commit.session_id != sid
    assert plain(seen) == plain(await cached.active(CHAT, new_sid))


async def test_what_a_caller_does_to_its_copy_never_reaches_the_cache(cached: SessionStore):
    sid = await cached.current_session(CHAT)
    lock = await cached.acquire_lock(CHAT, 30)
    await cached.append(CHAT, sid, turn(1), lock=lock)
    _, _, first = await cached.snapshot(CHAT)
    first[0]["content"] = "edited by a careless caller"
    first.append({"role": "user", "content": "never stored"})
    _, _, again = await cached.snapshot(CHAT)
    assert [m["content"] for m in again] == [m["content"] for m in turn(1)]


def test_the_cache_keeps_the_most_recent_chats_within_its_token_budget():
    cache = TranscriptCache(max_tokens=100)
    messages = [{"_id": "1", "role": "user", "content": "x", "_tok": 40}]
    cache.put("a", "s1", 1, messages)
    cache.put("b", "s2", 1, messages)
    assert cache.get("a") is not None  # "a" is now the most recently used
    cache.put("c", "s3", 1, messages)
    assert cache.get("b") is None and cache.get("a") is not None and cache.get("c") is not None
    assert cache.tokens == 80
    cache.put("huge", "s4", 1, [{**messages[0], "_tok": 500}])  # larger than the whole budget: not held
    assert cache.get("huge") is None and cache.tokens == 80
    off = TranscriptCache(max_tokens=0)
    off.put("a", "s1", 1, messages)
    assert off.get("a") is None and off.tokens == 0


def test_appended_messages_extend_the_held_transcript_and_count_against_the_budget():
    cache = TranscriptCache(max_tokens=100)
    cache.put("a", "s1", 1, [{"_id": "1", "role": "user", "content": "x", "_tok": 30}])
    cache.put("b", "s2", 1, [{"_id": "1", "role": "user", "content": "x", "_tok": 30}])
    held = cache.get("a")
    assert held is not None
    assert cache.extend("a", held, 2, [{"_id": "2", "role": "assistant", "content": "y", "_tok": 20}])
    assert held.key == ("s1", 2) and sorted(held.messages) == ["1", "2"] and cache.tokens == 80
    assert cache.extend("a", held, 3, [{"_id": "3", "role": "user", "content": "z", "_tok": 30}])
    assert cache.get("b") is None and cache.tokens == 80  # over budget: the least recent chat went
    cache.drop("a")
    assert not cache.extend("a", held, 4, [{"_id": "4", "role": "user", "content": "w", "_tok": 5}])
    assert cache.tokens == 0  # a transcript no longer held is never counted again

    cache.put("small", "s5", 1, [{"_id": "1", "role": "user", "content": "x", "_tok": 30}])
    cache.put("big", "s6", 1, [{"_id": "1", "role": "user", "content": "x", "_tok": 60}])
    big = cache.get("big")
    assert big is not None
    cache.extend("big", big, 2, [{"_id": "2", "role": "assistant", "content": "y", "_tok": 50}])
    # Grown past the whole budget, it is no longer held; the other chat is not evicted for it.
    assert cache.get("big") is None and cache.get("small") is not None and cache.tokens == 30


async def test_the_held_transcript_matches_the_session_after_appends_and_compactions(cached: SessionStore):
    sid = await cached.current_session(CHAT)
    lock = await cached.acquire_lock(CHAT, 30)
    for n in range(6):
        await cached.append(CHAT, sid, turn(n), lock=lock)
        _, _, seen = await cached.snapshot(CHAT)
        if n == 3:
            await cached.commit_compaction(CHAT, sid, seen[4:], lock=lock, in_place=True, compaction_id="fold")
        held = cached.transcripts.get(CHAT)
        assert held is not None and sorted(held.messages) == sorted(m["_id"] for m in seen)
        assert held.tokens == cached.transcripts.tokens == sum(m["_tok"] for m in seen)
    _, _, final = await cached.snapshot(CHAT)
    assert plain(final) == plain(await cached.active(CHAT, sid)) and len(final) == 8


@pytest.mark.parametrize("budget", [0, 1_000_000])
async def test_with_or_without_the_cache_a_turn_sees_the_same_transcript(
    redis: Redis, key_prefix: str, channel: PipelinedConnection, budget: int
):
    store = SessionStore(redis, key_prefix, channel=channel, transcript_cache_tokens=budget)
    sid = await store.current_session(CHAT)
    lock = await store.acquire_lock(CHAT, 30)
    for n in range(5):
        await store.append(CHAT, sid, turn(n), lock=lock)
        _, _, seen = await store.snapshot(CHAT)
        assert plain(seen) == plain(await store.active(CHAT, sid))
    assert (store.transcripts.get(CHAT) is not None) == bool(budget)
