"""Redis stopped cleanly and SIGKILLed while two gateway processes answer twelve chats.

The server is foldgate's embedded one (append-only file on), restarted in place on its socket.
Nothing acknowledged may be lost — a SIGKILL skips the final flush, but every write was in the
append-only file before it was acknowledged — every chat must be answered again once the server
is back, without a message given up as failed while the server was still loading its data, and
the workers must not print a traceback per retry.

"Again at once, not after a wait" is checked on what would cause the wait, as Redis reports it: a
chat whose turn the restart cut keeps its lock across the restart (Redis persists it with its
expiry), and only its worker giving the lock back once Redis answers spares the chat from waiting
the lock's whole ttl out. So every lock a restart cut must end deleted by its holder, never expired.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from fnmatch import fnmatchcase
from pathlib import Path

from redis.asyncio import Redis
from redis.asyncio.client import PubSub

from evals.bench_chaos import RestartableRedis
from tests.fakes.kill_load import KillLoad, summary_lines
from tests.fakes.waiting import PATIENCE

PREFIX = "fgrestart"
#: Every chat's lock under the prefix, as a glob (Redis' and fnmatch's alike take the braces literally).
LOCKS = f"{PREFIX}:{{*}}:lock"


class CutLocks:
    """The chat locks each restart cut, and how each ended, in Redis' own order of events.

    A lock Redis holds once it is back was taken by a worker that knows its token — before the restart, in the
    instant of it (a take whose answer was lost), or since — so only that worker's release can end it early. How a
    key stops existing is something the server announces (keyspace notifications: ``del`` for a release,
    ``expired`` for a lock left to run out), and one connection receives the announcements in the order the
    server made them, so the first end such a lock meets after the restart is its own. Notifications are a
    setting of the running server and a subscription on one connection, both ending with the server, so
    :meth:`restart` subscribes to the new one before it looks at the locks again: no end goes unseen.
    """

    def __init__(self, server: RestartableRedis) -> None:
        self.server = server
        #: Per restart, the locks it cut.
        self.cut: list[set[str]] = []
        #: (watch, lock, how it ended: ``del`` or ``expired``), watch n being the one after restart n (0: before any).
        self.ends: list[tuple[int, str, str]] = []
        self._watching: asyncio.Task[None] | None = None
        self._watches = 0

    async def watch(self) -> None:
        client = Redis.from_url(self.server.url, decode_responses=True)
        await client.config_set("notify-keyspace-events", "Egx")
        pubsub = client.pubsub()
        channels = ("__keyevent@*__:del", "__keyevent@*__:expired")
        await pubsub.psubscribe(*channels)
        confirmed = 0
        while confirmed < len(channels):  # subscribed at the server, not only asked: only then is nothing missed
            event = await pubsub.get_message(timeout=PATIENCE)
            assert event is not None, "the server never confirmed the subscription"
            confirmed += event["type"] == "psubscribe"
            self._take(self._watches, event)
        self._watching = asyncio.create_task(self._collect(self._watches, client, pubsub))
        self._watches += 1

    def _take(self, watch: int, event: dict[str, str]) -> None:
        if event["type"] == "pmessage" and fnmatchcase(event["data"], LOCKS):
            self.ends.append((watch, event["data"], event["channel"].rsplit(":", 1)[1]))

    async def _collect(self, watch: int, client: Redis, pubsub: PubSub) -> None:
        try:
            async for event in pubsub.listen():
                self._take(watch, event)
        finally:
            with contextlib.suppress(Exception):  # the server may be gone already
                await pubsub.aclose()
                await client.aclose()

    async def stop(self) -> None:
        if self._watching is not None:
            # a watch that ended by itself could have missed an end: the check would prove nothing
            assert not self._watching.done(), self._watching
            self._watching.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._watching
            self._watching = None

    async def restart(self, hard: bool) -> float:
        """:meth:`RestartableRedis.restart`, the locks it cut noted."""
        await self.stop()
        started = await self.server.restart(hard)
        await self.watch()  # before looking: whatever ends from now on is seen
        # Every lock Redis holds once it is back: those the restart cut, a take whose answer the restart lost
        # included (its worker knows the token it sent), and any taken since; each must end by its holder.
        self.cut.append(set(await self._locks()))
        return started

    async def _locks(self, keys: list[str] | None = None) -> dict[str, str]:
        """Every chat lock's token (or those of ``keys``), as Redis holds them now."""
        probe = Redis.from_url(self.server.url, decode_responses=True)
        try:
            if keys is None:
                keys = [key async for key in probe.scan_iter(match=LOCKS)]
            tokens = await probe.mget(keys) if keys else []
        finally:
            await probe.aclose()
        return {key: token for key, token in zip(keys, tokens) if token is not None}

    def not_given_back(self) -> list[str]:
        """Every lock a restart cut that its holder did not delete: expired, or never ended."""
        found = []
        for number, locks in enumerate(self.cut):
            for key in sorted(locks):
                how = next((how for watch, ended, how in self.ends if watch > number and ended == key), "never ended")
                if how != "del":
                    found.append(f"restart {number + 1}: {key} {how}")
        return found


async def test_redis_stopped_and_killed_under_load_loses_nothing_and_every_chat_is_answered_again() -> None:
    with tempfile.TemporaryDirectory(prefix="fgredis-") as home:  # short: the socket path has a length limit
        server = RestartableRedis(Path(home))
        url = await server.start()
        client = Redis.from_url(url, decode_responses=True)
        try:
            locks = CutLocks(server)
            await locks.watch()
            try:
                report = await KillLoad(
                    client, url, PREFIX, kills=0, redis_restarts=4, restart_redis=locks.restart
                ).run()  # ends with the workers stopped: every lock they still held given back
            finally:
                await locks.stop()
        finally:
            await client.aclose()
            await server.stop()
    print("\n" + "\n".join(summary_lines(report)))
    print(f"chat locks each restart cut: {[len(cut) for cut in locks.cut]}")
    assert [restart.hard for restart in report.redis_restarts] == [False, True, False, True]
    assert report.lost == [] and report.extras == []
    assert report.broken_sessions == []
    for restart in report.redis_restarts:  # every chat had a message, draft or edit accepted after each restart
        assert restart.private_back_after is not None and restart.every_chat_back_after is not None
    assert any(locks.cut)  # the restarts did cut turns: there were locks to give back
    assert locks.not_given_back() == []  # no chat waited out a lock: each was given back once Redis answered
    logs = report.logs
    assert "Redis is back" in logs
    assert "Traceback" not in logs
    assert "failed (attempt" not in logs  # no message counted as failing because the server was away
    assert logs.count("Redis is away") <= 2 * len(report.redis_restarts)  # one line per process per outage
