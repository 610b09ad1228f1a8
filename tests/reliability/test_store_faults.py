"""Store faults that lost, duplicated or stranded messages: a stale worker replying after an in-loop
compaction, a session pointer to nothing, an intake that marked a message seen before storing it,
and a reset id counter overwriting stored bodies."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable

import pytest
from redis.asyncio import Redis

from agent.compaction.summary_prompt import SECTION_HEADINGS, SYSTEM_PROMPT
from gateway.events import CompressEvent
from gateway.store import ChatKeys, Lock, SessionStore, StaleLock, WrongKeyType
from gateway.store.channel import PipelinedConnection
from gateway.store.inbox import Inbox
from tests.fakes.gateway import make_settings, message, running_gateway
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.fakes.redis_time import until_gone
from tests.fakes.waiting import wait_for

NOTES = "\n".join(f"{heading}\n- noted" for heading in SECTION_HEADINGS)
WINDOW = 20_000


def is_summary(request: RecordedRequest) -> bool:
    return SYSTEM_PROMPT[:40] in request.system


def log_line(rng: random.Random, index: int) -> str:
    return (
        f"{index}: deploy {rng.choice(('api', 'worker', 'cron'))} took {rng.randint(10, 900)}s on "
        f"node-{rng.randint(1, 60)}, {rng.randint(1, 9000)} requests queued, error rate {rng.random():.3f}"
    )


def tool_loop(
    final: Reply, held_until: asyncio.Event | None = None
) -> tuple[dict[str, int], Callable[[RecordedRequest], Reply | Awaitable[Reply]]]:
    """A provider for the question turn: two tool rounds reporting 60% of the window (an in-loop
    compaction follows), then ``final`` — kept back until ``held_until`` is set, when given; ``ok`` for
    anything asked before the question."""
    seen = {"question": 0}

    async def held(reply: Reply) -> Reply:
        assert held_until is not None
        await held_until.wait()
        return reply

    def answer(request: RecordedRequest) -> Reply | Awaitable[Reply]:
        if is_summary(request):
            return Reply.answer(NOTES)
        if "which deploy" not in " ".join(str(m.get("content")) for m in request.messages if m.get("role") == "user"):
            return Reply.answer("ok")
        step = seen["question"]
        seen["question"] += 1
        if step < 2:
            reply = Reply.tool_call("session_search", {"query": "deploy api"}, call_id=f"call_{step}")
            reply.usage = {
                "prompt_tokens": int(WINDOW * 0.6),
                "completion_tokens": 20,
                "total_tokens": int(WINDOW * 0.6) + 20,
            }
            return reply
        return final if held_until is None else held(final)

    return seen, answer


async def held_session(store: SessionStore, chat: str, texts: list[str]) -> tuple[ChatKeys, str, Lock]:
    """The chat's keys, its session holding ``texts`` as user messages, and the lock it was written under."""
    sid = await store.current_session(chat)
    lock = await store.acquire_lock(chat, 30)
    assert lock is not None
    await store.append(chat, sid, [{"role": "user", "content": text} for text in texts], lock=lock)
    return store.keys(chat), sid, lock


# --------------------------------------------------------------------------- 1. stale worker, in-loop compaction


