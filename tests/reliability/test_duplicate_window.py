"""A reply of several messages, its worker killed while it waits out a 429 between two of them.

The README promises that a reply goes out twice only between the platform accepting a message
and one Redis round trip. So a worker SIGKILLed during the ``retry_after`` pause after the first
chunk must leave a record of that chunk, and the worker that takes the chat over sends only the
rest: every chunk in the chat once, in order. This holds for a streamed turn in a private chat
(final messages after drafts), in a group (messages edited in place), and for a reply sent whole
(a command's answer), whose resend after a crash goes through the same record. The record holds
each message's text too, so the attempt after a crash does not edit a message again that already
shows its chunk.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from agent.models import UnknownAlias, split_large_alias
from gateway.platforms.base import IncomingMessage
from gateway.platforms.split import split_message
from gateway.store.inbox import Inbox
from tests.fakes.bot_api import FakeBotAPI
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.paths import REPO
from tests.fakes.waiting import wait_for
from tests.fakes.workers import stop

ROOT = REPO
WINDOW = 200_000
#: Long enough for three Telegram messages (4096 UTF-16 units each).
ANSWER = " ".join(f"line {i}: the replica caught up and the backlog drained." for i in range(200))
#: Longer than the 2 s lock the workers run with: the kill lands inside this wait.
RETRY_AFTER = 6
#: ``/model`` answers a name with an unknown ``-900k`` variant by quoting it: a whole reply of three messages.
LONG_MODEL = " ".join(f"model{i}" for i in range(1200)) + "-900k"


def worker(redis_url: str, prefix: str, llm: FakeLLMServer, api: FakeBotAPI) -> subprocess.Popen:
    """One gateway process on the fake Bot API, with a 2 s lock (not the shipped 15 s): the test is about the
    worker that takes a killed one's chat over, so it should not wait out the default lock first."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.fakes.worker_process",
            "--redis",
            redis_url,
            "--prefix",
            prefix,
            "--base-url",
            llm.openai_base_url,
            "--gateway",
            json.dumps({"lock_ttl_seconds": 2}),
            "--telegram-api",
            api.base_url,
            "--telegram-token",
            api.token,
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


@pytest.mark.parametrize(
    "chat, text",
    [
        pytest.param(7101, "status?", id="private-streamed"),
        pytest.param(-1007101, "@foldgate_bot status?", id="group-edited"),
        pytest.param(7102, f"/model {LONG_MODEL}", id="private-whole"),
        pytest.param(-1007102, f"/model {LONG_MODEL}", id="group-whole"),
    ],
)
async def test_a_kill_during_a_429_wait_between_chunks_sends_every_chunk_once(
    redis, redis_url, key_prefix, chat: int, text: str
) -> None:
    async with FakeBotAPI() as api, FakeLLMServer(default=Reply.answer(ANSWER), context_limit=WINDOW) as llm:
        api.rate_limit_send_after(chat, 1, retry_after=RETRY_AFTER)  # the second chunk is refused for a while
        first = worker(redis_url, key_prefix, llm, api)
        second = None
        try:
            await Inbox(redis, key_prefix).put(
                IncomingMessage(platform="tg", chat_id=str(chat), update_id="91000", text=text)
            )
            await api.wait_until(lambda: any(a.status == 429 for a in api.send_attempts), timeout=60)
            first.send_signal(signal.SIGKILL)  # inside the retry_after wait, the first chunk already posted
            first.wait()
            (posted,) = api.messages(chat)
            second = worker(redis_url, key_prefix, llm, api)
            await api.wait_until(lambda: len(api.messages(chat)) >= 3, timeout=90)
            await _answered(Inbox(redis, key_prefix), f"tg:{chat}")
        finally:
            if second is not None:
                stop(second)
            if first.poll() is None:
                first.kill()
                first.wait()
    texts = [message.text for message in api.messages(chat)]
    assert texts == split_message(ANSWER if not text.startswith("/") else _model_refusal(), 4096, units="utf16")
    assert len(texts) >= 3
    assert api.messages(chat)[0].message_id == posted.message_id  # the killed worker's chunk was kept, not resent
    if not text.startswith("/"):
        assert len(llm.requests) == 1  # the committed turn was not run again, only its reply finished


