"""Budgets enforced across processes: every model call a message causes is reserved at its worst case before it is
made and settled to its cost after, in Redis (``spend_reserve.lua``, ``spend_settle.lua``), against the budget of the
person who sent it and of the chat. Two gateway runners on one Redis with a priced fake model, a budget that resets
at the configured time zone's midnight, warnings, and the reply that says what was spent and when it resets."""

from __future__ import annotations

import asyncio
import re
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from agent.metering import BudgetExceeded, MeteredModel
from agent.usage import Usage
from gateway.access.budgets import ChatMeter, worst_usd
from gateway.config.access import BudgetSettings
from gateway.platforms.base import IncomingMessage
from gateway.platforms.recording import RecordingAdapter
from gateway.store import SessionStore
from gateway.store.spend import SpendStore
from tests.fakes.gateway import make_settings, running_gateway
from tests.fakes.llm_server import FakeLLMServer, Reply, prompt_tokens
from tests.fakes.paths import REPO
from tests.fakes.waiting import PATIENCE, wait_for

MODEL = "gpt-4o"  # priced: $2.50 per million prompt tokens, $10 per million completion tokens
WINDOW = 128_000


def from_ann(chat: str, number: int) -> IncomingMessage:
    return IncomingMessage(
        platform="local",
        chat_id=chat,
        user_id="ann",
        user_name="Ann",
        update_id=f"{chat}-{number}",
        text=f"question {number}: what changed in the ledger service this week? " * 4,
    )


async def test_two_processes_serving_one_person_at_once_overspend_by_one_call_at_most(
    redis, redis_url, key_prefix
) -> None:
    answer = "The ledger service moved its settlement job to the new queue and raised the batch size. " * 6
    async with FakeLLMServer(handler=lambda request: Reply.answer(answer), context_limit=WINDOW) as llm:
        settings = make_settings(
            redis_url,
            key_prefix,
            llm.openai_base_url,
            context_length=WINDOW,
            model=MODEL,
            gateway={"coalesce_backlog": False},
            access={"budgets": {"per_user": {"usd": 0.05, "period": "day"}}},
        )
        first, second = RecordingAdapter(), RecordingAdapter()
        async with (
            running_gateway(settings, redis, adapter=first) as (one, _a, _e),
            running_gateway(settings, redis, adapter=second) as (two, _b, _f),
        ):
            for number in range(20):  # forty messages at once, in two chats, half through each process
                await (one if number % 2 else two).intake(from_ann("desk", number))
                await (two if number % 2 else one).intake(from_ann("phone", number))
            await one.wait_idle(timeout=120)
            await two.wait_idle(timeout=120)
            store = SessionStore(redis, key_prefix)
            stored = 0
            for chat in ("local:desk", "local:phone"):
                for message in await store.active(chat, await store.current_session(chat)):
                    stored += message["role"] == "user"
            period = datetime.now(ZoneInfo("UTC")).strftime("%Y-%m-%d")
            spent = await SpendStore(store.channel, key_prefix).spent("user:local:ann", period)
    replies = first.sent + second.sent
    over = [(chat, text) for chat, text in replies if text.startswith("⛔")]
    one_call = worst_usd(
        MODEL, max(prompt_tokens(request) for request in llm.requests), settings.model.max_output_tokens
    )
    assert stored == 40  # every message kept, answered or not
    assert sorted(chat for chat, _ in over) == ["desk", "phone"]  # told once per chat
    assert "Your daily budget is used up ($0.05" in over[0][1] and "at 00:00 UTC" in over[0][1]
    assert 0.05 <= spent.usd <= 0.05 + one_call, (spent, one_call)
    assert spent.reserved_usd == 0  # every reservation settled
    answered = [text for _, text in replies if not text.startswith("⛔")]
    assert len(answered) == len(llm.requests) and len(answered) < 40


