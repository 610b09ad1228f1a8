"""The fake Bot API's drafts, edits, deletions, flood control and webhook delivery, driven by the real aiogram client.

Most flood tests give the fake a clock they move by hand, so windows of Telegram's real length
(1 s, 60 s) are checked exactly without waiting; one test runs on the real clock, Telegram's 1 s per-chat
window, and waits for that clock to pass the window's end (never for a guess of how long that takes).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import TelegramBadRequest, TelegramConflictError, TelegramMigrateToChat, TelegramRetryAfter
from aiogram.types import Update
from aiohttp import web

from tests.fakes.bot_api import (
    CANT_EDIT,
    DELETE_NOT_FOUND,
    DRAFT_PEER_INVALID,
    EDIT_NOT_FOUND,
    NOT_MODIFIED,
    TEXT_EMPTY,
    TOO_LONG,
    UPGRADED,
    FakeBotAPI,
    FloodLimits,
    WebhookRetry,
    most_in_window,
)

PRIVATE, OTHER, GROUP = 42, 43, -100123


class Clock:
    """A clock the test moves: the fake reads ``now`` wherever it would read the monotonic clock."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@contextlib.asynccontextmanager
async def serving(
    limits: FloodLimits | None = None, clock: Clock | None = None
) -> AsyncIterator[tuple[FakeBotAPI, Bot]]:
    """A started fake and a real aiogram Bot pointed at it, exactly as the Telegram adapter builds one."""
    options = {"clock": clock} if clock is not None else {}
    async with FakeBotAPI(limits=limits, **options) as api:  # type: ignore[arg-type]
        bot = Bot(api.token, session=AiohttpSession(api=TelegramAPIServer.from_base(api.base_url)))
        try:
            yield api, bot
        finally:
            await bot.session.close()


# ---------------------------------------------------------------------- drafts


async def test_drafts_are_recorded_in_order_and_the_current_one_ends_when_the_message_is_sent() -> None:
    clock = Clock()
    async with serving(clock=clock) as (api, bot):
        assert await bot.send_message_draft(PRIVATE, 7, text="") is True  # the "Thinking…" placeholder
        for text in ("The", "The answer", "The answer is 42"):
            clock.advance(0.25)
            assert await bot.send_message_draft(PRIVATE, 7, text=text) is True
        assert [(d.chat_id, d.draft_id, d.text) for d in api.drafts] == [
            ("42", 7, ""),
            ("42", 7, "The"),
            ("42", 7, "The answer"),
            ("42", 7, "The answer is 42"),
        ]
        assert [d.at for d in api.drafts] == [1000.0, 1000.25, 1000.5, 1000.75]
        current = api.current_draft(PRIVATE)
        assert current is not None and current.text == "The answer is 42"

        await bot.send_message(PRIVATE, "The answer is 42")
        assert api.current_draft(PRIVATE) is None
        assert [m.text for m in api.messages(PRIVATE)] == ["The answer is 42"]


async def test_a_draft_disappears_after_30_seconds_without_a_renewal() -> None:
    clock = Clock()
    async with serving(clock=clock) as (api, bot):
        await bot.send_message_draft(PRIVATE, 1, text="working on it")
        clock.advance(29.9)
        assert api.current_draft(PRIVATE) is not None
        clock.advance(0.1)
        assert api.current_draft(PRIVATE) is None and len(api.drafts) == 1


async def test_a_draft_to_a_group_or_with_draft_id_0_is_refused_with_a_400() -> None:
    async with serving() as (api, bot):
        with pytest.raises(TelegramBadRequest) as group:
            await bot.send_message_draft(GROUP, 5, text="hello room")
        with pytest.raises(TelegramBadRequest) as zero:
            await bot.send_message_draft(PRIVATE, 0, text="hello")
        with pytest.raises(TelegramBadRequest) as long:
            await bot.send_message_draft(PRIVATE, 5, text="x" * 4097)
    assert group.value.message == DRAFT_PEER_INVALID
    assert "draft_id" in zero.value.message and long.value.message == TOO_LONG
    assert api.drafts == [] and api.current_draft(GROUP) is None
    assert [(a.method, a.chat_id, a.status) for a in api.attempts] == [
        ("sendMessageDraft", str(GROUP), 400),
        ("sendMessageDraft", "42", 400),
        ("sendMessageDraft", "42", 400),
    ]


