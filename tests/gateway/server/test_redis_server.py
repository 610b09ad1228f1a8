"""The embedded server: starts on its own socket, keeps data across stop/start, is shared by a second foldgate on
the same home, explains a failed start."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from agent.messages import to_api
from gateway.server.lifecycle import MAX_SOCKET_PATH_BYTES, EmbeddedRedis, EmbeddedRedisError, connect_or_embed
from gateway.store import SessionStore
from tests.fakes.waiting import wait_for

CHAT = "tg:5150"


@pytest.fixture
def home() -> Iterator[Path]:
    # A short path, so the unix socket fits (pytest's tmp_path can be long on some machines).
    with tempfile.TemporaryDirectory(prefix="fg-") as directory:
        yield Path(directory)


async def test_starts_on_its_own_socket_and_keeps_sessions_across_stop_and_start(home: Path) -> None:
    server = EmbeddedRedis(home)
    url = await server.start()
    assert url == f"unix://{home.resolve()}/redis/server.sock"
    assert (home / "redis" / "server.sock").stat().st_mode & 0o077 == 0  # owner only

    client = Redis.from_url(url, decode_responses=True)
    assert await client.config_get("port") == {"port": "0"}  # no TCP listener at all, 6379 untouched
    store = SessionStore(client)
    sid = await store.current_session(CHAT)
    lock = await store.acquire_lock(CHAT, 30)
    assert lock is not None
    turn = [
        {"role": "user", "content": "覚えておいて: 合言葉は「青い鳥」"},
        {"role": "assistant", "content": "覚えました。"},
        {"role": "user", "content": "and the build number is 4417"},
    ]
    await store.append(CHAT, sid, turn, lock=lock)
    kept = await store.active(CHAT, sid)
    summary = {"role": "user", "content": "[CONTEXT COMPACTION] password 青い鳥, build 4417"}
    await store.commit_compaction(CHAT, sid, [summary, kept[-1]], lock=lock, in_place=True, compaction_id="c1")
    await client.aclose()
    await server.stop()
    assert not server.running and not (home / "redis" / "server.url").exists()
    assert any((home / "redis" / "appendonlydir").iterdir())

    async with EmbeddedRedis(home) as again:
        client = Redis.from_url(again.url or "", decode_responses=True)
        store = SessionStore(client)
        assert await store.current_session(CHAT) == sid
        assert [m["content"] for m in await store.active(CHAT, sid)] == [summary["content"], turn[2]["content"]]
        assert to_api(await store.archive(CHAT, sid)) == [{**m, "active": 0, "compacted": 1} for m in to_api(turn[:2])]
        assert (await store.meta(CHAT, sid)).compaction_count == 1
        await client.aclose()


async def test_falls_back_to_a_loopback_port_when_the_socket_path_is_too_long(home: Path) -> None:
    deep = home / ("d" * 60) / ("e" * 60)
    server = EmbeddedRedis(deep)
    assert len(str(server.socket_path).encode()) > MAX_SOCKET_PATH_BYTES and not server.uses_unix_socket()
    async with server:
        assert server.url is not None and server.url.startswith("redis://127.0.0.1:")
        assert not server.url.endswith(":6379")
        client = Redis.from_url(server.url, decode_responses=True)
        await client.set("k", "v")
        assert await client.get("k") == "v"
        assert await client.config_get("bind") == {"bind": "127.0.0.1"}
        await client.aclose()


def _gone(pid: int) -> bool:
    """A pid that no longer runs (a zombie waiting for its reaper counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state in ("Z", "X")
    except FileNotFoundError:
        return True
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_a_second_start_on_the_same_home_shares_the_server_and_only_the_owner_stops_it(home: Path) -> None:
    owner = EmbeddedRedis(home)
    url = await owner.start()
    assert owner.owns_server and owner.notice is None and owner.owner_pid == os.getpid()
    pid = json.loads((home / "redis" / "server.json").read_text())["pid"]
    lines: list[str] = []
    client, sharer = await connect_or_embed(None, home, notice=lines.append)
    try:
        assert sharer is not None and sharer.url == url and not sharer.owns_server and sharer.running
        assert lines == [sharer.notice] and "using the embedded Redis this process already runs" in lines[0]
        await client.set("shared", "yes")
    finally:
        await client.aclose()
        assert sharer is not None
        await sharer.stop()
    assert not sharer.running and owner.running and not _gone(pid)
    first = Redis.from_url(url, decode_responses=True)
    assert await first.get("shared") == "yes"  # the sharer's close left the owner's server serving
    await first.aclose()
    await owner.stop()
    assert _gone(pid) and not (home / "redis" / "server.json").exists()


async def test_two_starts_at_once_run_one_server(home: Path) -> None:
    first, second = EmbeddedRedis(home), EmbeddedRedis(home)
    try:
        urls = await asyncio.gather(first.start(), second.start())
        assert urls[0] == urls[1]
        assert sorted([first.owns_server, second.owns_server]) == [False, True]
    finally:
        for server in sorted((first, second), key=lambda s: s.owns_server):  # the sharer lets go first
            await server.stop()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
async def test_the_server_stops_cleanly_even_when_its_watcher_is_killed(home: Path) -> None:
    server = EmbeddedRedis(home)
    await server.start()
    pid = json.loads((home / "redis" / "server.json").read_text())["pid"]
    try:
        assert server._process is not None
        server._process.kill()  # SIGKILL the watcher: the kernel sends the server SIGTERM
        server._process.wait()
        await wait_for(lambda: _gone(pid), what=f"the server (pid {pid}) to stop")
        assert "Received SIGTERM" in server.log_tail()  # stopped by the signal, cleanly
    finally:
        await server.stop()


async def test_a_failed_start_says_why_with_the_servers_log(home: Path) -> None:
    async with EmbeddedRedis(home):
        pass
    manifest = home / "redis" / "appendonlydir" / "appendonly.aof.manifest"
    manifest.write_text("this is not a manifest\n")
    with pytest.raises(EmbeddedRedisError) as failure:
        await EmbeddedRedis(home, startup_timeout=10).start()
    message = str(failure.value)
    assert "exited with code" in message and "Invalid AOF manifest file format" in message


async def test_connect_or_embed_uses_a_configured_url_and_embeds_without_one(home: Path, redis_url: str) -> None:
    client, embedded = await connect_or_embed(redis_url, home)
    assert embedded is None and await client.ping()
    await client.aclose()

    for empty in (None, "", "  "):
        client, embedded = await connect_or_embed(empty, home)
        try:
            assert embedded is not None and embedded.running
            await client.set("probe", "ok")
            assert await client.get("probe") == "ok"  # a str: the client decodes responses
        finally:
            await client.aclose()
            assert embedded is not None
            await embedded.stop()
