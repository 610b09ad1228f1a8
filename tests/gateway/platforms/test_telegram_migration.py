"""A Telegram group upgraded to a supergroup while the bot talks in it: the real adapter and the real
aiogram client on the fake Bot API, which answers the old id as Telegram does (400 with
``migrate_to_chat_id``).

Whole replies, streamed (edited) replies and the typing indicator follow the group to its new id:
every chunk arrives once and in order, and after the first 400 a process goes straight there.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import pytest

from gateway.platforms.base import OpenGate
from gateway.platforms.split import split_message
from gateway.platforms.telegram import TelegramAdapter
from tests.fakes.bot_api import UPGRADED, FakeBotAPI
from tests.fakes.gateway import make_settings
from tests.fakes.llm_server import FakeLLMServer, streaming
from tests.fakes.telegram import Collected, adapter_for, running, telegram_gateway, telegram_settings

OLD_GROUP, SUPERGROUP = -4518810793, -1002471352452
OLD, NEW = str(OLD_GROUP), str(SUPERGROUP)
WINDOW = 200_000
#: A reply of three messages at Telegram's limit.
LONG = "\n\n".join(f"Section {i}: the migration kept every message of the runbook in order. " * 6 for i in range(24))


def upgrade_refusals(api: FakeBotAPI) -> list[str]:
    """The methods the fake refused because their group had become a supergroup."""
    return [attempt.method for attempt in api.attempts if attempt.description == UPGRADED]


async def test_a_long_reply_upgraded_after_its_first_chunk_arrives_once_in_order_and_the_next_goes_straight_there(
    api: FakeBotAPI,
) -> None:
    chunks = split_message(LONG, 4096, units="utf16")
    assert len(chunks) == 3
    api.migrate_to_supergroup(OLD_GROUP, SUPERGROUP, after_sends=1)  # the group takes the first chunk, then moves
    adapter = adapter_for(api)
    try:
        await adapter.send(OLD, LONG)
        await adapter.send(OLD, "and the next reply")
    finally:
        await adapter.stop()
    assert [(a.chat_id, a.status) for a in api.send_attempts] == [
        (OLD, 200),
        (OLD, 400),
        (NEW, 200),
        (NEW, 200),
        (NEW, 200),
    ]  # one 400, the next reply skips it
    assert [m.text for m in api.messages(OLD)] == chunks[:1]
    assert [m.text for m in api.messages(NEW)] == [*chunks[1:], "and the next reply"]
    assert [m.text for m in api.sent][:3] == chunks  # each chunk once, in order


async def test_typing_follows_the_upgrade_and_asks_the_old_id_once(api: FakeBotAPI) -> None:
    api.migrate_to_supergroup(OLD_GROUP, SUPERGROUP)
    adapter = adapter_for(api, typing_interval=0)
    try:
        await adapter.typing(OLD)
        await adapter.typing(OLD)
    finally:
        await adapter.stop()
    assert api.chat_actions == [(NEW, "typing"), (NEW, "typing")]
    assert upgrade_refusals(api) == ["sendChatAction"]


async def test_a_streamed_reply_in_a_group_upgraded_before_it_arrives_whole_in_the_supergroup(api: FakeBotAPI) -> None:
    chunks = split_message(LONG, 4096, units="utf16")
    api.migrate_to_supergroup(OLD_GROUP, SUPERGROUP)
    adapter = adapter_for(api)
    try:
        surface = adapter.reply_surface(OLD, OpenGate())
        for end in (300, 5000, 9000):
            await surface.preview(LONG[:end])
        await surface.finish(LONG)
    finally:
        await adapter.stop()
    assert [m.text for m in api.messages(NEW)] == chunks
    assert api.messages(OLD) == [] and upgrade_refusals(api) == ["sendMessage"]
    assert all(
        edit.params["chat_id"] == NEW for message in api.messages(NEW) for edit in api.edits(NEW, message.message_id)
    )


async def test_a_streamed_reply_whose_group_is_upgraded_mid_stream_goes_on_whole_in_the_supergroup(
    api: FakeBotAPI,
) -> None:
    chunks = split_message(LONG, 4096, units="utf16")
    adapter = adapter_for(api)
    try:
        surface = adapter.reply_surface(OLD, OpenGate())
        await surface.preview(LONG[:300])  # posted in the group
        api.migrate_to_supergroup(OLD_GROUP, SUPERGROUP)
        await surface.preview(LONG[:600])  # that message no longer takes edits: the text goes on in the supergroup
        await surface.preview(LONG[:5000])
        await surface.finish(LONG)
    finally:
        await adapter.stop()
    assert [m.text for m in api.messages(NEW)] == chunks  # whole, in order, nothing twice
    assert [m.text for m in api.messages(OLD)] == [LONG[:300]]  # the preview left behind in the old group
    assert upgrade_refusals(api) == ["editMessageText"]


class MemoryJournal:
    """A reply's journal kept in memory, shared by two attempts as Redis would share it."""

    def __init__(self) -> None:
        self.facts: dict[str, str] = {}

    async def load(self) -> dict[str, str]:
        return dict(self.facts)

    async def record(self, facts: Mapping[str, str]) -> None:
        self.facts.update(facts)