# ---------------------------------------------------------------------- message ids, edits, deletions


async def test_message_ids_increase_per_chat_and_are_shared_with_the_users_messages() -> None:
    async with serving() as (api, bot):
        api.private_message(PRIVATE, "hi")  # the user's message takes id 1 in chat 42
        ids = [(await bot.send_message(chat, "reply")).message_id for chat in (PRIVATE, PRIVATE, OTHER, PRIVATE)]
    assert ids == [2, 3, 1, 4]
    assert [m.message_id for m in api.messages(PRIVATE)] == [2, 3, 4]
    assert [m.message_id for m in api.sent] == ids  # the old log keeps working


async def test_an_edit_changes_the_message_and_is_kept_in_its_history() -> None:
    clock = Clock()
    async with serving(clock=clock) as (api, bot):
        first = await bot.send_message(PRIVATE, "Deploy")
        clock.advance(1)
        edited = await bot.edit_message_text("Deploy started", chat_id=PRIVATE, message_id=first.message_id)
        clock.advance(1)
        await bot.edit_message_text("Deploy finished ✅", chat_id=PRIVATE, message_id=first.message_id)
        second = await bot.send_message(PRIVATE, "Anything else?")
    assert edited.message_id == first.message_id and edited.text == "Deploy started" and edited.edit_date is not None
    assert edited.chat.id == PRIVATE and edited.from_user is not None and edited.from_user.is_bot
    assert [(m.message_id, m.text) for m in api.messages(PRIVATE)] == [
        (first.message_id, "Deploy finished ✅"),
        (second.message_id, "Anything else?"),
    ]
    assert [(e.text, e.at) for e in api.edits(PRIVATE, first.message_id)] == [
        ("Deploy started", 1001.0),
        ("Deploy finished ✅", 1002.0),
    ]
    assert api.edits(PRIVATE, second.message_id) == []
    assert [m.text for m in api.sent] == ["Deploy", "Anything else?"]  # what was sent, not what it became


async def test_an_edit_to_the_same_text_is_refused_as_not_modified() -> None:
    async with serving() as (api, bot):
        sent = await bot.send_message(PRIVATE, "same")
        with pytest.raises(TelegramBadRequest) as unchanged:
            await bot.edit_message_text("same", chat_id=PRIVATE, message_id=sent.message_id)
        await bot.edit_message_text("changed", chat_id=PRIVATE, message_id=sent.message_id)
        with pytest.raises(TelegramBadRequest):
            await bot.edit_message_text("changed", chat_id=PRIVATE, message_id=sent.message_id)
        await bot.edit_message_text("changed", chat_id=PRIVATE, message_id=sent.message_id, parse_mode="HTML")
    assert unchanged.value.message == NOT_MODIFIED
    assert NOT_MODIFIED == (
        "Bad Request: message is not modified: specified new message content and reply markup "
        "are exactly the same as a current content and reply markup of the message"
    )
    assert [e.text for e in api.edits(PRIVATE, sent.message_id)] == ["changed", "changed"]  # new parse_mode: modified
    assert [a.status for a in api.attempts if a.method == "editMessageText"] == [400, 200, 400, 200]


