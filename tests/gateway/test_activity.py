"""The activity log: every chat's turns, compactions and errors, kept in Redis for the operator view."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway.events import CompressEvent, TurnErrorEvent, TurnEvent
from gateway.platforms.base import IncomingMessage
from gateway.store.activity import ActivityLog, expand_ranges, id_ranges
from gateway.store.inbox import Inbox
from tests.fakes.gateway import make_settings, message, running_gateway
from tests.fakes.llm_server import FakeLLMServer, Reply


def turn(chat: str = "tg:1", **fields) -> TurnEvent:
    values = dict(
        platform="tg",
        chat=chat,
        session_id="s1",
        prompt_tokens=1200,
        completion_tokens=40,
        cache_read_tokens=1000,
        cache_write_tokens=100,
        latency_ms=12.0,
        model="m",
        cost_usd=0.002,
        saved_usd=0.003,
        context_tokens=5000,
        context_window=200_000,
    )
    return TurnEvent(**{**values, **fields})


def compaction(chat: str = "tg:1", **fields) -> CompressEvent:
    values = dict(
        platform="tg",
        chat=chat,
        session_id="s1",
        old_session_id="",
        in_place=True,
        compression_count=1,
        trigger="hygiene",
        tokens_before=170_000,
        tokens_after=21_000,
        summarizer="deterministic",
        summary_id="900",
        archived_ids=[str(i) for i in range(3, 500)] + ["x7", "502"],
    )
    return CompressEvent(**{**values, **fields})


@given(
    st.lists(
        st.one_of(
            st.integers(0, 400).map(str),
            st.text("abc-:", min_size=1, max_size=4).filter(
                lambda t: not t.isdigit() and "," not in t and "-" not in t
            ),
        )
    )
)
def test_archived_ids_come_back_exactly_as_written(ids):
    assert expand_ranges(id_ranges(ids)) == ids


def test_consecutive_ids_are_kept_as_runs():
    assert id_ranges([str(i) for i in range(3, 500)] + ["x7", "502"]) == "3-499,x7,502"


async def test_events_are_read_back_in_order_with_the_chats_totals(redis, channel, key_prefix):
    log = ActivityLog(redis, channel, key_prefix)
    await log.record(turn(ts=100.0))
    await log.record(compaction(ts=101.0))
    await log.record(
        TurnErrorEvent(
            platform="tg",
            chat="tg:1",
            session_id="s1",
            kind="provider_away",
            error="the model provider is not reachable",
            ts=102.0,
        )
    )
    await log.record(turn(ts=103.0, error="the model provider timed out", cost_usd=0.001, saved_usd=0.0))
    events = await log.history("tg:1")
    assert [e.name for e in events] == ["turn:done", "session:compress", "turn:error", "turn:done"]
    assert events[1] == compaction(ts=101.0)  # archived ids included, exactly
    totals = (await log.totals(["tg:1"]))[0]
    assert (totals.turns, totals.prompt_tokens, totals.cache_read_tokens, totals.compactions, totals.errors) == (
        2,
        2400,
        2000,
        1,
        2,
    )
    assert round(totals.cost_usd, 6) == 0.003 and round(totals.saved_usd, 6) == 0.003
    assert totals.by_trigger == {"hygiene": 1}


async def test_a_chats_log_stays_bounded(redis, channel, key_prefix):
    log = ActivityLog(redis, channel, key_prefix, max_entries=50)
    for number in range(400):
        await log.record(turn(ts=float(number)))
    assert await redis.xlen(f"{key_prefix}:{{tg:1}}:activity") < 200  # trimmed (approximately) to its bound
    history = await log.history("tg:1")
    assert history[-1].ts == 399.0 and (await log.totals(["tg:1"]))[0].turns == 400


async def test_a_failed_write_never_reaches_the_turn(redis, key_prefix, caplog):
    class Broken:
        async def call_in_order(self, *commands):
            raise RedisConnectionError("connection refused")

    await ActivityLog(redis, Broken(), key_prefix).record(turn())  # does not raise
    assert "could not record turn:done" in caplog.text


async def test_every_chat_that_writes_is_listed_newest_first(redis, channel, key_prefix):
    inbox = Inbox(redis, key_prefix, channel=channel)
    for number, chat_id in enumerate(["a", "b", "c"]):
        await inbox.put(
            IncomingMessage(platform="tg", chat_id=chat_id, update_id=str(number), text="hi", ts=1000.0 + number)
        )
    listed = [chat for chat, _ in await ActivityLog(redis, channel, key_prefix).chats()]
    assert listed == ["tg:c", "tg:b", "tg:a"]


async def test_chats_stored_before_the_index_existed_are_added_once(redis, redis_url, key_prefix):
    async with FakeLLMServer(default=Reply.answer("ok")) as provider:
        settings = make_settings(redis_url, key_prefix, provider.openai_base_url, context_length=16_000)
        async with running_gateway(settings, redis) as (runner, _adapter, _events):
            for chat_id in ("old-1", "old-2"):
                await runner.intake(message(chat_id, "1", "hello"))
            await runner.wait_idle(timeout=10)
            await redis.delete(f"{key_prefix}:chats")  # as a Redis written by a foldgate without the index
            log = ActivityLog(redis, runner.store.channel, key_prefix)
            assert await log.index_stored_chats(runner.store) == 2
            assert sorted(chat for chat, _ in await log.chats()) == ["local:old-1", "local:old-2"]
            assert await log.index_stored_chats(runner.store) == 0  # once