async def test_a_streamed_reply_taken_over_by_a_fresh_process_edits_its_messages_in_the_supergroup(
    api: FakeBotAPI,
) -> None:
    chunks = split_message(LONG, 4096, units="utf16")
    journal = MemoryJournal()
    api.migrate_to_supergroup(OLD_GROUP, SUPERGROUP)
    first = adapter_for(api)
    try:
        await first.reply_surface(OLD, OpenGate(), journal=journal).preview(LONG[:2000])  # then the process dies
    finally:
        await first.stop()
    second = adapter_for(api)  # knows nothing of the upgrade
    try:
        await second.reply_surface(OLD, OpenGate(), journal=journal).finish(LONG)
    finally:
        await second.stop()
    shown = api.messages(NEW)
    assert [m.text for m in shown] == chunks  # the preview's message edited where it is, the rest added
    assert [e.text for e in api.edits(NEW, shown[0].message_id)] == [chunks[0]]
    assert api.messages(OLD) == [] and upgrade_refusals(api) == ["sendMessage", "sendMessage"]  # one per process


async def test_the_upgrades_service_messages_are_not_recorded_and_replies_go_straight_to_the_supergroup(
    api: FakeBotAPI, caplog: pytest.LogCaptureFixture
) -> None:
    intake = Collected()
    api.push(
        api.group_message(OLD_GROUP, 7, "@foldgate_bot before the upgrade"),
        api.group_migrated_to(OLD_GROUP, SUPERGROUP, user_id=7),
        api.supergroup_migrated_from(SUPERGROUP, OLD_GROUP),
        api.group_message(SUPERGROUP, 7, "@foldgate_bot after it"),
    )
    api.migrate_to_supergroup(OLD_GROUP, SUPERGROUP)
    adapter = adapter_for(api, telegram_settings(api, allowed_chat_ids=[OLD_GROUP]))
    with caplog.at_level(logging.INFO, logger="gateway.platforms.telegram"):
        async with running(adapter, intake):
            await api.wait_until(lambda: api.pending_updates == 0 and len(api.get_updates_calls) >= 2)
            await adapter.send(OLD, "the answer to the message before the upgrade")
    assert [(m.chat_id, m.text) for m in intake.messages] == [(OLD, "Ann: before the upgrade")]
    assert [(a.chat_id, a.status) for a in api.send_attempts] == [(NEW, 200)]  # no 400: the service message told
    hints = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len([hint for hint in hints if f"add {SUPERGROUP} to platforms.telegram.allowed_chat_ids" in hint]) == 1
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_group_upgraded_mid_conversation_gets_its_streamed_replies_whole_in_the_supergroup(
    redis, redis_url, key_prefix
) -> None:
    """Each reply is written over four seconds, for the send budget as shipped: a preview waits until its chat's
    bucket is full again (two sends, refilled at 0.8 a second; the reply before emptied it with its three
    messages) and the group's 20 a minute leave it room, so the reply after the upgrade is shown, then edited,
    while it is written."""
    chunks = split_message(LONG, 4096, units="utf16")
    async with (
        FakeBotAPI() as api,
        FakeLLMServer(default=streaming(LONG, seconds=4.0, chunk_size=400), context_limit=WINDOW) as llm,
    ):
        settings = make_settings(redis_url, key_prefix, llm.openai_base_url, context_length=WINDOW)
        adapter = TelegramAdapter(telegram_settings(api), poll_timeout=1, typing_interval=0, preview_interval=0.1)
        async with telegram_gateway(settings, redis, adapter) as runner:
            api.push(api.group_message(OLD_GROUP, 7, "@foldgate_bot how did the migration go?"))
            await api.wait_until(lambda: [m.text for m in api.messages(OLD)] == chunks, timeout=30)
            await runner.wait_idle()
            api.migrate_to_supergroup(OLD_GROUP, SUPERGROUP)
            api.push(api.group_message(OLD_GROUP, 7, "@foldgate_bot and then?"))  # written just before the upgrade
            await api.wait_until(lambda: [m.text for m in api.messages(NEW)] == chunks, timeout=30)
            await runner.wait_idle()
            api.push(api.group_message(OLD_GROUP, 8, "@foldgate_bot one more"))
            await api.wait_until(lambda: [m.text for m in api.messages(NEW)] == chunks * 2, timeout=30)
            await runner.wait_idle()
    assert [m.text for m in api.messages(OLD)] == chunks  # the first reply, before the upgrade
    assert any(api.edits(NEW, m.message_id) for m in api.messages(NEW))  # streamed: edited in place
    # the turn's typing indicator met the upgrade first; everything after it went straight to the supergroup
    assert upgrade_refusals(api) == ["sendChatAction"]
    assert api.chat_actions == [(OLD, "typing"), (NEW, "typing"), (NEW, "typing")]
    assert len(llm.requests) == 3