async def test_edits_of_unknown_foreign_deleted_empty_or_overlong_messages_are_refused() -> None:
    async with serving() as (api, bot):
        api.push(api.private_message(PRIVATE, "the user's own words"))  # message 1, not the bot's
        sent = await bot.send_message(PRIVATE, "the bot's words")
        refusals = []
        for text, message_id in (("x", 999), ("x", 1), ("", sent.message_id), ("y" * 4097, sent.message_id)):
            with pytest.raises(TelegramBadRequest) as refused:
                await bot.edit_message_text(text, chat_id=PRIVATE, message_id=message_id)
            refusals.append(refused.value.message)
        assert await bot.edit_message_text(
            "😀" * 2048, chat_id=PRIVATE, message_id=sent.message_id
        )  # 4096 UTF-16 units
        with pytest.raises(TelegramBadRequest) as unknown_chat:
            await bot.edit_message_text("x", chat_id=OTHER, message_id=sent.message_id)
    assert refusals == [EDIT_NOT_FOUND, CANT_EDIT, TEXT_EMPTY, TOO_LONG]
    assert unknown_chat.value.message == EDIT_NOT_FOUND == "Bad Request: message to edit not found"


async def test_a_deleted_message_leaves_the_chat_and_can_be_neither_edited_nor_deleted_again() -> None:
    async with serving() as (api, bot):
        keep = await bot.send_message(PRIVATE, "keep")
        drop = await bot.send_message(PRIVATE, "drop")
        assert await bot.delete_message(PRIVATE, drop.message_id) is True
        with pytest.raises(TelegramBadRequest) as again:
            await bot.delete_message(PRIVATE, drop.message_id)
        with pytest.raises(TelegramBadRequest) as edit:
            await bot.edit_message_text("back?", chat_id=PRIVATE, message_id=drop.message_id)
    assert [m.text for m in api.messages(PRIVATE)] == ["keep"] and keep.message_id < drop.message_id
    assert [(d.chat_id, d.message_id) for d in api.deleted] == [("42", drop.message_id)]
    assert api.message(PRIVATE, drop.message_id).deleted_at is not None
    assert again.value.message == DELETE_NOT_FOUND and edit.value.message == EDIT_NOT_FOUND


# ---------------------------------------------------------------------- a group upgraded to a supergroup

OLD_GROUP, SUPERGROUP = -4518810793, -1002471352452


async def test_an_upgraded_group_refuses_every_call_with_telegrams_400_naming_the_supergroup() -> None:
    async with serving() as (api, bot):
        before = await bot.send_message(OLD_GROUP, "before the upgrade")
        api.migrate_to_supergroup(OLD_GROUP, SUPERGROUP, after_sends=1)
        kept = await bot.send_message(OLD_GROUP, "the last one the group takes")
        assert api.migrated_to(OLD_GROUP) == SUPERGROUP and api.migrated_to(SUPERGROUP) is None
        refused = []
        for call in (
            bot.send_message(OLD_GROUP, "after"),
            bot.edit_message_text("edited", chat_id=OLD_GROUP, message_id=before.message_id),
            bot.delete_message(OLD_GROUP, before.message_id),
            bot.send_chat_action(OLD_GROUP, "typing"),
        ):
            with pytest.raises(TelegramMigrateToChat) as moved:
                await call
            refused.append(moved.value.migrate_to_chat_id)
        async with aiohttp.ClientSession() as client:
            raw = await client.post(
                f"{api.base_url}/bot{api.token}/sendMessage", json={"chat_id": OLD_GROUP, "text": "raw"}
            )
            body = await raw.json()
        there = await bot.send_message(SUPERGROUP, "in the supergroup")
        with pytest.raises(TelegramBadRequest):  # a supergroup numbers its messages afresh
            await bot.edit_message_text("edited", chat_id=SUPERGROUP, message_id=kept.message_id)
    assert refused == [SUPERGROUP] * 4
    assert raw.status == 400 and body == {
        "ok": False,
        "error_code": 400,
        "description": UPGRADED,
        "parameters": {"migrate_to_chat_id": SUPERGROUP},
    }
    assert UPGRADED == "Bad Request: group chat was upgraded to a supergroup chat"
    assert [m.text for m in api.messages(OLD_GROUP)] == ["before the upgrade", "the last one the group takes"]
    assert [m.text for m in api.messages(SUPERGROUP)] == ["in the supergroup"] and there.chat.id == SUPERGROUP
    assert [(a.text, a.status) for a in api.send_attempts if a.chat_id == str(OLD_GROUP)] == [
        ("before the upgrade", 200),
        ("the last one the group takes", 200),
        ("after", 400),
        ("raw", 400),
    ]
    assert [(a.method, a.status) for a in api.attempts if a.description == UPGRADED] == [
        ("sendMessage", 400),
        ("editMessageText", 400),
        ("deleteMessage", 400),
        ("sendChatAction", 400),
        ("sendMessage", 400),
    ]
    assert api.chat_actions == [] and api.deleted == []