async def test_a_worker_whose_lock_expired_mid_turn_does_not_reply_after_an_in_loop_compaction(
    redis: Redis, redis_url: str, key_prefix: str
) -> None:
    rng = random.Random(15)
    # The stalled worker's last answer comes only after the second worker replied: its turn outlives its lock
    # however long the takeover takes.
    second_replied = asyncio.Event()
    seen_a, answer_a = tool_loop(Reply.answer("late reply from the stalled worker"), held_until=second_replied)
    _seen_b, answer_b = tool_loop(Reply.answer("the api deploy was slowest"))
    async with (
        FakeLLMServer(handler=answer_a, context_limit=WINDOW) as server_a,
        FakeLLMServer(handler=answer_b, context_limit=WINDOW) as server_b,
    ):
        settings_a = make_settings(redis_url, key_prefix, server_a.openai_base_url, context_length=WINDOW)
        settings_b = make_settings(redis_url, key_prefix, server_b.openai_base_url, context_length=WINDOW)
        async with running_gateway(settings_a, redis, lock_ttl_seconds=1.0) as (runner_a, adapter_a, _events_a):
            await runner_a.intake(message("ops", "u-0", "hello"))
            await runner_a.wait_idle()
            for index in range(60):
                await runner_a.intake(message("ops", f"log-{index}", log_line(rng, index), respond=False))
            await runner_a.wait_idle()
            sent_before = len(adapter_a.sent)
            # The stalled process: its turn goes on, but nothing keeps its lock alive meanwhile.
            runner_a.keeper.hold = lambda lock, owner: None  # type: ignore[method-assign]
            await runner_a.intake(message("ops", "ask", "which deploy was slowest?"))
            await wait_for(lambda: seen_a["question"] >= 3, what="the stalled worker's final model call")
            async with running_gateway(settings_b, redis, lock_ttl_seconds=1.0) as (_runner_b, adapter_b, events_b):
                await wait_for(lambda: adapter_b.sent, what="the second worker's reply")
                second_replied.set()
                await wait_for(lambda: runner_a.busy_chats == 0, what="the stalled worker to finish")
                await runner_a.wait_idle()
    assert adapter_b.sent == [("ops", "the api deploy was slowest")]
    assert [e.trigger for e in events_b if isinstance(e, CompressEvent)] == ["in_loop"]
    assert any(is_summary(r) for r in server_a.requests)  # the stalled worker compacted in its loop too
    assert adapter_a.sent[sent_before:] == []  # ... and, refused as stale, never replied


async def test_a_replayed_compaction_commit_is_refused_to_a_holder_whose_lock_expired(store: SessionStore) -> None:
    chat = "tg:replay"
    sid = await store.current_session(chat)
    first = await store.acquire_lock(chat, 0.2)
    assert first is not None
    await store.append(chat, sid, [{"role": "user", "content": f"m{i}"} for i in range(4)], lock=first)
    await until_gone(store.redis, store.keys(chat).lock)  # the first holder's lock ran out
    second = await store.acquire_lock(chat, 30)
    assert second is not None
    active = await store.active(chat, sid)
    summary = {"role": "user", "content": "[summary] four messages"}
    await store.commit_compaction(chat, sid, [summary, active[-1]], lock=second, in_place=True, compaction_id="e:turn")
    with pytest.raises(StaleLock):
        await store.commit_compaction(
            chat, sid, [dict(summary), active[-1]], lock=first, in_place=True, compaction_id="e:turn"
        )
    again = await store.commit_compaction(
        chat, sid, [dict(summary), active[-1]], lock=second, in_place=True, compaction_id="e:turn"
    )
    assert again.replayed  # the holder itself still gets its commit's answer


# --------------------------------------------------------------------------- 2. pointer to a missing session