async def test_a_budget_resets_at_midnight_where_the_owner_lives_and_warns_before(redis, key_prefix) -> None:
    zone = ZoneInfo("Europe/Berlin")
    now = [datetime(2026, 12, 4, 23, 50, tzinfo=zone).timestamp()]
    store = SessionStore(redis, key_prefix)
    budgets = BudgetSettings(per_user={"tokens": 1_000}, timezone="Europe/Berlin")
    notes: list[str] = []
    meter = ChatMeter(
        SpendStore(store.channel, key_prefix),
        budgets,
        from_ann("desk", 1),
        cache_ttl="5m",
        notes=notes,
        clock=lambda: now[0],
    )
    held = await meter.reserve(MODEL, 200, 100)
    await meter.settle(held, MODEL, Usage(prompt_tokens=700, completion_tokens=100))  # 800 of 1,000: a warning
    assert notes == ["ℹ️ 75% of your daily budget is used (800 of 1,000 tokens); it resets at 00:00 CET on Sat 05 Dec."]
    held = await meter.reserve(MODEL, 200, 100)  # room left: admitted, and it crosses the limit
    await meter.settle(held, MODEL, Usage(prompt_tokens=250, completion_tokens=50))
    with pytest.raises(BudgetExceeded) as refused:
        await meter.reserve(MODEL, 10, 10)
    assert "1,100 of 1,000 tokens" in refused.value.notice and "00:00 CET on Sat 05 Dec" in refused.value.notice
    now[0] = datetime(2026, 12, 5, 0, 0, 1, tzinfo=zone).timestamp()  # a second after Berlin's midnight (23:00 UTC)
    held = await meter.reserve(MODEL, 10, 10)  # a new day, from nothing
    await meter.settle(held, MODEL, Usage(prompt_tokens=10, completion_tokens=10))
    assert notes[1:] == [
        "ℹ️ 90% of your daily budget is used (1,100 of 1,000 tokens); it resets at 00:00 CET on Sat 05 Dec."
    ]


async def test_the_operator_sees_who_spent_most_against_their_budget(redis_url, key_prefix) -> None:
    import httpx

    from tests.fakes.web import ADMIN_TOKEN, open_chat, web_gateway, web_settings

    async with FakeLLMServer(handler=lambda request: Reply.answer("noted " * 40)) as llm:
        settings = web_settings(
            redis_url,
            key_prefix,
            llm.openai_base_url,
            access={"budgets": {"per_user": {"usd": 0.5}, "per_chat": {"tokens": 100_000}}},
        )
        settings.model.name = MODEL
        async with web_gateway(settings) as running:
            async with httpx.AsyncClient(base_url=running.chat_url) as chat:
                for text in ("first question about the ledger", "second question about the ledger"):
                    await chat.post("/send", data={"text": text, "nonce": await open_chat(chat)})
                    await running.gateway.runner.wait_idle(timeout=20)
            async with httpx.AsyncClient(
                base_url=running.operator_url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
            ) as operator:
                by_dollars = await operator.get("/admin/spend")
                by_tokens = await operator.get("/admin/spend?by=tokens")
    assert by_dollars.status_code == 200 and by_tokens.status_code == 200
    page = by_dollars.text
    people, chats = page.split("<h2>Chats")
    person = re.search(r'<td class="subject">(web:[\w-]+)</td>', people)
    assert person and person[1] in chats  # each browser is a person of its own: its chat and it share the id
    assert page.count("<meter") == 2  # each against its budget
    assert 'class="sorted" aria-sort="descending">tokens' in by_tokens.text


async def test_an_unpriced_model_counts_in_tokens_and_a_free_call_settles(redis, key_prefix) -> None:
    store = SessionStore(redis, key_prefix)
    notes: list[str] = []
    meter = ChatMeter(
        SpendStore(store.channel, key_prefix),
        BudgetSettings(per_chat={"tokens": 500}),
        from_ann("desk", 1),
        cache_ttl="5m",
        notes=notes,
    )
    held = await meter.reserve("some-local-model", 100, 50)  # no price: nothing in dollars, all in tokens
    await meter.settle(held, "some-local-model", None)  # a call that failed costs nothing and lets go
    held = await meter.reserve("some-local-model", 100, 50)
    await meter.settle(held, "some-local-model", Usage(prompt_tokens=90, completion_tokens=10))
    period = datetime.now(ZoneInfo("UTC")).strftime("%Y-%m-%d")
    spent = await SpendStore(store.channel, key_prefix).spent("chat:local:desk", period)
    assert (spent.usd, spent.tokens, spent.reserved_tokens) == (0.0, 100, 0)


class Hanging:
    """A provider client whose answer never comes; ``asked`` is set once a call reached it."""

    def __init__(self) -> None:
        self.asked = asyncio.Event()

    async def complete(self, messages, **_options):  # type: ignore[no-untyped-def]
        self.asked.set()
        await asyncio.Event().wait()