def test_the_upgrades_two_service_messages_read_as_telegram_sends_them() -> None:
    api = FakeBotAPI()
    to = Update.model_validate(api.group_migrated_to(OLD_GROUP, SUPERGROUP, user_id=7))
    since = Update.model_validate(api.supergroup_migrated_from(SUPERGROUP, OLD_GROUP))
    assert to.message is not None and since.message is not None
    assert (to.message.chat.id, to.message.chat.type, to.message.migrate_to_chat_id) == (OLD_GROUP, "group", SUPERGROUP)
    assert to.message.from_user is not None and to.message.from_user.id == 7 and to.message.text is None
    assert (since.message.chat.id, since.message.chat.type, since.message.migrate_from_chat_id) == (
        SUPERGROUP,
        "supergroup",
        OLD_GROUP,
    )
    assert since.message.sender_chat is not None and since.message.sender_chat.id == SUPERGROUP
    assert since.message.message_id == 1 and since.message.text is None


# ---------------------------------------------------------------------- flood control


async def test_without_limits_nothing_is_refused_but_every_call_is_accounted() -> None:
    clock = Clock()
    async with serving(clock=clock) as (api, bot):
        for _ in range(5):
            await bot.send_message(PRIVATE, "fast")
        clock.advance(0.5)
        await bot.send_message_draft(PRIVATE, 3, text="a draft counts too")
    assert api.rate_limited == [] and len(api.counted) == 6
    accounting = api.accounting()
    assert accounting.per_chat == {"42": 6} and accounting.bot == 6 and accounting.per_group == {}
    assert accounting.over_limit() == ["chat 42: 6 in 1.0s > 1"]


async def test_a_second_message_to_a_chat_within_a_second_gets_a_429_with_retry_after_1() -> None:
    clock = Clock()
    async with serving(FloodLimits(per_chat_per_second=1, per_group_per_minute=20, per_bot_per_second=30), clock) as (
        api,
        bot,
    ):
        first = await bot.send_message(PRIVATE, "one")
        clock.advance(0.4)
        with pytest.raises(TelegramRetryAfter) as refused:
            await bot.send_message(PRIVATE, "two")
        with pytest.raises(TelegramRetryAfter):
            await bot.edit_message_text("one, edited", chat_id=PRIVATE, message_id=first.message_id)
        with pytest.raises(TelegramRetryAfter):
            await bot.send_message_draft(PRIVATE, 9, text="drafts count")
        await bot.send_message(OTHER, "another chat has its own window")
        clock.advance(0.6)  # the first call is exactly 1 s old: out of the window (now - 1, now]
        await bot.send_message(PRIVATE, "two")
    assert refused.value.retry_after == 1 and "retry after 1" in refused.value.message
    assert [(r.method, r.chat_id, r.at, r.retry_after, r.scope) for r in api.rate_limited] == [
        ("sendMessage", "42", 1000.4, 1, "chat"),
        ("editMessageText", "42", 1000.4, 1, "chat"),
        ("sendMessageDraft", "42", 1000.4, 1, "chat"),
    ]
    assert [m.text for m in api.messages(PRIVATE)] == ["one", "two"] and api.drafts == []
    assert api.accounting().over_limit() == [] and api.accounting().per_chat == {"42": 1, "43": 1}


