"""SessionStore: sessions, transcript round trips, meta, quarantine, dedupe and key layout on a real server."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from typing import Any

import pytest
from redis.asyncio import Redis

from agent.messages import InvalidMessage, to_api, with_content
from agent.tokens import count_message
from gateway.store import SessionMeta, SessionStore, UnknownSession, VersionConflict

CHAT = "tg:123456"


def conversation() -> list[dict[str, Any]]:
    """A short chat with a tool call, list content and Japanese text."""
    return [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "東京の明日の天気は？ それと会議の時間も。"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_w1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "東京"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_w1", "content": "晴れ、最高気温 23°C"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Also caption this photo 📷"},
                {"type": "image_url", "image_url": {"url": "https://example.invalid/p.png"}},
            ],
        },
        {"role": "assistant", "content": "明日は晴れ（23°C）。会議は 10:00 です。"},
    ]


def fresh_token_total(messages: list[dict[str, Any]]) -> int:
    """Tokens counted from scratch (no cached ``_tok``), the number meta must agree with."""
    return sum(count_message(message) for message in to_api(messages))


async def started(store: SessionStore, chat: str = CHAT) -> tuple[str, Any]:
    sid = await store.current_session(chat)
    lock = await store.acquire_lock(chat, 30)
    assert lock is not None
    return sid, lock


# --------------------------------------------------------------------------- sessions


async def test_current_session_is_created_once_even_when_raced(store: SessionStore) -> None:
    sids = await asyncio.gather(*(store.current_session(CHAT) for _ in range(10)))
    assert len(set(sids)) == 1
    assert await store.current_session(CHAT) == sids[0]
    meta = await store.meta(CHAT, sids[0])
    assert (meta.tokens, meta.count, meta.compaction_count, meta.parent_session_id) == (0, 0, 0, None)


async def test_new_session_moves_the_pointer_and_continues_the_parents_ids(store: SessionStore) -> None:
    sid, lock = await started(store)
    old_ids = await store.append(CHAT, sid, conversation(), lock=lock)
    await store.update_meta(CHAT, sid, lock=lock, model="claude-sonnet-4")

    fresh = await store.new_session(CHAT, parent=sid)

    assert fresh != sid and await store.current_session(CHAT) == fresh
    meta = await store.meta(CHAT, fresh)
    assert meta.parent_session_id == sid and meta.model == "claude-sonnet-4" and meta.count == 0
    new_ids = await store.append(CHAT, fresh, [{"role": "user", "content": "fresh start"}], lock=lock)
    assert int(new_ids[0]) > max(int(i) for i in old_ids)
    assert len(await store.active(CHAT, sid)) == len(old_ids)  # the old session is still there


async def test_unknown_session_is_reported(store: SessionStore) -> None:
    with pytest.raises(UnknownSession):
        await store.meta(CHAT, "feedbeef")
    with pytest.raises(UnknownSession):
        await store.active(CHAT, "feedbeef")


def test_chat_and_prefix_that_would_break_the_hash_tag_are_refused(redis: Redis) -> None:
    with pytest.raises(ValueError):
        SessionStore(redis, prefix="fg{x}")
    store = SessionStore(redis, prefix="fg")
    for bad in ("", "tg:{1}", "}"):
        with pytest.raises(ValueError):
            store.keys(bad)


# --------------------------------------------------------------------------- append / read


async def test_append_and_read_round_trip_keeps_every_message_exactly(store: SessionStore) -> None:
    sid, lock = await started(store)
    original = conversation()
    given = copy.deepcopy(original)

    ids = await store.append(CHAT, sid, given, lock=lock)
    active = await store.active(CHAT, sid)

    assert to_api(active) == to_api(original)
    assert [m["_id"] for m in active] == ids == [str(n) for n in range(1, 7)]
    assert [m["_id"] for m in given] == ids  # the caller's dicts learn their ids
    for message in active:
        assert message["_tok"] == count_message(to_api([message])[0])
        assert isinstance(message["_ts"], float)
    assert active[1]["content"] == "東京の明日の天気は？ それと会議の時間も。"
    assert active[2]["tool_calls"][0]["function"]["arguments"] == '{"city": "東京"}'
    assert active[4]["content"][1]["image_url"]["url"] == "https://example.invalid/p.png"


async def test_underscore_metadata_is_stored_and_an_existing_timestamp_kept(store: SessionStore) -> None:
    sid, lock = await started(store)
    message = {"role": "user", "content": "hi", "_ts": 1_700_000_000.5, "_platform_message_id": 42}
    await store.append(CHAT, sid, [message], lock=lock)
    (stored,) = await store.active(CHAT, sid)
    assert stored["_ts"] == 1_700_000_000.5 and stored["_platform_message_id"] == 42


async def test_meta_totals_match_agent_token_counts(store: SessionStore) -> None:
    sid, lock = await started(store)
    first, second = conversation()[:3], conversation()[3:]
    await store.append(CHAT, sid, first, lock=lock)
    await store.append(CHAT, sid, second, lock=lock)

    meta = await store.meta(CHAT, sid)
    assert meta.tokens == fresh_token_total(conversation())
    assert meta.count == 6
    assert meta.version == 2
    assert meta.last_activity_at is not None and meta.updated_at >= meta.created_at


async def test_an_invalid_message_is_named_and_nothing_is_written(store: SessionStore) -> None:
    sid, lock = await started(store)
    batch = conversation()
    batch.insert(3, {"role": "tool", "content": "result without a call id"})
    with pytest.raises(InvalidMessage, match="message 3: tool message needs a string tool_call_id"):
        await store.append(CHAT, sid, batch, lock=lock)
    with pytest.raises(InvalidMessage, match="JSON"):
        await store.append(CHAT, sid, [{"role": "user", "content": "x", "_extra": {1, 2}}], lock=lock)

    assert await store.active(CHAT, sid) == []
    meta = await store.meta(CHAT, sid)
    assert (meta.tokens, meta.count, meta.version) == (0, 0, 0)


async def test_appending_an_already_stored_message_is_refused(store: SessionStore) -> None:
    sid, lock = await started(store)
    await store.append(CHAT, sid, conversation(), lock=lock)
    stored = await store.active(CHAT, sid)
    with pytest.raises(InvalidMessage, match="already stored"):
        await store.append(CHAT, sid, [stored[1]], lock=lock)
    edited = with_content(stored[1], "edited")
    await store.append(CHAT, sid, [edited], lock=lock)
    assert (await store.active(CHAT, sid))[-1]["_orig_id"] == stored[1]["_id"]


async def test_get_messages_returns_any_stored_version_in_the_order_asked(store: SessionStore) -> None:
    sid, lock = await started(store)
    ids = await store.append(CHAT, sid, conversation(), lock=lock)
    found = await store.get_messages(CHAT, sid, [ids[3], "999", ids[0]])
    assert [m["_id"] for m in found] == [ids[3], ids[0]]
    assert found[0]["content"] == "晴れ、最高気温 23°C"


# --------------------------------------------------------------------------- meta


async def test_update_meta_round_trips_guard_state_and_clears_with_none(store: SessionStore) -> None:
    sid, lock = await started(store)
    state = {"cooldown_until": 1_800_000_000.0, "ineffective_strikes": 2, "note": "減速"}
    version = await store.update_meta(
        CHAT,
        sid,
        lock=lock,
        engine_state=state,
        last_prompt_tokens=91_000,
        tokens_at_report=40,
        previous_summary="[CONTEXT COMPACTION] Goal: ship",
        model="gpt-5.5",
    )
    meta = await store.meta(CHAT, sid)
    assert isinstance(meta, SessionMeta) and meta.version == version == 1
    assert meta.engine_state == state
    assert (meta.last_prompt_tokens, meta.tokens_at_report, meta.model) == (91_000, 40, "gpt-5.5")

    await store.update_meta(CHAT, sid, lock=lock, last_prompt_tokens=None, previous_summary=None)
    meta = await store.meta(CHAT, sid)
    assert meta.last_prompt_tokens is None and meta.previous_summary is None and meta.version == 2


async def test_update_meta_refuses_store_managed_and_unknown_fields(store: SessionStore) -> None:
    sid, lock = await started(store)
    for fields in (
        {"tokens": 5},
        {"version": 9},
        {"colour": "red"},
        {"last_prompt_tokens": -1},
        {"engine_state": {"guard": {"cooldown_until": float("inf")}}},  # would read back as null
        {"usage_totals": {"prompt_tokens": float("nan")}},
        {"engine_state": {"note": "\ud800"}},
    ):  # a lone surrogate is no UTF-8 text
        with pytest.raises(ValueError):
            await store.update_meta(CHAT, sid, lock=lock, **fields)
    assert (await store.meta(CHAT, sid)).version == 0


async def test_meta_is_one_small_call_whatever_the_transcript_size(store: SessionStore, redis: Redis) -> None:
    lock = await store.acquire_lock(CHAT, 30)
    small = await store.current_session(CHAT)
    await store.append(CHAT, small, conversation()[:2], lock=lock)
    big = await store.new_session(CHAT)
    for _ in range(20):
        await store.append(CHAT, big, conversation() * 10, lock=lock)

    commands: list[tuple[Any, ...]] = []
    original = redis.execute_command

    async def spy(*args: Any, **options: Any) -> Any:
        commands.append(args)
        return await original(*args, **options)

    redis.execute_command = spy  # type: ignore[method-assign]
    try:
        small_meta = await store.meta(CHAT, small)
        big_meta = await store.meta(CHAT, big)
    finally:
        del redis.execute_command
    assert [args[0] for args in commands] == ["HGETALL", "HGETALL"]
    assert big_meta.count == 1200 and big_meta.tokens > 100 * small_meta.tokens
    keys = store.keys(CHAT)
    assert await redis.hlen(keys.meta(big)) == await redis.hlen(keys.meta(small))


# --------------------------------------------------------------------------- quarantine


async def test_corrupted_entries_are_quarantined_reported_and_the_chat_keeps_working(
    store: SessionStore, redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    sid, lock = await started(store)
    ids = await store.append(CHAT, sid, conversation(), lock=lock)
    keys = store.keys(CHAT)
    await redis.hset(keys.msg(sid), ids[1], '{"role": "user", "content": "cut off')
    await redis.hset(keys.msg(sid), ids[5], json.dumps({"role": "robot", "content": "beep"}))
    await redis.hdel(keys.msg(sid), ids[4])
    version_before = (await store.meta(CHAT, sid)).version

    with caplog.at_level(logging.WARNING, logger="gateway.store"):
        active = await store.active(CHAT, sid)

    assert [m["_id"] for m in active] == [ids[0], ids[2], ids[3]]
    records = {record["id"]: record for record in await store.quarantined(CHAT)}
    assert set(records) == {ids[1], ids[4], ids[5]}
    assert records[ids[1]]["raw"] == '{"role": "user", "content": "cut off'
    assert "not valid JSON" in records[ids[1]]["reason"]
    assert "role must be one of" in records[ids[5]]["reason"]
    assert records[ids[4]]["raw"] is None and "missing" in records[ids[4]]["reason"]
    assert all(record["session_id"] == sid for record in records.values())
    assert sum("quarantined message" in r.getMessage() for r in caplog.records) == 3

    meta = await store.meta(CHAT, sid)
    assert (meta.count, meta.tokens) == (3, fresh_token_total(active))
    assert meta.version == version_before + 1
    assert await redis.lrange(keys.active(sid), 0, -1) == [ids[0], ids[2], ids[3]]

    # The chat keeps working: a new turn appends and reads back with correct totals.
    await store.append(CHAT, sid, [{"role": "user", "content": "still there?"}], lock=lock)
    active = await store.active(CHAT, sid)
    assert active[-1]["content"] == "still there?" and len(active) == 4
    assert (await store.meta(CHAT, sid)).tokens == fresh_token_total(active)
    assert len(await store.quarantined(CHAT)) == 3  # nothing quarantined twice


# --------------------------------------------------------------------------- dedupe


async def test_duplicate_update_ids_are_dropped_for_at_least_a_day(store: SessionStore, redis: Redis) -> None:
    assert await store.seen(CHAT, 1001) is True
    assert await store.seen(CHAT, 1001) is False
    assert await store.seen(CHAT, "1001") is False
    assert await store.seen("dc:77", 1001) is True  # another chat's update id is its own
    assert await redis.ttl(store.keys(CHAT).seen(1001)) >= 86_400 - 5
    with pytest.raises(ValueError):
        await store.seen(CHAT, 1002, ttl_seconds=60)


# --------------------------------------------------------------------------- key layout


def hash_tag(key: str) -> str:
    """The part Redis Cluster hashes: between the first '{' and the next '}' (whole key if none)."""
    start = key.find("{")
    end = key.find("}", start + 1)
    if start == -1 or end == -1 or end == start + 1:
        return key
    return key[start + 1 : end]


async def test_every_key_of_a_chat_shares_one_hash_tag(store: SessionStore, redis: Redis, key_prefix: str) -> None:
    sid, lock = await started(store)
    ids = await store.append(CHAT, sid, conversation(), lock=lock)
    await store.update_meta(CHAT, sid, lock=lock, engine_state={"strikes": 0})
    await store.seen(CHAT, 555)
    await redis.hset(store.keys(CHAT).msg(sid), ids[5], "garbage")
    await store.active(CHAT, sid)
    kept = await store.get_messages(CHAT, sid, ids[:1])
    summary = {"role": "user", "content": "[CONTEXT COMPACTION] Goal: weather"}
    await store.commit_compaction(CHAT, sid, [*kept, summary], lock=lock, in_place=True, compaction_id="c1")
    rotated = await store.commit_compaction(CHAT, sid, [*kept, summary], lock=lock, in_place=False, compaction_id="c2")
    other_sid, other_lock = await started(store, "dc:42")
    await store.append("dc:42", other_sid, conversation()[:2], lock=other_lock)

    names = [key async for key in redis.scan_iter(match=f"{key_prefix}:*")]
    by_chat: dict[str, set[str]] = {}
    for name in names:
        by_chat.setdefault(hash_tag(name), set()).add(name.split("}", 1)[1])
    assert set(by_chat) == {CHAT, "dc:42"}
    new = rotated.session_id
    assert by_chat[CHAT] == {
        ":session",
        ":sessions",
        ":lock",
        ":fence",
        ":quarantine",
        ":seen:555",
        ":compaction:c1",
        ":compaction:c2",
        f":s:{sid}:meta",
        f":s:{sid}:msg",
        f":s:{sid}:active",
        f":s:{sid}:archive",
        f":s:{new}:meta",
        f":s:{new}:msg",
        f":s:{new}:active",
    }
    assert all(name.startswith(f"{key_prefix}:{{{hash_tag(name)}}}:") for name in names)


async def test_writes_to_a_session_continued_elsewhere_are_refused(store: SessionStore) -> None:
    sid, lock = await started(store)
    await store.append(CHAT, sid, conversation(), lock=lock)
    kept = (await store.active(CHAT, sid))[-2:]
    await store.commit_compaction(CHAT, sid, kept, lock=lock, in_place=False, compaction_id="rot")
    with pytest.raises(VersionConflict, match="continued in session"):
        await store.append(CHAT, sid, [{"role": "user", "content": "lost?"}], lock=lock)
    with pytest.raises(VersionConflict):
        await store.update_meta(CHAT, sid, lock=lock, model="x")