def _model_refusal() -> str:
    """What ``/model`` answers for :data:`LONG_MODEL`."""
    try:
        split_large_alias(LONG_MODEL)
    except UnknownAlias as error:
        return f"⚠️ {error}"
    raise AssertionError("the long name was accepted as a model")


async def _answered(inbox: Inbox, chat: str) -> None:
    """Wait until the chat's entry has left the inbox (the reply was recorded as sent)."""

    async def finished() -> bool:
        return await inbox.head(chat) is None

    await wait_for(finished, what=f"{chat}'s entry to leave the inbox (its reply recorded as sent)")


async def test_a_takeover_leaves_alone_what_the_crashed_attempt_already_showed(store, bot_api) -> None:
    """The journal records the text each message shows, so the attempt after a crash neither edits a
    message already showing its chunk (in a group every edit waits for Telegram's 20 a minute) nor
    posts it again: it only sends what is missing."""
    from gateway.platforms.base import OpenGate
    from gateway.platforms.telegram import TelegramAdapter
    from gateway.store.journal import ReplyJournal
    from tests.fakes.telegram import telegram_settings

    room = "-1007103"
    adapter = TelegramAdapter(telegram_settings(bot_api), typing_interval=0)
    lock = await store.acquire_lock(f"tg:{room}", 30)
    assert lock is not None
    chunks = split_message(ANSWER, 4096, units="utf16")
    assert len(chunks) >= 3
    try:

        def surface():
            journal = ReplyJournal(store.channel, store.prefix, lock, "tg:91003")
            return adapter.reply_surface(room, OpenGate(), reply_to="91003", journal=journal)

        crashed = surface()
        shown = ANSWER[: ANSWER.index(chunks[1]) + len(chunks[1])]  # the first two messages' worth
        for _ in range(3):
            if await crashed.preview(shown):  # one message per frame
                break
        assert [m.text for m in bot_api.messages(room)] == chunks[:2]
        before = [m.message_id for m in bot_api.messages(room)]
        edits_before = sum(1 for a in bot_api.attempts if a.method == "editMessageText")
        await surface().finish(ANSWER)  # a new attempt, as after a kill
    finally:
        await adapter.stop()
    assert [m.text for m in bot_api.messages(room)] == chunks  # every chunk once, in order
    assert [m.message_id for m in bot_api.messages(room)][: len(before)] == before
    edits = [a for a in bot_api.attempts if a.method == "editMessageText"][edits_before:]
    assert edits == []  # both messages already showed their final chunks: neither is touched again


async def test_a_preview_whose_record_fails_is_taken_down_and_a_message_deleted_by_a_person_is_posted_anew(
    store, bot_api
) -> None:
    """Redis away as a preview is posted: the journal cannot say where it is, so the attempt after the
    failed turn would post beside it. The preview is taken down instead, and a message the journal
    does name but a person deleted is posted again rather than failing the reply."""
    from redis.exceptions import ConnectionError as RedisConnectionError

    from gateway.platforms.base import OpenGate
    from gateway.platforms.telegram import TelegramAdapter
    from gateway.store.journal import ReplyJournal
    from tests.fakes.telegram import telegram_settings

    class RedisAway(ReplyJournal):
        async def record(self, facts):
            raise RedisConnectionError("connection to Redis lost")

    room = "-1007104"
    adapter = TelegramAdapter(telegram_settings(bot_api), typing_interval=0)
    lock = await store.acquire_lock(f"tg:{room}", 30)
    assert lock is not None
    try:
        away = adapter.reply_surface(
            room, OpenGate(), reply_to="91004", journal=RedisAway(store.channel, store.prefix, lock, "tg:91004")
        )
        with pytest.raises(RedisConnectionError):
            await away.preview("the replica is catching")
        assert bot_api.messages(room) == []  # taken down again

        journal = ReplyJournal(store.channel, store.prefix, lock, "tg:91004")
        retry = adapter.reply_surface(room, OpenGate(), reply_to="91004", journal=journal)
        assert await retry.preview("the replica is catching up")
        (shown,) = bot_api.messages(room)
        await adapter.bot.delete_message(chat_id=int(room), message_id=shown.message_id)  # a person removes it
        after_crash = adapter.reply_surface(room, OpenGate(), reply_to="91004", journal=journal)
        await after_crash.finish("the replica caught up")
    finally:
        await adapter.stop()
    assert [m.text for m in bot_api.messages(room)] == ["the replica caught up"]
