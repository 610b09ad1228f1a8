"""The index that finds a stateless API client's session by its resent history, on a real Redis.

Round trips are counted on the store's own channel (:class:`PipelinedConnection` counts every command it
sends); each test warms the scripts up first, so a count never includes the one-off load of a script.
"""

from __future__ import annotations

import pytest
from redis.asyncio import Redis
from redis.crc import key_slot

from gateway.api.matching import conversation, seed_messages
from gateway.store import SessionStore, VersionConflict, WrongKeyType, api_sessions
from gateway.store.api_sessions import ApiSessionIndex, Match, seed_session
from gateway.store.channel import PipelinedConnection, RedisPyChannel

SYSTEM = {"role": "system", "content": "You are brief."}


def turn(index: int) -> list[dict]:
    return [{"role": "user", "content": f"question {index}"}, {"role": "assistant", "content": f"answer {index}"}]


def history(turns: int) -> list[dict]:
    return [SYSTEM, *(message for index in range(turns) for message in turn(index))]


def asking(messages: list[dict], text: str = "and now?") -> list[dict]:
    return [*messages, {"role": "user", "content": text}]


async def answered(index: ApiSessionIndex, key: str, sid: str, messages: list[dict]) -> None:
    """Record every answered turn of ``messages`` as the gateway would have, one turn at a time."""
    for end in conversation(messages).answered:
        await index.record(key, sid, conversation(messages[: end - 1]).after_reply(messages[end - 1]))


async def record_bulk(channel: PipelinedConnection, index: ApiSessionIndex, key: str, sid: str, messages) -> None:
    """A long session's entries written straight into the index, pipelined (what ``answered`` would write)."""
    request = conversation(messages)
    keys = index.keys(key)
    fields = [part for position in request.answered for part in (request.at(position), f"{position}:{sid}")]
    batch = 20_000
    commands = [("HSET", keys.chains, *fields[start : start + batch]) for start in range(0, len(fields), batch)]
    await channel.call_in_order(*commands, ("HSET", keys.heads, sid, request.answered[-1]))


@pytest.fixture
async def index(channel: PipelinedConnection, key_prefix: str) -> ApiSessionIndex:
    made = ApiSessionIndex(channel, key_prefix)
    await made.lookup("warm-up", conversation(asking(history(1))))  # the scripts loaded: later counts are exact
    await made.record("warm-up", "s0", (1, bytes(16)))
    return made


async def round_trips(channel: PipelinedConnection, index: ApiSessionIndex, key: str, messages) -> tuple[Match, int]:
    request = conversation(messages)  # hashed before counting: only Redis commands count
    before = channel.commands
    match = await index.lookup(key, request)
    return match, channel.commands - before


async def test_a_resent_history_continues_its_session(index, channel):
    assert await round_trips(channel, index, "k1", asking([SYSTEM])) == (Match(None, 0, "new"), 0)
    await answered(index, "k1", "s_a", history(2))
    trimmed = [SYSTEM, *turn(0), turn(1)[0], {"role": "assistant", "content": "  answer\n1 "}]
    assert await round_trips(channel, index, "k1", asking(trimmed)) == (Match("s_a", 5, "continues"), 1)


async def test_a_regenerated_answer_forks_where_its_question_starts(index, channel):
    await answered(index, "k1", "s_a", history(3))
    regenerate = history(3)[:-1]  # the last question again, without the answer it got
    assert await round_trips(channel, index, "k1", regenerate) == (Match("s_a", 5, "forks"), 1)


async def test_an_edit_forks_at_the_last_answer_before_it(index, channel):
    await answered(index, "k1", "s_a", history(4))
    edited = history(4)
    edited[3] = {"role": "user", "content": "question 1, put another way"}
    match, trips = await round_trips(channel, index, "k1", asking(edited))
    assert match == Match("s_a", 3, "forks") and trips == 2  # the prefix, then one HMGET of the earlier points


async def test_a_history_no_session_holds_starts_a_new_one(index, channel):
    await answered(index, "k1", "s_a", history(2))
    stranger = [{"role": "system", "content": "Another bot."}, *history(2)[1:]]
    assert await round_trips(channel, index, "k1", asking(stranger)) == (Match(None, 0, "new"), 2)


async def test_two_keys_never_match_each_others_sessions(index):
    await answered(index, "alice", "s_same", history(2))
    assert await index.lookup("bob", conversation(asking(history(2)))) == Match(None, 0, "new")
    assert await index.lookup("bob", conversation(history(2)[:-1])) == Match(None, 0, "new")
    assert index.keys("alice").chains != index.keys("bob").chains
    assert await index.lookup("alice", conversation(asking(history(2)))) == Match("s_same", 5, "continues")