async def test_a_call_stopped_mid_answer_is_charged_its_reservation_and_holds_nothing(redis, key_prefix) -> None:
    store = SessionStore(redis, key_prefix)
    budgets = BudgetSettings(per_user={"tokens": 10_000}, per_chat={"tokens": 20_000})
    meter = ChatMeter(SpendStore(store.channel, key_prefix), budgets, from_ann("desk", 1), cache_ttl="5m", notes=[])
    provider = Hanging()
    call = asyncio.ensure_future(
        MeteredModel(provider, meter).complete(
            [{"role": "user", "content": "write a long story"}], model=MODEL, max_tokens=500
        )
    )
    await asyncio.wait_for(provider.asked.wait(), PATIENCE)  # reserved, and the provider is writing
    call.cancel()  # the person sent /stop while the provider wrote
    with pytest.raises(asyncio.CancelledError):
        await call
    period = datetime.now(ZoneInfo("UTC")).strftime("%Y-%m-%d")
    for subject in ("user:local:ann", "chat:local:desk"):
        spent = await SpendStore(store.channel, key_prefix).spent(subject, period)
        assert spent.reserved_tokens == 0 and spent.tokens > 500  # what it may have written is paid for


async def test_a_settlement_sent_twice_counts_once(redis, key_prefix) -> None:
    spend = SpendStore(SessionStore(redis, key_prefix).channel, key_prefix)
    reservation, _ = await spend.reserve(
        "user:local:bob", "2026-12-04", usd=0.01, tokens=100, usd_limit=1.0, token_limit=None, keep_seconds=60
    )
    assert reservation is not None
    for _ in range(2):  # a settlement resent after its answer was lost
        after = await spend.settle("user:local:bob", "2026-12-04", reservation, usd=0.002, tokens=40, keep_seconds=60)
    assert (after.usd, after.tokens) == (0.002, 40)


async def test_a_summarizer_over_budget_says_so_and_is_not_counted_as_failing() -> None:
    from agent.compaction.summarizer import LLMSummarizer

    class Spent:
        async def reserve(self, model: str, prompt_tokens: int, max_output_tokens: int) -> object:
            raise BudgetExceeded("⛔ spent", "user:x:2026-12-04")

        async def settle(self, handle: object, model: str, usage: Usage | None, *, whole: bool = False) -> None:
            raise AssertionError("nothing was reserved")

    summarizer = LLMSummarizer(MeteredModel(Hanging(), Spent()), MODEL, 128_000)
    with pytest.raises(BudgetExceeded):
        await summarizer.call_llm(messages=[{"role": "user", "content": "summarise"}], max_tokens=100)


async def test_two_gateway_processes_share_one_budget(redis, redis_url, key_prefix) -> None:
    """The same forty messages as above, served by two OS processes (tests.fakes.worker_process) on one Redis."""
    import json
    import os
    import subprocess
    import sys

    from gateway.store.inbox import Inbox
    from tests.fakes.workers import stop

    root = REPO
    answer = "The ledger service moved its settlement job to the new queue and raised the batch size. " * 6
    access = json.dumps({"budgets": {"per_user": {"usd": 0.05, "period": "day"}}})
    # coalescing off: every message is a model call of its own, so the forty calls at once overrun the budget
    each_message_alone = json.dumps({"coalesce_backlog": False})
    async with FakeLLMServer(handler=lambda request: Reply.answer(answer), context_limit=WINDOW) as llm:
        workers = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.fakes.worker_process",
                    "--redis",
                    redis_url,
                    "--prefix",
                    key_prefix,
                    "--base-url",
                    llm.openai_base_url,
                    "--context-length",
                    str(WINDOW),
                    "--model",
                    MODEL,
                    "--access",
                    access,
                    "--gateway",
                    each_message_alone,
                ],
                cwd=root,
                env={**os.environ, "PYTHONPATH": str(root)},
            )
            for _ in range(2)
        ]
        try:
            await wait_for(
                lambda: _count(redis, f"{key_prefix}:workers", 2), timeout=60, what="both workers to register"
            )
            inbox = Inbox(redis, key_prefix)
            for number in range(20):
                await inbox.put(from_ann("desk", number))
                await inbox.put(from_ann("phone", number))

            async def drained() -> bool:
                return not await inbox.pending("local:desk") and not await inbox.pending("local:phone")

            await wait_for(drained, timeout=120, what="both chats' inboxes to drain")
        finally:
            for worker in workers:
                stop(worker)
        sent = [json.loads(raw) for raw in await redis.lrange(f"{key_prefix}:sent", 0, -1)]
        store = SessionStore(redis, key_prefix)
        stored = 0
        for chat in ("local:desk", "local:phone"):
            stored += sum(m["role"] == "user" for m in await store.active(chat, await store.current_session(chat)))
        period = datetime.now(ZoneInfo("UTC")).strftime("%Y-%m-%d")
        spent = await SpendStore(store.channel, key_prefix).spent("user:local:ann", period)
        one_call = worst_usd(MODEL, max(prompt_tokens(request) for request in llm.requests), 4096)
    over = [entry for entry in sent if str(entry.get("text", "")).startswith("⛔")]
    assert stored == 40
    assert sorted(entry["chat"] for entry in over) == ["desk", "phone"]
    assert 0.05 <= spent.usd <= 0.05 + one_call and spent.reserved_usd == 0