async def test_a_full_group_window_answers_with_telegrams_429_body_and_retry_after() -> None:
    clock = Clock()
    limits = FloodLimits(per_chat_per_second=1, per_group_per_minute=3, per_bot_per_second=30)
    async with serving(limits, clock) as (api, bot):
        for _ in range(3):
            await bot.send_message(GROUP, "status")
            clock.advance(1.5)
        clock.advance(5.5)  # 10 s after the first message: the minute frees in 50 s
        with pytest.raises(TelegramRetryAfter) as refused:
            await bot.send_message(GROUP, "one too many")
        url = f"{api.base_url}/bot{api.token}/sendMessage"
        async with aiohttp.ClientSession() as http, http.post(url, json={"chat_id": GROUP, "text": "raw"}) as raw:
            body, retry_header, status = await raw.json(), raw.headers.get("Retry-After"), raw.status
        clock.advance(50)  # now - 60 s is the first message's time: it has left the window
        await bot.send_message(GROUP, "room again")
    assert refused.value.retry_after == 50
    assert status == 429 and retry_header == "50"
    assert body == {
        "ok": False,
        "error_code": 429,
        "description": "Too Many Requests: retry after 50",
        "parameters": {"retry_after": 50},
    }
    assert [(r.scope, r.retry_after) for r in api.rate_limited] == [("group", 50), ("group", 50)]
    accounting = api.accounting()
    assert accounting.per_group == {str(GROUP): 3} and accounting.per_chat == {str(GROUP): 1}
    assert accounting.over_limit() == []


async def test_the_bot_wide_window_spans_chats() -> None:
    clock = Clock()
    async with serving(FloodLimits(per_bot_per_second=2), clock) as (api, bot):
        await bot.send_message(PRIVATE, "a")
        clock.advance(0.3)
        await bot.send_message(OTHER, "b")
        with pytest.raises(TelegramRetryAfter) as refused:
            await bot.send_message(44, "c")
        clock.advance(0.7)
        await bot.send_message(44, "c")
    assert refused.value.retry_after == 1 and api.rate_limited[0].scope == "bot"
    assert api.accounting().bot == 2 and api.accounting().over_limit() == []


async def test_the_retry_after_is_the_longest_wait_of_every_full_window() -> None:
    clock = Clock()
    async with serving(FloodLimits(per_chat_per_second=1, per_group_per_minute=1), clock) as (api, bot):
        await bot.send_message(GROUP, "one")
        clock.advance(0.5)  # both the chat second and the group minute are full: the minute decides
        with pytest.raises(TelegramRetryAfter) as refused:
            await bot.send_message(GROUP, "two")
    assert refused.value.retry_after == 60 and api.rate_limited[0].scope == "group"


async def test_drafts_may_be_exempted_from_the_per_chat_window() -> None:
    clock = Clock()
    async with serving(FloodLimits(count_drafts=False), clock) as (api, bot):
        for n in range(10):
            await bot.send_message_draft(PRIVATE, 1, text="draft " * (n + 1))
        await bot.send_message(PRIVATE, "final")
    assert len(api.drafts) == 10 and api.rate_limited == []
    assert [c.method for c in api.counted] == ["sendMessage"]


async def test_a_chat_burst_is_allowed_once_but_the_average_must_stay_at_the_limit() -> None:
    clock = Clock()
    limits = FloodLimits(per_chat_per_second=1, chat_burst=2, burst_horizon=5)
    async with serving(limits, clock) as (api, bot):
        for _ in range(3):  # 1 + 2 in the same instant
            await bot.send_message(PRIVATE, "burst")
        with pytest.raises(TelegramRetryAfter) as short:
            await bot.send_message(PRIVATE, "fourth in the same second")
        clock.advance(1)
        await bot.send_message(PRIVATE, "t+1")
        clock.advance(1)
        await bot.send_message(PRIVATE, "t+2")  # 5 in the last 5 s: the horizon is full
        clock.advance(1)
        with pytest.raises(TelegramRetryAfter) as long:
            await bot.send_message(PRIVATE, "t+3")
    assert short.value.retry_after == 1 and long.value.retry_after == 2  # the burst leaves the 5 s window at t+5
    assert api.accounting().per_chat == {"42": 3} and api.accounting().over_limit() == []


