"""A repaired transcript is stored once: the stand-in for a call whose result was never stored is
written right after the call, orphans leave for the quarantine, and the next turn reads a whole
transcript and repairs (and logs) nothing. A repair that loses a race stores nothing."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from redis.asyncio import Redis

from agent.messages import pair_problems
from agent.transcript_repair import MISSING_RESULT, repair_for_turn
from gateway.store import SessionStore
from gateway.store.channel import PipelinedConnection
from tests.fakes.gateway import make_settings, message, running_gateway
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply

CHAT = "tg:5150"
REPAIR_LOG = "agent.transcript_repair"


def call(*ids: str) -> dict[str, Any]:
    calls = [{"id": i, "type": "function", "function": {"name": "lookup", "arguments": "{}"}} for i in ids]
    return {"role": "assistant", "content": None, "tool_calls": calls}


def result(call_id: str, content: str = "found") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def shape(messages: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What a request is made of (roles, ids, contents), without the store's local metadata."""
    return [(m["role"], m.get("tool_call_id"), m.get("content"), len(m.get("tool_calls") or ())) for m in messages]


@pytest_asyncio.fixture(params=[0, 1_000_000], ids=["uncached", "cached"])
async def stores(
    request: pytest.FixtureRequest, redis: Redis, key_prefix: str, channel: PipelinedConnection
) -> AsyncIterator[tuple[SessionStore, SessionStore]]:
    """This process's store and another process's (its own connection and cache), same cache budget."""
    other = PipelinedConnection.like(redis)
    try:
        yield (
            SessionStore(redis, key_prefix, channel=channel, transcript_cache_tokens=request.param),
            SessionStore(redis, key_prefix, channel=other, transcript_cache_tokens=request.param),
        )
    finally:
        await other.aclose()


async def plant(store: SessionStore, messages: list[dict[str, Any]]) -> tuple[str, list[str]]:
    """Store ``messages`` as the chat's live transcript, as a crash between a call and its result leaves it."""
    sid = await store.current_session(CHAT)
    lock = await store.acquire_lock(CHAT, 30)
    assert lock is not None
    try:
        return sid, await store.append(CHAT, sid, messages, lock=lock)
    finally:
        await store.release_lock(lock)


async def turn(store: SessionStore) -> list[dict[str, Any]]:
    """What a turn reads and sends: the snapshot, repaired as the gateway's turn repairs it."""
    sid, meta, history = await store.snapshot(CHAT)
    return await repair_for_turn(store, CHAT, sid, meta.version, history)


async def stored_ids(store: SessionStore, sid: str) -> list[str]:
    return [m["_id"] for m in await store.active(CHAT, sid)]


def repair_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == REPAIR_LOG and r.levelno >= logging.WARNING]


async def test_the_first_turn_stores_the_stand_in_right_after_the_call_and_the_next_repairs_nothing(stores, caplog):
    store, _other = stores
    sid, ids = await plant(
        store, [user("find it"), call("a"), user("and then?"), {"role": "assistant", "content": "ok"}]
    )
    _, before, _ = await store.snapshot(CHAT)
    with caplog.at_level(logging.WARNING, logger=REPAIR_LOG):
        first = await turn(store)
    assert len(repair_warnings(caplog)) == 1 and "stored the transcript's repair" in repair_warnings(caplog)[0]

    stand_in = first[2]
    assert stand_in["content"] == MISSING_RESULT and stand_in["tool_call_id"] == "a" and "_id" in stand_in
    assert await stored_ids(store, sid) == [ids[0], ids[1], stand_in["_id"], ids[2], ids[3]]
    meta = await store.meta(CHAT, sid)
    active = await store.active(CHAT, sid)
    assert meta.version == before.version + 1 and meta.count == 5
    assert meta.tokens == sum(m["_tok"] for m in active)
    assert [m for m in active if m.get("tool_call_id") == "a"] == [active[2]]  # stored once

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=REPAIR_LOG):
        second = await turn(store)
    assert repair_warnings(caplog) == []
    assert shape(second) == shape(first) and [m["_id"] for m in second] == [m["_id"] for m in first]
    assert pair_problems([*second, user("next")]) == []
    assert (await store.meta(CHAT, sid)).version == meta.version  # nothing written the second time


async def test_stand_ins_go_after_the_answered_results_of_their_call_and_orphans_leave_in_the_same_step(stores):
    store, _other = stores
    sid, ids = await plant(
        store,
        [
            user("two lookups"),
            call("a", "b"),
            result("b"),
            user("more"),
            call("c"),
            result("ghost", "orphan body"),
            user("last"),
            call("d", "e"),
        ],
    )
    version = (await store.meta(CHAT, sid)).version
    sent = await turn(store)
    assert pair_problems([*sent, user("next")]) == []

    active = await store.active(CHAT, sid)
    by_call = {m["tool_call_id"]: m["_id"] for m in active if m.get("content") == MISSING_RESULT}
    assert set(by_call) == {"a", "c", "d", "e"}
    assert [m["_id"] for m in active] == [
        ids[0],
        ids[1],
        ids[2],
        by_call["a"],
        ids[3],
        ids[4],
        by_call["c"],
        ids[6],
        ids[7],
        by_call["d"],
        by_call["e"],
    ]
    assert [r["id"] for r in await store.quarantined(CHAT)] == [ids[5]]
    assert (await store.get_messages(CHAT, sid, [ids[5]]))[0]["content"] == "orphan body"  # never deleted
    meta = await store.meta(CHAT, sid)
    assert meta.version == version + 1 and meta.count == len(active)
    assert meta.tokens == sum(m["_tok"] for m in active)
    assert [m["_id"] for m in sent] == [m["_id"] for m in active]
    assert pair_problems(active) == []