async def test_the_latest_branch_is_continued_and_the_old_one_stays_whole(index):
    await answered(index, "k1", "s_a", history(2))
    branch = [*history(1), {"role": "user", "content": "something else"}, {"role": "assistant", "content": "ok"}]
    assert (await index.lookup("k1", conversation(branch[:-1]))).kind == "forks"
    await answered(index, "k1", "s_b", branch)
    assert await index.lookup("k1", conversation(asking(branch))) == Match("s_b", 5, "continues")
    assert await index.lookup("k1", conversation(asking(history(2)))) == Match("s_a", 5, "continues")


async def test_a_history_that_goes_on_past_where_its_session_stands_forks(index):
    """Its messages past that point could hold an answer the session stored already (whose record a crash
    lost): appending them would store it twice, so only the fast path ever continues a session."""
    await answered(index, "k1", "s_a", history(2))
    more = [
        *history(2),
        {"role": "user", "content": "aside"},
        {"role": "assistant", "content": "written by the client"},
    ]
    assert await index.lookup("k1", conversation(asking(more))) == Match("s_a", 5, "forks")


async def test_a_late_record_never_moves_the_head_back(index):
    assert await index.record("k1", "s_a", conversation(history(2)[:-1]).after_reply(history(2)[-1])) == 5
    assert await index.record("k1", "s_a", conversation(history(1)[:-1]).after_reply(history(1)[-1])) == 5
    assert await index.lookup("k1", conversation(asking(history(1)))) == Match("s_a", 3, "forks")


async def test_the_index_lives_under_its_keys_hash_tag_and_can_be_forgotten(index, redis: Redis, key_prefix):
    await answered(index, "k1", "s_a", history(3))
    keys = index.keys("k1")
    assert keys.chains == f"{key_prefix}:api:{{k1}}:chains" and keys.heads == f"{key_prefix}:api:{{k1}}:heads"
    assert key_slot(keys.chains.encode()) == key_slot(keys.heads.encode())  # one Redis Cluster slot per API key
    assert await redis.hlen(keys.chains) == 3 and await redis.hgetall(keys.heads) == {"s_a": "7"}
    await index.forget("k1")
    assert await redis.exists(keys.chains, keys.heads) == 0
    assert await index.lookup("k1", conversation(asking(history(3)))) == Match(None, 0, "new")


async def test_a_key_of_another_type_is_refused_before_any_write(index, redis: Redis):
    keys = index.keys("k1")
    await redis.set(keys.heads, "not a hash")
    with pytest.raises(WrongKeyType):
        await index.record("k1", "s_a", (3, bytes(16)))
    assert await redis.exists(keys.chains) == 0


@pytest.mark.timeout(60)
async def test_a_lookup_costs_one_round_trip_however_long_the_session(index, channel):
    messages = history(50_000)  # 100,001 messages, an entry at each of its 50,000 answers
    await record_bulk(channel, index, "k1", "s_long", messages)
    assert await round_trips(channel, index, "k1", asking(messages)) == (Match("s_long", 100_001, "continues"), 1)
    assert await round_trips(channel, index, "k1", messages[:-1]) == (Match("s_long", 99_999, "forks"), 1)


async def test_a_new_session_is_seeded_with_the_clients_history(store: SessionStore, monkeypatch):
    monkeypatch.setattr(api_sessions, "SEED_CHUNK", 2)  # several appends, each under the lock
    request = asking(history(2))
    seed = seed_messages(request, conversation(request).end)
    sid = await seed_session(store, "api:k1/s_new", seed)
    stored = await store.active("api:k1/s_new", sid)
    assert [(message["role"], message["content"]) for message in stored] == [
        (message["role"], message["content"]) for message in history(2)
    ]
    assert await store.acquire_lock("api:k1/s_new", 5) is not None  # released after seeding
    with pytest.raises(VersionConflict, match="locked"):  # and now held: a chat in use is not seeded
        await seed_session(store, "api:k1/s_new", seed_messages(request, 5))


async def test_a_seeded_session_is_never_seeded_twice(store: SessionStore):
    request = asking(history(1))
    await seed_session(store, "api:k1/s_once", seed_messages(request, 3))
    with pytest.raises(VersionConflict, match="already holds messages"):
        await seed_session(store, "api:k1/s_once", seed_messages(request, 3))
    assert len(await store.active("api:k1/s_once", await store.current_session("api:k1/s_once"))) == 3


async def test_the_redis_py_route_finds_the_same_sessions(redis: Redis, key_prefix):
    """Through redis-py, as on Redis Cluster: raw chain hashes go out as they are, entries come back as text."""
    index = ApiSessionIndex(RedisPyChannel(redis), key_prefix)
    await answered(index, "k1", "s_a", history(3))
    assert await index.lookup("k1", conversation(asking(history(3)))) == Match("s_a", 7, "continues")
    assert await index.lookup("k1", conversation(history(3)[:-1])) == Match("s_a", 5, "forks")
    edited = [*history(3)[:3], {"role": "user", "content": "changed"}, *history(3)[4:]]
    assert await index.lookup("k1", conversation(asking(edited))) == Match("s_a", 3, "forks")