async def until_the_clock_reads(moment: float) -> None:
    """Return once the monotonic clock (the fake's own by default) reads ``moment`` or later."""
    while (left := moment - time.monotonic()) > 0:
        await asyncio.sleep(left)


async def test_windows_free_on_the_real_clock() -> None:
    """The window is a whole second, so the refusal never depends on the second call coming quickly on a busy
    machine; the window is over once the fake's clock has passed it, which the test waits for on that clock."""
    limits = FloodLimits(per_chat_per_second=1)
    async with serving(limits) as (api, bot):
        await bot.send_message(PRIVATE, "one")
        with pytest.raises(TelegramRetryAfter) as refused:
            await bot.send_message(PRIVATE, "too soon")
        await until_the_clock_reads(api.counted[0].at + limits.chat_window)
        await bot.send_message(PRIVATE, "two")
    assert refused.value.retry_after == 1  # rounded up to whole seconds, like Telegram's
    assert [m.text for m in api.messages(PRIVATE)] == ["one", "two"] and api.accounting().per_chat == {"42": 1}


async def test_a_sender_that_honours_retry_after_never_exceeds_the_accounting() -> None:
    clock = Clock()
    limits = FloodLimits(per_chat_per_second=1, per_group_per_minute=5, per_bot_per_second=3)
    async with serving(limits, clock) as (api, bot):
        queue = [(chat, f"{chat} #{n}") for n in range(8) for chat in (PRIVATE, OTHER, GROUP, 44)]
        while queue:
            chat, text = queue[0]
            try:
                await bot.send_message(chat, text)
                queue.pop(0)
            except TelegramRetryAfter as wait:
                clock.advance(wait.retry_after)
    accounting = api.accounting()
    assert accounting.over_limit() == [] and api.rate_limited
    assert accounting.per_group == {str(GROUP): 5} and accounting.bot == 3
    assert all(count == 1 for count in accounting.per_chat.values())
    assert [m.text for m in api.messages(GROUP)] == [f"{GROUP} #{n}" for n in range(8)]
    # measured against other windows, the same log tells a different story
    assert api.accounting(FloodLimits(chat_window=1000.0)).per_chat[str(PRIVATE)] == 8


def test_most_in_window_counts_half_open_windows() -> None:
    assert most_in_window([], 1.0) == 0
    assert most_in_window([0.0, 1.0, 2.0], 1.0) == 1  # (t - 1, t] leaves out the call 1 s before
    assert most_in_window([0.0, 0.999, 2.0], 1.0) == 2
    assert most_in_window([0.0, 0.1, 0.2, 5.0, 5.0, 5.0, 5.0], 1.0) == 4


# ---------------------------------------------------------------------- webhook delivery


class Receiver:
    """A webhook endpoint on loopback that answers each POST with the next scripted status (200 when none is left)."""

    def __init__(self, *statuses: int) -> None:
        self.statuses = list(statuses)
        self.received: list[tuple[int, str, dict[str, Any]]] = []
        #: Update ids whose answer waits until the test sets their event.
        self.held: dict[int, asyncio.Event] = {}
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def __aenter__(self) -> Receiver:
        app = web.Application()
        app.router.add_post("/hook", self._on_post)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/hook"
        return self

    async def __aexit__(self, *_exc: object) -> None:
        for event in self.held.values():
            event.set()
        assert self._runner is not None
        await self._runner.cleanup()

    async def _on_post(self, request: web.Request) -> web.Response:
        update = await request.json()
        self.received.append(
            (int(update["update_id"]), request.headers.get("X-Telegram-Bot-Api-Secret-Token", ""), update)
        )
        if update["update_id"] in self.held:
            await self.held[update["update_id"]].wait()
        return web.Response(status=self.statuses.pop(0) if self.statuses else 200, text="ok")


