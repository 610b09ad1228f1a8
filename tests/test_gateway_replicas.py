"""Several gateway processes on one Redis: every message answered exactly once, in order per chat,
and a worker killed mid-turn loses nothing."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections import defaultdict
from pathlib import Path


from gateway.store.inbox import Inbox
from gateway.store import SessionStore
from tests.fakes.gateway import message
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply

ROOT = Path(__file__).resolve().parents[1]


def start_worker(redis_url: str, prefix: str, base_url: str, lock_ttl: float = 30.0) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.worker_process", "--redis", redis_url, "--prefix", prefix,
         "--base-url", base_url, "--lock-ttl", str(lock_ttl)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


async def wait_for(predicate, timeout: float = 120.0, interval: float = 0.05) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(interval)


def echo(request: RecordedRequest) -> Reply:
    return Reply.answer(f"echo: {request.last_user_text}")


async def sent(redis, prefix: str) -> list[dict]:
    return [json.loads(raw) for raw in await redis.lrange(f"{prefix}:sent", 0, -1)]


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def test_two_processes_answer_100_chats_of_20_messages_exactly_once_in_order(redis, redis_url, key_prefix):
    chats, per_chat = 100, 20
    async with FakeLLMServer(handler=echo) as server:
        workers = [start_worker(redis_url, key_prefix, server.openai_base_url) for _ in range(2)]
        try:
            await wait_for(lambda: _count(redis, f"{key_prefix}:workers", 2), timeout=60)
            inbox = Inbox(redis, key_prefix)
            for index in range(per_chat):  # interleaved across chats, in order within each chat
                for chat in range(chats):
                    await inbox.put(message(f"c{chat}", f"{chat}-{index}", f"chat {chat} message {index}"))
            await wait_for(lambda: _count(redis, f"{key_prefix}:sent", chats * per_chat), timeout=240)
            await asyncio.sleep(0.5)  # anything extra would show up now
            replies = await sent(redis, key_prefix)
        finally:
            for worker in workers:
                stop(worker)
    assert len(replies) == chats * per_chat
    by_chat: dict[str, list[str]] = defaultdict(list)
    for reply in replies:
        by_chat[reply["chat"]].append(reply["text"])
    for chat in range(chats):
        assert by_chat[f"c{chat}"] == [f"echo: chat {chat} message {i}" for i in range(per_chat)]
    assert len({reply["pid"] for reply in replies}) == 2  # both processes took part


async def _count(redis, key: str, wanted: int) -> bool:
    return await redis.llen(key) >= wanted


async def test_a_worker_killed_mid_turn_loses_nothing_and_the_reply_goes_out_once(redis, redis_url, key_prefix):
    slow_seen = asyncio.Event()
    slow_mode = {"on": True}

    def script(request: RecordedRequest) -> Reply:
        text = request.last_user_text
        if "slow" in text and slow_mode["on"]:
            slow_seen.set()
            return Reply.slow(60, Reply.answer(f"echo: {text}"))
        return Reply.answer(f"echo: {text}")

    async with FakeLLMServer(handler=script) as server:
        first = start_worker(redis_url, key_prefix, server.openai_base_url, lock_ttl=2.0)
        second = None
        try:
            await wait_for(lambda: _count(redis, f"{key_prefix}:workers", 1), timeout=60)
            inbox = Inbox(redis, key_prefix)
            for index, text in enumerate(["one", "slow two", "three"]):
                await inbox.put(message("k", f"k-{index}", text))
            await asyncio.wait_for(slow_seen.wait(), timeout=60)
            first.kill()  # mid-turn: the model call for "slow two" is in flight
            first.wait()
            slow_mode["on"] = False
            second = start_worker(redis_url, key_prefix, server.openai_base_url, lock_ttl=2.0)
            await wait_for(lambda: _count(redis, f"{key_prefix}:sent", 3), timeout=60)
            await asyncio.sleep(1.0)
            replies = await sent(redis, key_prefix)
            store = SessionStore(redis, key_prefix)
            transcript = await store.active("local:k", await store.current_session("local:k"))
        finally:
            stop(first)
            if second:
                stop(second)
    assert [r["text"] for r in replies] == ["echo: one", "echo: slow two", "echo: three"]
    users = [m["content"] for m in transcript if m["role"] == "user"]
    assert users == ["one", "slow two", "three"]
    assert await redis.llen(f"{key_prefix}:{{local:k}}:inbox") == 0
