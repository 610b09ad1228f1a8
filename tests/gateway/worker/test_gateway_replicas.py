"""Several gateway processes on one Redis: every message answered exactly once, in order per chat,
and a worker killed mid-turn loses nothing."""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections import defaultdict

from gateway.store import SessionStore
from gateway.store.inbox import Inbox
from tests.fakes.gateway import message
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.fakes.workers import _count, sent, start_worker, stop, wait_for


def echo(request: RecordedRequest) -> Reply:
    return Reply.answer(f"echo: {request.last_user_text}")


async def all_work_done(inbox: Inbox, workers: list[subprocess.Popen]) -> None:
    """Return once nothing is left to send: every inbox drained and unmarked (a worker unmarks a chat only after
    its last turn), then the workers stopped gracefully, so no reply still on its way can show up later."""

    async def drained() -> bool:
        return await inbox.marked() == 0

    await wait_for(drained, timeout=60, what="every chat's inbox drained")
    for worker in workers:
        await asyncio.to_thread(stop, worker)  # the loop keeps serving the fake provider meanwhile


async def test_two_processes_take_in_100_chats_of_20_messages_exactly_once_in_order(redis, redis_url, key_prefix):
    """Messages come in faster than they are answered, so each chat's backlog is coalesced as shipped: a reply
    answers the newest message its turn took in. Exactly once and in order then means every message stored once,
    in order, no message answered twice, the replies in order, and every chat's last message answered."""
    chats, per_chat = 100, 20
    last = {f"c{chat}": f"echo: chat {chat} message {per_chat - 1}" for chat in range(chats)}

    async def every_last_message_answered() -> bool:
        return len({r["chat"] for r in await sent(redis, key_prefix) if r["text"] == last[r["chat"]]}) == chats

    async with FakeLLMServer(handler=echo) as server:
        workers = [start_worker(redis_url, key_prefix, server.openai_base_url) for _ in range(2)]
        try:
            await wait_for(lambda: _count(redis, f"{key_prefix}:workers", 2), timeout=60)
            inbox = Inbox(redis, key_prefix)
            for index in range(per_chat):  # interleaved across chats, in order within each chat
                for chat in range(chats):
                    await inbox.put(message(f"c{chat}", f"{chat}-{index}", f"chat {chat} message {index}"))
            await wait_for(every_last_message_answered, timeout=240)
            await all_work_done(inbox, workers)  # nothing extra can be sent after this
            replies = await sent(redis, key_prefix)
            store = SessionStore(redis, key_prefix)
            stored = {
                chat: [
                    m["content"]
                    for m in await store.active(f"local:{chat}", await store.current_session(f"local:{chat}"))
                    if m["role"] == "user"
                ]
                for chat in last
            }
        finally:
            for worker in workers:
                stop(worker)
    by_chat: dict[str, list[int]] = defaultdict(list)
    for reply in replies:
        found = re.fullmatch(r"echo: chat (\d+) message (\d+)", reply["text"])
        assert found and f"c{found.group(1)}" == reply["chat"], reply
        by_chat[reply["chat"]].append(int(found.group(2)))
    for chat in range(chats):
        answered = by_chat[f"c{chat}"]
        assert answered == sorted(set(answered)) and answered[-1] == per_chat - 1  # in order, none twice
        assert stored[f"c{chat}"] == [f"chat {chat} message {i}" for i in range(per_chat)]  # each kept once, in order
    assert len({reply["pid"] for reply in replies}) == 2  # both processes took part


async def test_a_worker_killed_mid_turn_loses_nothing_and_the_reply_goes_out_once(redis, redis_url, key_prefix):
    """The message that came in while the killed turn ran joins that turn when it is taken over (the backlog is
    coalesced, as shipped): one reply answers both, and every message is stored once, in order."""
    slow_seen = asyncio.Event()
    slow_mode = {"on": True}

    def script(request: RecordedRequest) -> Reply:
        text = request.last_user_text
        if "slow" in text and slow_mode["on"]:
            slow_seen.set()
            return Reply.slow(60, Reply.answer(f"echo: {text}"))
        return Reply.answer(f"echo: {text}")

    async with FakeLLMServer(handler=script) as server:
        # takeover is what is measured: a 2 s lock, so the killed worker's chat is free again quickly
        first = start_worker(redis_url, key_prefix, server.openai_base_url, lock_ttl_seconds=2)
        second = None
        try:
            await wait_for(lambda: _count(redis, f"{key_prefix}:workers", 1), timeout=60)
            inbox = Inbox(redis, key_prefix)
            await inbox.put(message("k", "k-0", "one"))
            await wait_for(lambda: _count(redis, f"{key_prefix}:sent", 1), timeout=60)
            await inbox.put(message("k", "k-1", "slow two"))
            await asyncio.wait_for(slow_seen.wait(), timeout=60)
            await inbox.put(message("k", "k-2", "three"))  # waits behind the turn in flight
            first.kill()  # mid-turn: the model call for "slow two" is in flight
            first.wait()
            slow_mode["on"] = False
            second = start_worker(redis_url, key_prefix, server.openai_base_url, lock_ttl_seconds=2)
            await wait_for(lambda: _count(redis, f"{key_prefix}:sent", 2), timeout=60)
            await all_work_done(inbox, [second])  # nothing can be sent twice after this
            replies = await sent(redis, key_prefix)
            store = SessionStore(redis, key_prefix)
            transcript = await store.active("local:k", await store.current_session("local:k"))
        finally:
            stop(first)
            if second:
                stop(second)
    assert [r["text"] for r in replies] == ["echo: one", "echo: three"]
    retried = server.requests[-1]
    assert [m["content"] for m in retried.messages if m["role"] == "user"][-2:] == ["slow two", "three"]
    users = [m["content"] for m in transcript if m["role"] == "user"]
    assert users == ["one", "slow two", "three"]
    assert await redis.llen(f"{key_prefix}:{{local:k}}:inbox") == 0