async def test_a_repair_that_loses_a_race_stores_nothing_and_the_next_turn_stores_it(stores, caplog):
    store, other = stores
    sid, ids = await plant(store, [user("find it"), call("a")])
    _, meta, history = await store.snapshot(CHAT)
    await plant(other, [user("a message another worker stored meanwhile")])  # moves the version
    moved = await store.meta(CHAT, sid)

    with caplog.at_level(logging.WARNING, logger=REPAIR_LOG):
        sent = await repair_for_turn(store, CHAT, sid, meta.version, history)
    assert "waits for the next turn" in repair_warnings(caplog)[0]
    assert shape(sent) == shape([user("find it"), call("a"), result("a", MISSING_RESULT)])  # still repaired
    assert "_id" not in sent[2]
    assert await stored_ids(store, sid) == [*ids, str(int(ids[-1]) + 1)]
    assert await store.meta(CHAT, sid) == moved  # unchanged: not even the version moved

    repaired = await turn(store)
    active = await store.active(CHAT, sid)
    assert [m["_id"] for m in active] == [ids[0], ids[1], repaired[2]["_id"], str(int(ids[-1]) + 1)]
    assert active[2]["content"] == MISSING_RESULT and active[3]["content"].startswith("a message another")


async def test_a_placement_whose_neighbour_changed_is_refused_whole(stores):
    store, _other = stores
    sid, ids = await plant(store, [user("find it"), call("a"), user("next")])
    meta = await store.meta(CHAT, sid)
    stand_in = result("a", MISSING_RESULT)
    placed = [(ids[1], ids[0], [stand_in])]  # read as if the call were followed by the first message
    applied = await store.store_repair(CHAT, sid, meta.version, await store.active(CHAT, sid), [], "", placed)
    assert not applied and "_id" not in stand_in
    assert await stored_ids(store, sid) == ids and await store.meta(CHAT, sid) == meta


async def test_a_session_continued_elsewhere_is_not_repaired_in_place(stores, redis: Redis):
    store, _other = stores
    sid, ids = await plant(store, [user("find it"), call("a")])
    await redis.hset(store.keys(CHAT).meta(sid), "successor_session_id", "elsewhere")
    sent = await turn(store)
    assert sent[2]["content"] == MISSING_RESULT and "_id" not in sent[2]
    assert await stored_ids(store, sid) == ids


async def test_another_process_holding_the_transcript_reads_the_stored_stand_in(stores, caplog):
    store, other = stores
    sid, ids = await plant(store, [user("find it"), call("a"), user("next")])
    await other.snapshot(CHAT)  # the other process holds the broken transcript (when caching)
    await turn(store)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=REPAIR_LOG):
        seen = await turn(other)
    assert repair_warnings(caplog) == []
    assert [m["_id"] for m in seen] == await stored_ids(store, sid)
    assert seen[2]["content"] == MISSING_RESULT and seen[3]["_id"] == ids[2]


# --------------------------------------------------------------------------- through a running gateway


def echo(request: RecordedRequest) -> Reply:
    return Reply.answer(f"echo: {request.last_user_text}")


async def test_the_gateway_repairs_a_dangling_call_once_and_later_requests_carry_it_stored(
    redis, redis_url, key_prefix, caplog
):
    async with FakeLLMServer(handler=echo) as server:
        settings = make_settings(redis_url, key_prefix, server.openai_base_url, context_length=32_000)
        async with running_gateway(settings, redis) as (runner, adapter, _events):
            chat = message("c", "x", "").chat
            await runner.intake(message("c", "c-0", "first"))
            await runner.wait_idle()
            sid = await runner.store.current_session(chat)
            lock = await runner.store.acquire_lock(chat, 30)
            [call_id] = await runner.store.append(chat, sid, [call("call_dangling")], lock=lock)
            await runner.store.release_lock(lock)
            with caplog.at_level(logging.WARNING, logger=REPAIR_LOG):
                for index, text in enumerate(["second", "third", "fourth"], 1):
                    await runner.intake(message("c", f"c-{index}", text))
                    await runner.wait_idle()
            active = await runner.store.active(chat, sid)
    assert [text for _chat, text in adapter.sent] == ["echo: first", "echo: second", "echo: third", "echo: fourth"]
    assert len(repair_warnings(caplog)) == 1
    answers = [m for m in active if m.get("tool_call_id") == "call_dangling"]
    assert len(answers) == 1 and answers[0]["content"] == MISSING_RESULT
    position = [m["_id"] for m in active].index(call_id)
    assert active[position + 1] is answers[0]
    assert pair_problems(active) == []
    second, third = server.requests[1].messages, server.requests[2].messages
    assert second == third[: len(second)]  # the later turn sends the same history, then its own turn
    assert sum(MISSING_RESULT in str(m.get("content")) for m in third) == 1