async def _count(redis, key: str, wanted: int) -> bool:
    return await redis.llen(key) >= wanted


async def test_voice_is_transcribed_on_the_senders_budget(redis, redis_url, key_prefix) -> None:
    """Two minutes of voice cost $0.012 to transcribe (whisper-1): with a $0.02 day the first is transcribed and
    answered, the second transcribed too (the budget had room), and then the day is spent."""
    from gateway.platforms.telegram import TelegramAdapter
    from tests.fakes.bot_api import FakeBotAPI
    from tests.fakes.telegram import telegram_gateway, telegram_settings
    from tests.fakes.transcription import FakeTranscriptionServer

    chat = 8802
    async with (
        FakeBotAPI() as api,
        FakeLLMServer(handler=lambda request: Reply.answer("heard you")) as llm,
        FakeTranscriptionServer(default="the deploy froze at step four") as speech,
    ):
        settings = make_settings(
            redis_url,
            key_prefix,
            llm.openai_base_url,
            context_length=WINDOW,
            model=MODEL,
            media={"transcription": {"provider": "custom", "base_url": speech.base_url}},
            access={"budgets": {"per_user": {"usd": 0.02}}},
        )
        adapter = TelegramAdapter(telegram_settings(api), poll_timeout=1, typing_interval=0)
        async with telegram_gateway(settings, redis, adapter) as runner:
            for number in (1, 2):
                api.push(api.voice_message(chat, chat, b"OggS" + bytes(4000), duration=120))
                await api.wait_until(lambda number=number: len(api.sent) == number, timeout=60)
            await runner.wait_idle()
            period = datetime.now(ZoneInfo("UTC")).strftime("%Y-%m-%d")
            spent = await SpendStore(runner.store.channel, key_prefix).spent(f"user:tg:{chat}", period)
    assert len(speech.requests) == 2
    assert api.sent[0].text == "heard you"
    assert api.sent[1].text.startswith("⛔ Your daily budget is used up")
    assert spent.usd >= 0.024 and spent.reserved_usd == 0  # both transcriptions counted, with the one answer


async def test_a_reply_stopped_while_it_streams_pays_its_reservation_and_a_refusal_pays_nothing(
    redis, key_prefix
) -> None:
    from agent.llm.errors import ProviderError
    from agent.loop import TurnStopped

    class Answers:
        def __init__(self, error: BaseException) -> None:
            self.error = error

        async def complete(self, messages, **_options):  # type: ignore[no-untyped-def]
            raise self.error

    store = SessionStore(redis, key_prefix)
    period = datetime.now(ZoneInfo("UTC")).strftime("%Y-%m-%d")
    for chat, error, paid in (
        ("stopped", TurnStopped("half a reply"), True),
        ("refused", ProviderError("400 bad request"), False),
    ):
        meter = ChatMeter(
            SpendStore(store.channel, key_prefix),
            BudgetSettings(per_chat={"tokens": 10_000}),
            from_ann(chat, 1),
            cache_ttl="5m",
            notes=[],
        )
        with pytest.raises(type(error)):
            await MeteredModel(Answers(error), meter).complete(
                [{"role": "user", "content": "hi"}], model=MODEL, max_tokens=300
            )
        spent = await SpendStore(store.channel, key_prefix).spent(f"chat:local:{chat}", period)
        assert (spent.tokens > 300) is paid and spent.reserved_tokens == 0
