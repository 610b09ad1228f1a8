"""Compaction commits: in place and rotated, archived never lost, atomic under injected failures, idempotent."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlparse

import pytest
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from agent.messages import SUMMARY_PREFIX, InvalidMessage, to_api, with_content
from agent.tokens import count_message
from gateway.store import (
    CompactionCommit,
    Lock,
    SessionStore,
    StaleLock,
    VersionConflict,
    WrongKeyType,
)

CHAT = "tg:777"
STUB = "[Old tool output cleared to save context space]"


def long_chat() -> list[dict[str, Any]]:
    """Ten messages: system, two exchanges with tool calls, a closing exchange."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a build assistant."}]
    for n in (1, 2):
        messages += [
            {"role": "user", "content": f"run the tests of package {n}"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{n}",
                        "type": "function",
                        "function": {"name": "sh", "arguments": f'{{"cmd": "pytest pkg{n}"}}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"call_{n}", "content": f"pkg{n}: " + "PASSED test_x\n" * 40},
        ]
    messages += [
        {"role": "user", "content": "日本語でまとめて"},
        {"role": "assistant", "content": "両方のパッケージのテストが通りました。"},
        {"role": "user", "content": "thanks"},
    ]
    return messages


def summary(text: str = "Goal: green tests. Done: pkg1, pkg2.") -> dict[str, Any]:
    return {"role": "user", "content": f"{SUMMARY_PREFIX} {text}", "_compressed_summary": True}


async def seeded(store: SessionStore) -> tuple[str, Lock, list[dict[str, Any]]]:
    sid = await store.current_session(CHAT)
    lock = await store.acquire_lock(CHAT, 60)
    assert lock is not None
    await store.append(CHAT, sid, long_chat(), lock=lock)
    return sid, lock, await store.active(CHAT, sid)


def compacted(active: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a lean compaction hands back: head kept, middle summarized, a tool result stubbed, tail kept."""
    return [active[0], summary(), active[5], with_content(active[6], STUB), *active[7:]]


async def snapshot(redis: Redis, prefix: str) -> dict[str, Any]:
    """Every key under the prefix with its full value: equal snapshots mean nothing changed."""
    state: dict[str, Any] = {}
    async for key in redis.scan_iter(match=f"{prefix}:*"):
        kind = await redis.type(key)
        if kind == "string":
            state[key] = await redis.get(key)
        elif kind == "hash":
            state[key] = await redis.hgetall(key)
        elif kind == "list":
            state[key] = await redis.lrange(key, 0, -1)
        else:
            state[key] = kind
    return state


# --------------------------------------------------------------------------- in place


async def test_in_place_keeps_the_id_and_archives_every_replaced_message(store: SessionStore, redis: Redis) -> None:
    sid, lock, active = await seeded(store)
    await store.update_meta(CHAT, sid, lock=lock, last_prompt_tokens=88_000, tokens_at_report=10)
    new_list = compacted(active)
    msg_fields_before = await redis.hlen(store.keys(CHAT).msg(sid))

    result = await store.commit_compaction(
        CHAT,
        sid,
        new_list,
        lock=lock,
        in_place=True,
        compaction_id="cmp-1",
        meta={"previous_summary": new_list[1]["content"]},
    )

    replaced = [m["_id"] for m in active[1:5]] + [active[6]["_id"]]
    assert result.session_id == sid and result.old_session_id == ""
    assert result.archived_ids == replaced
    assert await store.current_session(CHAT) == sid

    now_active = await store.active(CHAT, sid)
    assert to_api(now_active) == to_api(new_list)
    assert [m["_id"] for m in now_active] == result.active_ids == [m["_id"] for m in new_list]
    kept_ids = [active[0]["_id"], active[5]["_id"], *(m["_id"] for m in active[7:])]
    assert set(kept_ids) <= set(result.active_ids)
    stub = now_active[3]
    assert stub["content"] == STUB and stub["_orig_id"] == active[6]["_id"] and stub["_id"] not in replaced

    archive = await store.archive(CHAT, sid)
    assert [m["_id"] for m in archive] == replaced
    assert all(m["active"] == 0 and m["compacted"] == 1 for m in archive)
    assert to_api([{k: v for k, v in m.items() if k not in ("active", "compacted")} for m in archive]) == to_api(
        active[1:5] + [active[6]]
    )  # the stubbed tool result's original is archived word for word

    # Kept messages are not stored again: only the summary and the stub are new bodies.
    assert await redis.hlen(store.keys(CHAT).msg(sid)) == msg_fields_before + 2
    meta = await store.meta(CHAT, sid)
    assert meta.tokens == sum(count_message(m) for m in to_api(new_list))
    assert (meta.count, meta.compaction_count) == (len(new_list), 1)
    assert meta.last_prompt_tokens is None and meta.tokens_at_report is None
    assert meta.previous_summary == new_list[1]["content"]
    assert meta.version == result.version


async def test_a_later_compaction_only_ever_grows_the_archive(store: SessionStore) -> None:
    sid, lock, active = await seeded(store)
    first = await store.commit_compaction(CHAT, sid, compacted(active), lock=lock, in_place=True, compaction_id="a")
    archive_after_first = [m["_id"] for m in await store.archive(CHAT, sid)]
    await store.append(
        CHAT, sid, [{"role": "user", "content": "next task"}, {"role": "assistant", "content": "ok"}], lock=lock
    )

    current = await store.active(CHAT, sid)
    second_list = [current[0], summary("Goal: next task."), *current[-2:]]
    second = await store.commit_compaction(CHAT, sid, second_list, lock=lock, in_place=True, compaction_id="b")

    archive_ids = [m["_id"] for m in await store.archive(CHAT, sid)]
    assert archive_ids[: len(archive_after_first)] == archive_after_first
    assert archive_ids[len(archive_after_first) :] == second.archived_ids
    assert first.active_ids[1] in second.archived_ids  # the first summary is archived too, never dropped
    everything = set(archive_ids) | {m["_id"] for m in await store.active(CHAT, sid)}
    originals = {m["_id"] for m in active}
    assert originals <= everything  # every original message is still reachable by id
    assert (await store.meta(CHAT, sid)).compaction_count == 2


# --------------------------------------------------------------------------- rotated


async def test_rotation_links_parent_moves_the_pointer_and_leaves_the_old_session_whole(store: SessionStore) -> None:
    sid, lock, active = await seeded(store)
    await store.update_meta(CHAT, sid, lock=lock, model="claude-opus-4", engine_state={"strikes": 1})
    new_list = compacted(active)

    result = await store.commit_compaction(CHAT, sid, new_list, lock=lock, in_place=False, compaction_id="rot-1")

    assert result.old_session_id == sid and result.session_id != sid
    assert await store.current_session(CHAT) == result.session_id
    meta = await store.meta(CHAT, result.session_id)
    assert meta.parent_session_id == sid and meta.compaction_count == 1
    assert meta.model == "claude-opus-4" and meta.engine_state == {"strikes": 1}
    assert meta.tokens == sum(count_message(m) for m in to_api(new_list)) and meta.count == len(new_list)

    assert await store.active(CHAT, sid) == active  # the old session keeps its history
    assert await store.archive(CHAT, sid) == []
    assert (await store.meta(CHAT, sid)).successor_session_id == result.session_id
    assert result.archived_ids == [m["_id"] for m in active[1:5]] + [active[6]["_id"]]

    rotated = await store.active(CHAT, result.session_id)
    assert to_api(rotated) == to_api(new_list)
    assert rotated[0]["_id"] == active[0]["_id"]  # kept messages keep their ids
    new_ids = [int(m["_id"]) for m in rotated if m["_id"] not in {a["_id"] for a in active}]
    assert new_ids and min(new_ids) > max(int(m["_id"]) for m in active)  # unique along the chain


async def test_rotation_refuses_when_the_chat_already_moved_on(
    store: SessionStore, redis: Redis, key_prefix: str
) -> None:
    sid, lock, active = await seeded(store)
    await store.new_session(CHAT)  # /new arrived while the turn was compacting
    before = await snapshot(redis, key_prefix)
    with pytest.raises(VersionConflict, match="no longer points"):
        await store.commit_compaction(CHAT, sid, compacted(active), lock=lock, in_place=False, compaction_id="r")
    assert await snapshot(redis, key_prefix) == before


# --------------------------------------------------------------------------- idempotency


async def test_committing_the_same_compaction_twice_applies_it_once(
    store: SessionStore, redis: Redis, key_prefix: str
) -> None:
    sid, lock, active = await seeded(store)
    first = await store.commit_compaction(CHAT, sid, compacted(active), lock=lock, in_place=True, compaction_id="same")
    after_first = await snapshot(redis, key_prefix)

    retry_list = compacted(active)
    again = await store.commit_compaction(CHAT, sid, retry_list, lock=lock, in_place=True, compaction_id="same")

    assert again == first
    assert await snapshot(redis, key_prefix) == after_first
    assert [m["_id"] for m in retry_list] == first.active_ids  # the retried dicts learn the stored ids


async def test_a_repeated_rotation_returns_the_first_session(store: SessionStore) -> None:
    sid, lock, active = await seeded(store)
    first = await store.commit_compaction(CHAT, sid, compacted(active), lock=lock, in_place=False, compaction_id="r1")
    again = await store.commit_compaction(CHAT, sid, compacted(active), lock=lock, in_place=False, compaction_id="r1")
    assert again == first and await store.current_session(CHAT) == first.session_id


# --------------------------------------------------------------------------- injected failures


@pytest.mark.parametrize("broken", ["archive", "msg", "record"])
async def test_a_key_of_the_wrong_type_fails_the_commit_before_any_write(
    store: SessionStore, redis: Redis, key_prefix: str, broken: str
) -> None:
    sid, lock, active = await seeded(store)
    keys = store.keys(CHAT)
    if broken == "archive":
        await redis.set(keys.archive(sid), "not a list")
    elif broken == "record":
        await redis.rpush(keys.compaction("cmp"), "not a string")
    else:
        # Move the bodies aside and leave a string where the hash was.
        await redis.rename(keys.msg(sid), f"{key_prefix}:{{{CHAT}}}:aside")
        await redis.set(keys.msg(sid), "not a hash")
    before = await snapshot(redis, key_prefix)

    with pytest.raises(WrongKeyType):
        await store.commit_compaction(CHAT, sid, compacted(active), lock=lock, in_place=True, compaction_id="cmp")
    assert await snapshot(redis, key_prefix) == before


async def test_a_wrong_type_archive_leaves_the_old_state_whole_and_a_retry_then_succeeds(
    store: SessionStore, redis: Redis
) -> None:
    sid, lock, active = await seeded(store)
    await redis.set(store.keys(CHAT).archive(sid), "not a list")
    with pytest.raises(WrongKeyType):
        await store.commit_compaction(CHAT, sid, compacted(active), lock=lock, in_place=True, compaction_id="c")
    assert await store.active(CHAT, sid) == active
    meta = await store.meta(CHAT, sid)
    assert (meta.compaction_count, meta.count) == (0, len(active))

    await redis.delete(store.keys(CHAT).archive(sid))
    result = await store.commit_compaction(CHAT, sid, compacted(active), lock=lock, in_place=True, compaction_id="c")
    assert len(result.archived_ids) == 5  # the failed attempt did not consume the compaction id


async def test_a_stale_lock_fails_the_commit_and_changes_nothing(
    store: SessionStore, redis: Redis, key_prefix: str
) -> None:
    sid, lock, active = await seeded(store)
    await redis.delete(store.keys(CHAT).lock)
    before = await snapshot(redis, key_prefix)
    for in_place in (True, False):
        with pytest.raises(StaleLock):
            await store.commit_compaction(CHAT, sid, compacted(active), lock=lock, in_place=in_place, compaction_id="x")
    assert await snapshot(redis, key_prefix) == before


async def test_a_version_mismatch_fails_the_commit_and_changes_nothing(
    store: SessionStore, redis: Redis, key_prefix: str
) -> None:
    sid, lock, active = await seeded(store)
    read_at = (await store.meta(CHAT, sid)).version
    await store.append(CHAT, sid, [{"role": "user", "content": "arrived meanwhile"}], lock=lock)
    before = await snapshot(redis, key_prefix)
    with pytest.raises(VersionConflict, match="expected"):
        await store.commit_compaction(
            CHAT, sid, compacted(active), lock=lock, in_place=True, compaction_id="v", expected_version=read_at
        )
    assert await snapshot(redis, key_prefix) == before
    ok = await store.commit_compaction(
        CHAT,
        sid,
        compacted(await store.active(CHAT, sid)),
        lock=lock,
        in_place=True,
        compaction_id="v",
        expected_version=read_at + 1,
    )
    assert ok.session_id == sid


async def test_an_unknown_or_duplicated_kept_id_fails_the_commit_and_changes_nothing(
    store: SessionStore, redis: Redis, key_prefix: str
) -> None:
    sid, lock, active = await seeded(store)
    before = await snapshot(redis, key_prefix)
    ghost = {**active[2], "_id": "999"}
    with pytest.raises(InvalidMessage, match="999"):
        await store.commit_compaction(
            CHAT, sid, [active[0], summary(), ghost], lock=lock, in_place=True, compaction_id="g"
        )
    with pytest.raises(InvalidMessage, match="unique"):
        await store.commit_compaction(
            CHAT, sid, [active[0], summary(), active[0]], lock=lock, in_place=True, compaction_id="d"
        )
    with pytest.raises(InvalidMessage):
        await store.commit_compaction(CHAT, sid, [], lock=lock, in_place=True, compaction_id="e")
    assert await snapshot(redis, key_prefix) == before


# --------------------------------------------------------------------------- lost connection


class CuttingProxy:
    """A loopback TCP proxy to the test server that can cut the connection around one script call.

    ``drop_request``: the connection dies before the EVALSHA reaches the server.
    ``drop_reply``: the server runs the EVALSHA, the proxy swallows the reply and hangs up.
    Either mode fires once, then the proxy forwards normally again.
    """

    def __init__(self, upstream_url: str) -> None:
        self.upstream = urlparse(upstream_url)
        self.mode = "pass"
        self.cuts = 0
        self._server: asyncio.base_events.Server | None = None
        self.port = 0

    async def __aenter__(self) -> CuttingProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _open_upstream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.upstream.scheme == "unix":
            return await asyncio.open_unix_connection(self.upstream.path)
        return await asyncio.open_connection(self.upstream.hostname, self.upstream.port or 6379)

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        server_reader, server_writer = await self._open_upstream()
        swallow_reply = asyncio.Event()

        def cut() -> None:
            self.mode = "pass"
            self.cuts += 1
            client_writer.close()
            server_writer.close()

        async def requests() -> None:
            while data := await client_reader.read(65536):
                if self.mode != "pass" and b"EVALSHA" in data.upper():
                    if self.mode == "drop_request":
                        cut()
                        return
                    swallow_reply.set()
                server_writer.write(data)
                await server_writer.drain()

        async def replies() -> None:
            while data := await server_reader.read(65536):
                if swallow_reply.is_set():
                    cut()
                    return
                client_writer.write(data)
                await client_writer.drain()

        tasks = [asyncio.create_task(requests()), asyncio.create_task(replies())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        except (ConnectionError, OSError):
            pass
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            client_writer.close()
            server_writer.close()


def proxied_store(proxy: CuttingProxy, key_prefix: str, retries: int) -> tuple[Redis, SessionStore]:
    client = Redis(host="127.0.0.1", port=proxy.port, decode_responses=True, retry=Retry(NoBackoff(), retries))
    return client, SessionStore(client, prefix=key_prefix)


async def test_a_connection_cut_before_the_request_arrives_changes_nothing(
    store: SessionStore, redis: Redis, redis_url: str, key_prefix: str
) -> None:
    sid, lock, active = await seeded(store)
    async with CuttingProxy(redis_url) as proxy:
        client, via_proxy = proxied_store(proxy, key_prefix, retries=0)
        try:
            await client.ping()
            before = await snapshot(redis, key_prefix)
            proxy.mode = "drop_request"
            with pytest.raises(RedisConnectionError):
                await via_proxy.commit_compaction(
                    CHAT, sid, compacted(active), lock=lock, in_place=True, compaction_id="k"
                )
            assert proxy.cuts == 1
            assert await snapshot(redis, key_prefix) == before
        finally:
            await client.aclose()


async def test_a_lost_reply_applied_the_commit_once_and_the_retry_does_not_apply_it_again(
    store: SessionStore, redis: Redis, redis_url: str, key_prefix: str
) -> None:
    sid, lock, active = await seeded(store)
    fields_before = await redis.hlen(store.keys(CHAT).msg(sid))
    async with CuttingProxy(redis_url) as proxy:
        client, via_proxy = proxied_store(proxy, key_prefix, retries=0)
        try:
            # Load the script on the server first so the cut lands on the commit itself.
            await via_proxy.commit_compaction(CHAT, sid, active, lock=lock, in_place=True, compaction_id="warm-up")
            proxy.mode = "drop_reply"
            with pytest.raises(RedisConnectionError):
                await via_proxy.commit_compaction(
                    CHAT, sid, compacted(active), lock=lock, in_place=True, compaction_id="lost"
                )
            assert proxy.cuts == 1
            applied = await snapshot(redis, key_prefix)
            meta = await store.meta(CHAT, sid)
            assert meta.compaction_count == 2  # warm-up + the commit whose reply was lost
            assert await redis.hlen(store.keys(CHAT).msg(sid)) == fields_before + 2

            retried = await via_proxy.commit_compaction(
                CHAT, sid, compacted(active), lock=lock, in_place=True, compaction_id="lost"
            )
            assert await snapshot(redis, key_prefix) == applied
            assert isinstance(retried, CompactionCommit) and len(retried.archived_ids) == 5
            assert [m["_id"] for m in await store.archive(CHAT, sid)] == retried.archived_ids
        finally:
            await client.aclose()


async def test_the_clients_own_retry_after_a_lost_reply_applies_the_commit_once(
    store: SessionStore, redis: Redis, redis_url: str, key_prefix: str
) -> None:
    sid, lock, active = await seeded(store)
    async with CuttingProxy(redis_url) as proxy:
        client, via_proxy = proxied_store(proxy, key_prefix, retries=1)
        try:
            await via_proxy.commit_compaction(CHAT, sid, active, lock=lock, in_place=True, compaction_id="warm-up")
            proxy.mode = "drop_reply"
            result = await via_proxy.commit_compaction(
                CHAT, sid, compacted(active), lock=lock, in_place=True, compaction_id="auto"
            )
            assert proxy.cuts == 1  # the first reply was lost; redis-py resent the script
            assert len(result.archived_ids) == 5
            assert len(await store.archive(CHAT, sid)) == 5
            assert (await store.meta(CHAT, sid)).compaction_count == 2
        finally:
            await client.aclose()
