"""A process killed at any step of a compaction's commit leaves people's memory and the archive consistent.

A gateway runs ``/compress`` on a private chat whose folded part holds what its person said about themselves. The
process dies after its k-th Redis command from the compaction commit on, for every k up to the end of the command:
from then on it sends nothing (a kill -9 lands between two commands; every script is all or nothing). Another
process takes the chat over once the dead one's lock runs out and goes on with the conversation. Then every
statement folded into the archive is in the person's memory exactly once, kept by the compaction and pointing at
its archived message, nothing is left pending, and nothing not folded was kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Sequence
from typing import Any

from gateway.platforms.recording import RecordingAdapter
from gateway.run import assembly
from gateway.run.assembly import open_on
from gateway.store.channel import RedisChannel
from gateway.store.memory import MemoryStore
from gateway.store.scripts import COMMIT
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.people import people_settings, said
from tests.fakes.waiting import wait_for

STATEMENTS = ("I'm allergic to shellfish.", "My name is Robin.")
CHATTER = "small talk about the weather, the trains and the neighbours once again " * 5


class Killed(BaseException):
    """What a dead process's every later step meets: nothing after the kill reaches Redis, and no handler of the
    gateway's (they catch ``Exception``) can carry on as if it were an outage."""


class DiesAfter:
    """A channel to Redis that dies after ``steps`` commands counted from the compaction commit on (None: never)."""

    def __init__(self, inner: RedisChannel, steps: int | None) -> None:
        self.inner, self.steps = inner, steps
        self.counted: int | None = None  # commands since the commit began (None: it has not)
        self.dead = asyncio.Event()

    async def _step(self, command: Sequence[Any]) -> None:
        if self.dead.is_set():
            raise Killed
        if self.counted is None and command[0] == "EVALSHA" and command[1] == COMMIT.sha:
            self.counted = 0
        if self.counted is None:
            return
        if self.steps is not None and self.counted >= self.steps:
            self.dead.set()
            raise Killed
        self.counted += 1

    async def call(self, *args: Any) -> Any:
        await self._step(args)
        return await self.inner.call(*args)

    async def call_in_order(self, *commands: Any) -> list[Any]:
        results = []
        for command in commands:
            await self._step(command)
            results.append(await self.inner.call(*command))
        return results

    async def aclose(self) -> None:
        await self.inner.aclose()


async def _history(redis, settings) -> None:
    """The chat's conversation so far: chatter with the statements early in it, answered by a healthy process."""
    adapter = RecordingAdapter("tg")
    running = await open_on(redis, settings, {"tg": adapter})
    try:
        texts = [f"{CHATTER}{n}" for n in range(30)]
        texts[5:5] = STATEMENTS  # after the session's first messages, which are never folded
        for text in texts:
            await running.runner.intake(said("7", text, name="Robin"))
        await wait_for(lambda: adapter.sent, what="the reply to the chatter")
        await running.runner.wait_idle()
    finally:
        await running.close()


async def _compress_until_killed(redis, settings, steps: int | None, monkeypatch) -> int:
    """``/compress`` in a process that dies after ``steps`` commands of the commit on; how many it sent."""
    channels: list[DiesAfter] = []

    def dying(client: Any) -> DiesAfter:
        channels.append(DiesAfter(real_channel_for(client), steps))
        return channels[-1]

    real_channel_for = assembly.channel_for
    monkeypatch.setattr(assembly, "channel_for", dying)
    adapter = RecordingAdapter("tg")
    try:
        running = await open_on(redis, settings, {"tg": adapter})
    finally:
        monkeypatch.setattr(assembly, "channel_for", real_channel_for)
    channel = channels[0]
    await running.runner.intake(said("7", "/compress", name="Robin"))
    replied = asyncio.ensure_future(wait_for(lambda: adapter.sent, what="the /compress reply"))
    died = asyncio.ensure_future(channel.dead.wait())
    await asyncio.wait([replied, died], return_when=asyncio.FIRST_COMPLETED)
    for waiting in (replied, died):
        waiting.cancel()
    if channel.dead.is_set():
        with contextlib.suppress(Killed):  # the dead process's last steps go nowhere
            await running.close(grace_seconds=0)
    else:
        await running.runner.wait_idle()
        await running.close()
    return channel.counted or 0


async def _take_over(redis, settings, key_prefix) -> None:
    """A new process takes the chat once the dead one's lock ran out, and the conversation goes on."""
    lock = f"{key_prefix}:{{tg:7}}:lock"
    await wait_for(lambda: _gone(redis, lock), timeout=30, what="the dead process's lock to run out")
    adapter = RecordingAdapter("tg")
    running = await open_on(redis, settings, {"tg": adapter})
    try:
        await running.runner.intake(said("7", "good morning", name="Robin"))
        await wait_for(lambda: any(text == "ok" for _, text in adapter.sent), what="the morning's reply")
        await running.runner.wait_idle()
    finally:
        await running.close()


async def _gone(redis, key: str) -> bool:
    return not await redis.exists(key)


async def _consistent(redis, key_prefix: str) -> list[str]:
    """What is wrong between the archive and the memory (nothing, when they agree)."""
    from gateway.store import SessionStore

    store = SessionStore(redis, key_prefix)
    memory = MemoryStore(store.channel, key_prefix)
    sid = await store.current_session("tg:7")
    archived: dict[str, str] = {}
    chain = [sid]
    while (parent := (await store.meta("tg:7", chain[-1])).parent_session_id) is not None:
        chain.append(parent)
    for session in chain:
        for item in await store.archive("tg:7", session):
            archived[str(item.get("_id"))] = str(item.get("content"))
    entries = [e for e in await memory.entries("tg:7") if e.source == "compaction"]
    problems = []
    for statement in STATEMENTS:
        folded = [mid for mid, text in archived.items() if text == statement]
        kept = [e for e in entries if statement in e.text]
        if folded and (len(kept) != 1 or kept[0].message_id not in folded):
            problems.append(f"{statement!r} folded as {folded} but kept as {kept}")
        if not folded and kept:
            problems.append(f"{statement!r} kept as {kept} but never folded")
    if (await store.meta("tg:7", sid)).memory_pending:
        problems.append("entries left pending")
    if not any(text == STATEMENTS[0] for text in archived.values()):
        problems.append("the compaction never folded the statements")
    return problems


async def test_a_kill_at_every_step_of_the_compaction_commit_leaves_memory_and_archive_consistent(
    redis, redis_url, monkeypatch
) -> None:
    def model(request) -> Reply:
        return Reply.answer("ok")

    async with FakeLLMServer(handler=model) as llm:
        kills: list[int | None] = [None]  # first a run that is never killed: it counts the commands to walk through
        while kills:
            killed_at = kills.pop(0)
            key_prefix = f"fgtest-{uuid.uuid4().hex}"
            settings = people_settings(
                redis_url, key_prefix, llm, context_length=8_000, gateway={"lock_ttl_seconds": 1}
            )
            await _history(redis, settings)
            sent = await _compress_until_killed(redis, settings, killed_at, monkeypatch)
            if killed_at is None:
                steps = sent
                kills = list(range(steps + 1))
            await _take_over(redis, settings, key_prefix)
            assert await _consistent(redis, key_prefix) == [], f"killed after {killed_at} commands of the commit"
    assert steps >= 4  # the commit, its announcement, and the publishing of what it kept
