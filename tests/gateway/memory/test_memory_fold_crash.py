"""kill -9 at every step of a compaction's commit leaves people's memory and the archive consistent.

A worker process runs ``/compress`` on a private chat whose folded part holds what its person said about
themselves, and is killed with SIGKILL before its (k+1)-th Redis command from the compaction commit on — for every
k from 0 to the end of the command (:mod:`tests.fakes.dying_channel`; each Redis script is all or nothing, so the
moments between two commands are every moment a kill can leave). Another process takes the chat over once the dead
one's lock runs out and the conversation goes on. Then every statement folded into the archive is in the person's
memory exactly once, kept by the compaction and pointing at its archived message; nothing is left pending; nothing
that was not folded was kept.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from gateway.platforms.base import IncomingMessage
from gateway.platforms.recording import RecordingAdapter
from gateway.run.assembly import open_on
from gateway.store import SessionStore
from gateway.store.inbox import Inbox
from gateway.store.memory import MemoryStore
from tests.fakes import worker_process
from tests.fakes.kill_load import _forkserver
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.people import people_settings
from tests.fakes.waiting import wait_for

STATEMENTS = ("I'm allergic to shellfish.", "My name is Robin.")
CHATTER = "small talk about the weather, the trains and the neighbours once again " * 5
CHAT = "local:7"
LOCK_TTL = 1


def said(text: str, update: str) -> IncomingMessage:
    return IncomingMessage(platform="local", chat_id="7", user_id="7", user_name="Robin", update_id=update, text=text)


async def _history(redis: Any, settings: Any) -> None:
    """The chat's conversation so far: chatter with the statements early in it, answered by a healthy process."""
    adapter = RecordingAdapter("local")
    running = await open_on(redis, settings, {"local": adapter})
    try:
        texts = [f"{CHATTER}{n}" for n in range(30)]
        texts[5:5] = STATEMENTS  # after the session's first messages, which are never folded
        for n, text in enumerate(texts):
            await running.runner.intake(said(text, f"h{n}"))
        await wait_for(lambda: adapter.sent, what="the reply to the chatter")
        await running.runner.wait_idle()
    finally:
        await running.close()


async def _compress_in_a_dying_process(redis: Any, redis_url: str, prefix: str, base_url: str, steps: int) -> None:
    """``/compress`` in a worker process killed before the command after ``steps`` of the commit (-1: never)."""
    argv = ["--redis", redis_url, "--prefix", prefix, "--base-url", base_url, "--context-length", "8000"]
    argv += ["--gateway", json.dumps({"lock_ttl_seconds": LOCK_TTL}), "--die-after-commit-commands", str(steps)]
    process = _forkserver().Process(target=worker_process.run, args=(argv,), daemon=True)
    await asyncio.to_thread(process.start)
    try:
        await wait_for(lambda: _listed(redis, f"{prefix}:workers"), timeout=60, what="the worker to start")
        await Inbox(redis, prefix).put(said("/compress", "compress"))
        await wait_for(
            lambda: _dead_or_answered(redis, prefix, process), timeout=60, what="the /compress reply or the kill"
        )
    finally:
        if process.is_alive():
            process.terminate()
        await asyncio.to_thread(process.join, 30)


async def _listed(redis: Any, key: str) -> bool:
    return bool(await redis.llen(key))


async def _dead_or_answered(redis: Any, prefix: str, process: Any) -> bool:
    return not process.is_alive() or bool(await redis.llen(f"{prefix}:sent"))


async def _take_over(redis: Any, settings: Any, prefix: str) -> None:
    """A new process takes the chat once the dead one's lock ran out, and the conversation goes on."""
    lock = SessionStore(redis, prefix).keys(CHAT).lock
    await wait_for(lambda: _gone(redis, lock), timeout=30, what="the dead process's lock to run out")
    adapter = RecordingAdapter("local")
    running = await open_on(redis, settings, {"local": adapter})
    try:
        await running.runner.intake(said("good morning", "morning"))
        await wait_for(lambda: any(text == "ok" for _, text in adapter.sent), what="the morning's reply")
        await running.runner.wait_idle()
    finally:
        await running.close()


async def _gone(redis: Any, key: str) -> bool:
    return not await redis.exists(key)


async def _archived(store: SessionStore) -> dict[str, str]:
    """Every archived message of the chat's conversation, by id: its text."""
    sid = await store.current_session(CHAT)
    chain, archived = [sid], {}
    while (parent := (await store.meta(CHAT, chain[-1])).parent_session_id) is not None:
        chain.append(parent)
    for session in chain:
        for message in await store.archive(CHAT, session):
            archived[str(message.get("_id"))] = str(message.get("content"))
    return archived


async def _inconsistencies(redis: Any, prefix: str) -> list[str]:
    """What is wrong between the archive and the memory (nothing, when they agree)."""
    store = SessionStore(redis, prefix)
    archived = await _archived(store)
    entries = [e for e in await MemoryStore(store.channel, prefix).entries("local:7") if e.source == "compaction"]
    problems = []
    for statement in STATEMENTS:
        folded = [mid for mid, text in archived.items() if text == statement]
        kept = [e for e in entries if statement in e.text]
        if folded and (len(kept) != 1 or kept[0].message_id not in folded):
            problems.append(f"{statement!r} folded as {folded} but kept as {kept}")
        if not folded and kept:
            problems.append(f"{statement!r} kept as {kept} but never folded")
    if (await store.meta(CHAT, await store.current_session(CHAT))).memory_pending:
        problems.append("entries left pending")
    if not any(text == STATEMENTS[0] for text in archived.values()):
        problems.append("the compaction never folded the statements")
    return problems


async def test_kill_9_at_every_step_of_the_compaction_commit_leaves_memory_and_archive_consistent(
    redis, redis_url
) -> None:
    async with FakeLLMServer(default=Reply.answer("ok")) as llm:
        kills: list[int] = [-1]  # first a run never killed: it counts the commands to walk through
        steps = 0
        while kills:
            killed_after = kills.pop(0)
            prefix = f"fgtest-{uuid.uuid4().hex}"
            settings = people_settings(redis_url, prefix, llm, context_length=8_000, gateway={"lock_ttl_seconds": 1})
            await _history(redis, settings)
            await _compress_in_a_dying_process(redis, redis_url, prefix, llm.openai_base_url, killed_after)
            if killed_after < 0:
                steps = int(await redis.get(f"{prefix}:commit_commands") or 0)
                kills = list(range(steps + 1))
            await _take_over(redis, settings, prefix)
            assert await _inconsistencies(redis, prefix) == [], f"killed after {killed_after} commands of the commit"
    assert steps >= 4  # the commit, its announcement, and the publishing of what it kept