async def test_a_chat_pointing_at_a_missing_session_is_answered_in_a_new_session(
    redis: Redis, redis_url: str, key_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    chat = "local:lost"
    keys = ChatKeys(key_prefix, chat)
    async with FakeLLMServer(handler=lambda r: Reply.answer(f"echo: {r.last_user_text}")) as server:
        settings = make_settings(redis_url, key_prefix, server.openai_base_url, context_length=WINDOW)
        async with running_gateway(settings, redis) as (runner, adapter, _events):
            await runner.intake(message("lost", "u-1", "first"))
            await runner.wait_idle()
            old_sid = await redis.get(keys.session)
            old_bodies = await redis.hgetall(keys.msg(old_sid))
            await redis.delete(keys.meta(old_sid))  # the meta is gone; the bodies are still stored
            await redis.set(keys.session, old_sid)
            caplog.clear()
            with caplog.at_level(logging.WARNING):
                await runner.intake(message("lost", "u-2", "are you there?"))
                await runner.wait_idle()
    assert adapter.sent[-1] == ("lost", "echo: are you there?")
    new_sid = await redis.get(keys.session)
    assert new_sid != old_sid
    assert await redis.hgetall(keys.msg(old_sid)) == old_bodies  # what was stored is kept
    store = SessionStore(redis, key_prefix)
    assert [m["content"] for m in await store.active(chat, new_sid)][-2:] == ["are you there?", "echo: are you there?"]
    assert not [r for r in caplog.records if r.exc_info]  # no traceback, let alone one every few seconds
    assert len([r for r in caplog.records if "does not exist" in r.getMessage()]) == 1


# --------------------------------------------------------------------------- 3. intake checks before it writes


@pytest.mark.parametrize("planted", ["inbox", "seen"])
async def test_an_intake_that_cannot_store_the_message_fails_and_its_retry_stores_it_once(
    redis: Redis, key_prefix: str, channel: PipelinedConnection, planted: str
) -> None:
    inbox = Inbox(redis, key_prefix, channel=channel)
    incoming = message("c1", "77", "please keep me")
    keys = ChatKeys(key_prefix, incoming.chat)
    wrong = keys.inbox if planted == "inbox" else keys.seen("local:77")
    await redis.hset(wrong, "planted", "by hand")
    with pytest.raises(WrongKeyType):
        await inbox.put(incoming)  # the platform is not acknowledged: it retries
    if planted == "inbox":
        assert not await redis.exists(keys.seen("local:77"))
    await redis.delete(wrong)
    assert await inbox.put(incoming) is True
    assert await inbox.put(incoming) is False  # a real redelivery is still a duplicate
    stored = await redis.lrange(keys.inbox, 0, -1)
    assert [e for e in stored if '"please keep me"' in e] and len(stored) == 1


async def test_store_scripts_write_nothing_when_a_key_or_counter_is_wrong(store: SessionStore, redis: Redis) -> None:
    chat = "tg:checks"
    keys, sid, lock = await held_session(store, chat, ["hi"])
    await redis.hset(keys.meta(sid), "count", "many")
    before = await redis.hgetall(keys.meta(sid)), await redis.hgetall(keys.msg(sid))
    with pytest.raises(WrongKeyType):
        await store.append(chat, sid, [{"role": "user", "content": "more"}], lock=lock)
    assert (await redis.hgetall(keys.meta(sid)), await redis.hgetall(keys.msg(sid))) == before
    await redis.hset(keys.meta(sid), "count", "1")
    # Finishing an entry with an inbox of the wrong type: the meta change is not applied either.
    await redis.set(keys.inbox, "not a list")
    with pytest.raises(WrongKeyType):
        await store.finish_entry(lock, sid, "entry", replied_entry_id="x")
    assert (await store.meta(chat, sid)).replied_entry_id is None
    # Claiming a chat whose inbox cannot be read leaves no lock behind and the fence unchanged.
    await store.release_lock(lock)
    fence = await redis.get(keys.fence)
    with pytest.raises(Exception):
        await store.claim(chat, 30)
    assert not await redis.exists(keys.lock) and await redis.get(keys.fence) == fence


# --------------------------------------------------------------------------- 4. a reset id counter


async def test_a_reset_id_counter_never_overwrites_a_stored_body(store: SessionStore, redis: Redis) -> None:
    chat = "tg:counter"
    keys, sid, lock = await held_session(store, chat, [f"original {i}" for i in range(5)])
    before = await redis.hgetall(keys.msg(sid))
    await redis.hset(keys.meta(sid), "next_id", "0")

    new = {"role": "user", "content": "after the reset"}
    [new_id] = await store.append(chat, sid, [new], lock=lock)
    after = await redis.hgetall(keys.msg(sid))
    assert {k: after[k] for k in before} == before  # byte-identical
    assert new_id not in before and '"after the reset"' in after[new_id]
    [next_id] = await store.append(chat, sid, [{"role": "user", "content": "and another"}], lock=lock)
    assert next_id not in after

    # A compaction's new messages are held to the same rule.
    stored = await redis.hgetall(keys.msg(sid))
    await redis.hset(keys.meta(sid), "next_id", "1")
    active = await store.active(chat, sid)
    commit = await store.commit_compaction(
        chat,
        sid,
        [{"role": "user", "content": "[summary]"}, active[-1]],
        lock=lock,
        in_place=True,
        compaction_id="reset",
    )
    final = await redis.hgetall(keys.msg(sid))
    assert {k: final[k] for k in stored} == stored
    assert commit.active_ids[0] not in stored
