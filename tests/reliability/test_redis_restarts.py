"""Redis stopped cleanly and SIGKILLed while two gateway processes answer twelve chats.

The server is foldgate's embedded one (append-only file on), restarted in place on its socket.
Nothing acknowledged may be lost — a SIGKILL skips the final flush, but every write was in the
append-only file before it was acknowledged — every chat must be answered again within
seconds of the server being back, without a message given up as failed while the server was
still loading its data, and the workers must not print a traceback per retry.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from evals.bench_chaos import RestartableRedis
from tests.fakes.kill_load import KillLoad, summary_lines


async def test_redis_stopped_and_killed_under_load_loses_nothing_and_every_chat_is_answered_again() -> None:
    from redis.asyncio import Redis

    with tempfile.TemporaryDirectory(prefix="fgredis-") as home:  # short: the socket path has a length limit
        server = RestartableRedis(Path(home))
        url = await server.start()
        client = Redis.from_url(url, decode_responses=True)
        try:
            report = await KillLoad(
                client, url, "fgrestart", kills=0, redis_restarts=4, restart_redis=server.restart
            ).run()
        finally:
            await client.aclose()
            await server.stop()
    print("\n" + "\n".join(summary_lines(report)))
    assert [restart.hard for restart in report.redis_restarts] == [False, True, False, True]
    assert report.lost == [] and report.extras == []
    assert report.broken_sessions == []
    for restart in report.redis_restarts:
        assert restart.private_back_after is not None and restart.private_back_after < 15
        # a group may also wait out a 429 Telegram sent it; beyond that, back within the same bound
        assert restart.every_chat_back_after is not None
        assert restart.every_chat_back_after < 15 + restart.longest_flood_wait
    logs = report.logs
    assert "Redis is back" in logs
    assert "Traceback" not in logs
    assert "failed (attempt" not in logs  # no message counted as failing because the server was away
    assert logs.count("Redis is away") <= 2 * len(report.redis_restarts)  # one line per process per outage