FAST_RETRY = WebhookRetry(first=0.05, longest=0.2, timeout=5.0)


async def test_a_webhook_gets_every_update_with_its_secret_and_getupdates_is_refused_meanwhile() -> None:
    async with FakeBotAPI(webhook_retry=FAST_RETRY) as api, Receiver() as hook:
        bot = Bot(api.token, session=AiohttpSession(api=TelegramAPIServer.from_base(api.base_url)))
        try:
            old = api.private_message(PRIVATE, "sent before the webhook was set")
            api.push(old)
            assert await bot.set_webhook(hook.url, secret_token="s3cret-token_1", allowed_updates=["message"])
            new = api.private_message(OTHER, "sent after")
            api.push(new)
            await api.wait_until(lambda: api.pending_updates == 0, timeout=10)
            with pytest.raises(TelegramConflictError):
                await bot.get_updates(timeout=0)
            info = await bot.get_webhook_info()
        finally:
            await bot.session.close()
    assert sorted(update_id for update_id, _, _ in hook.received) == [old["update_id"], new["update_id"]]
    assert {secret for _, secret, _ in hook.received} == {"s3cret-token_1"}
    assert [body for _, _, body in hook.received if body["update_id"] == new["update_id"]] == [new]
    assert info.url == hook.url and info.pending_update_count == 0 and info.last_error_message is None


async def test_an_update_the_webhook_refuses_or_cannot_take_is_posted_again_until_a_2xx() -> None:
    async with FakeBotAPI(webhook_retry=FAST_RETRY) as api:
        async with Receiver(500, 302) as hook:
            async with aiohttp.ClientSession() as client:
                await client.post(f"{api.base_url}/bot{api.token}/setWebhook", json={"url": hook.url})
            update = api.private_message(PRIVATE, "keep trying")
            api.push(update)
            await api.wait_until(lambda: api.pending_updates == 0, timeout=10)
        statuses = [delivery.status for delivery in api.webhook_deliveries]
        assert statuses == [500, 302, 200]  # a redirect is a failure, not followed
        assert [update_id for update_id, _, _ in hook.received] == [update["update_id"]] * 3
        # nobody listens any more: refused, kept, reported in Telegram's words
        later = api.private_message(PRIVATE, "while the endpoint is down")
        api.push(later)
        await api.wait_until(lambda: len(api.webhook_deliveries) >= 5, timeout=10)
        async with aiohttp.ClientSession() as client:
            info = await (await client.get(f"{api.base_url}/bot{api.token}/getWebhookInfo")).json()
    refused = api.webhook_deliveries[3:]
    assert all(d.status is None and d.error == "Connection refused" and not d.delivered for d in refused)
    assert info["result"]["pending_update_count"] == 1 and info["result"]["last_error_message"] == "Connection refused"


async def test_one_chats_updates_are_posted_in_order_while_other_chats_go_on() -> None:
    async with FakeBotAPI(webhook_retry=FAST_RETRY) as api, Receiver() as hook:
        first, second = api.private_message(PRIVATE, "first"), api.private_message(PRIVATE, "second")
        elsewhere = api.private_message(OTHER, "another chat")
        hook.held[first["update_id"]] = asyncio.Event()
        async with aiohttp.ClientSession() as client:
            await client.post(f"{api.base_url}/bot{api.token}/setWebhook", json={"url": hook.url})
        api.push(first, second, elsewhere)
        await api.wait_until(lambda: len(hook.received) == 2, timeout=10)
        assert [update_id for update_id, _, _ in hook.received] == [first["update_id"], elsewhere["update_id"]]
        hook.held[first["update_id"]].set()
        await api.wait_until(lambda: api.pending_updates == 0, timeout=10)
    assert [update_id for update_id, _, _ in hook.received][2:] == [second["update_id"]]
