"""The Redis clients `foldgate bench throughput` compares: each carries the message path as the pipelined channel does.

A library's figures mean something only if the gateway ran correctly on it: the same store
steps, the same replies, the store's coded script errors and NOSCRIPT recognised, a lost
connection reported as redis-py's ConnectionError. coredis and valkey-glide are the
``redis-clients`` extra; without them their cases are skipped.
"""

from __future__ import annotations

import asyncio
import importlib.util
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError, ResponseError

from evals.bench_throughput import glide_error_text, open_channel, resp2
from gateway.platforms.base import IncomingMessage
from gateway.store import SessionStore, StaleLock
from gateway.store.access import AccessLists
from gateway.store.channel import Script, is_noscript
from gateway.store.inbox import Inbox
from gateway.store.journal import ReplyJournal
from tests.fakes.redis_time import until_blocked

#: The compared channels, each skipped when its library is missing.
CHANNELS = [
    "pipelined",
    "redis-py",
    pytest.param(
        "coredis", marks=pytest.mark.skipif(not importlib.util.find_spec("coredis"), reason="coredis not installed")
    ),
    pytest.param(
        "glide", marks=pytest.mark.skipif(not importlib.util.find_spec("glide"), reason="valkey-glide not installed")
    ),
]
#: The libraries whose replies are rebuilt into RESP2's shapes (redis-py's own channel keeps redis-py's).
REBUILT = [name for name in CHANNELS if not isinstance(name, str)]
#: Channels on one connection of their own that send a sequence whole: redis-py's goes through the client's
#: pool (a command may take any connection, a lost one is retried there) and sends a sequence a command at a time.
OWN_CONNECTION = ["pipelined", *REBUILT]


@pytest_asyncio.fixture(params=CHANNELS)
async def compared(request: pytest.FixtureRequest, redis: Redis) -> AsyncIterator[Any]:
    channel = open_channel(request.param, redis)
    try:
        yield channel
    finally:
        await channel.aclose()


@pytest_asyncio.fixture
async def pipelined(redis: Redis) -> AsyncIterator[Any]:
    channel = open_channel("pipelined", redis)
    try:
        yield channel
    finally:
        await channel.aclose()


def incoming(chat: str, update: str, text: str) -> IncomingMessage:
    return IncomingMessage(platform="local", chat_id=chat, user_id="p1", update_id=update, text=text)


async def test_one_message_goes_through_the_store_as_on_the_pipelined_channel(
    compared: Any, redis: Redis, key_prefix: str
):
    store = SessionStore(redis, prefix=key_prefix, channel=compared)
    inbox = Inbox(redis, key_prefix, channel=compared)
    first, second = incoming("c1", "u1", "hello"), incoming("c1", "u2", "and then?")
    chat = first.chat

    assert await inbox.put(first) is True
    assert await inbox.put(first) is False  # a redelivery is recognised
    assert await inbox.put(second) is True
    assert chat in await inbox.ready_chats(100)

    lock, entry = await store.claim(chat, 30)  # the lock and the oldest entry in one step
    assert lock is not None and entry is not None and '"hello"' in entry
    sid, meta, messages = await store.snapshot(chat)
    assert messages == [] and meta.version >= 0
    ids = await store.append(
        chat, sid, [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi 👋"}], lock=lock
    )
    assert ids == ["1", "2"]
    journal = ReplyJournal(compared, key_prefix, lock, first.entry_id)
    await journal.record({"final:0": "m-17"})
    assert await journal.load() == {"final:0": "m-17"}  # HGETALL, as a map or a flat list
    following = await store.finish_entry(lock, sid, entry, last_prompt_tokens=12)
    assert following is not None and '"and then?"' in following
    _, meta, messages = await store.snapshot(chat)
    assert [m["content"] for m in messages] == ["hello", "hi 👋"] and meta.last_prompt_tokens == 12
    assert await store.finish_entry(lock, sid, following) is None
    assert await store.release_if_idle(lock) is None
    await inbox.unmark(chat)
    assert chat not in await inbox.ready_chats(100)

    with pytest.raises(StaleLock):  # a coded script error, turned into the store's exception
        await store.append(chat, sid, [{"role": "user", "content": "late"}], lock=lock)

    access = AccessLists(compared, key_prefix)
    await access.allow("alice")
    await access.block("mallory")
    changes = await access.read()  # SMEMBERS twice in one sequence
    assert (changes.allowed, changes.blocked) == ({"alice"}, {"mallory"})


@pytest.mark.parametrize("name", REBUILT)
async def test_replies_have_the_pipelined_channels_shapes(name: str, redis: Redis, pipelined: Any, key_prefix: str):
    channel = open_channel(name, redis)
    key = f"{key_prefix}:{name}"
    commands: list[tuple[Any, ...]] = [
        ("SET", f"{key}:s", "välue"),
        ("GET", f"{key}:s"),
        ("GET", f"{key}:missing"),
        ("HSET", f"{key}:h", "a", 1, "b", 2.5),
        ("HGETALL", f"{key}:h"),
        ("HMGET", f"{key}:h", "a", "nope"),
        ("HSETNX", f"{key}:h", "a", 1),
        ("HINCRBYFLOAT", f"{key}:h", "b", 1),
        ("ZADD", f"{key}:z", 1.5, "m", 2, "n"),
        ("ZSCORE", f"{key}:z", "m"),
        ("ZRANGE", f"{key}:z", 0, -1, "WITHSCORES"),
        ("ZREVRANGE", f"{key}:z", 0, -1),
        ("SADD", f"{key}:set", "x"),
        ("SMEMBERS", f"{key}:set"),
        ("PEXPIRE", f"{key}:h", 60_000),
        ("EVAL", "return {1, 'a', {2, false}, true, redis.status_reply('FINE')}", 0),
        ("PING",),
    ]
    try:
        theirs = [await channel.call(*command) for command in commands]
        await redis.delete(f"{key}:s", f"{key}:h", f"{key}:z", f"{key}:set")
        ours = [await pipelined.call(*command) for command in commands]
        assert theirs == ours
        assert await channel.call_in_order(*commands[:3]) == ours[:3]
    finally:
        await channel.aclose()


async def test_error_replies_and_a_forgotten_script_are_recognised(compared: Any, key_prefix: str):
    await compared.call("SET", f"{key_prefix}:text", "not a number")
    with pytest.raises(ResponseError, match="not an integer"):
        await compared.call("INCR", f"{key_prefix}:text")
    with pytest.raises(ResponseError) as coded:
        await compared.call("EVAL", "return redis.error_reply('FG_CONFLICT the session moved')", 0)
    assert str(coded.value) == "FG_CONFLICT the session moved"  # the store reads the code from the text
    with pytest.raises(ResponseError) as unknown:
        await compared.call("EVALSHA", "0" * 40, 0)
    assert is_noscript(unknown.value)
    script = Script.of(f"-- {uuid.uuid4().hex}\nreturn redis.call('INCR', KEYS[1])")
    assert [await script.run(compared, [f"{key_prefix}:n"], []) for _ in range(2)] == [1, 2]


@pytest.mark.parametrize("name", OWN_CONNECTION)
async def test_a_sequence_with_an_argument_that_cannot_be_sent_sends_nothing(name: str, redis: Redis, key_prefix: str):
    channel = open_channel(name, redis)
    try:
        with pytest.raises(DataError):
            await channel.call_in_order(("SET", f"{key_prefix}:first", "1"), ("SET", f"{key_prefix}:second", None))
        assert await channel.call("EXISTS", f"{key_prefix}:first") == 0
    finally:
        await channel.aclose()


@pytest.mark.parametrize("name", OWN_CONNECTION)
async def test_a_lost_connection_fails_the_command_in_flight_and_the_next_one_reconnects(
    name: str, redis: Redis, key_prefix: str
):
    compared = open_channel(name, redis)
    try:
        await lose_the_connection_under_a_command(compared, redis, key_prefix)
    finally:
        await compared.aclose()


async def lose_the_connection_under_a_command(compared: Any, redis: Redis, key_prefix: str) -> None:
    await compared.call("SET", f"{key_prefix}:after", "still here")
    client_id = await compared.call("CLIENT", "ID")
    blocked = asyncio.ensure_future(compared.call("BLPOP", f"{key_prefix}:empty", 0))
    await until_blocked(redis, client_id)  # the BLPOP reached the server, which holds its reply back
    await redis.execute_command("CLIENT", "KILL", "ID", client_id)
    with pytest.raises(RedisConnectionError):
        await asyncio.wait_for(blocked, 30)
    assert await asyncio.wait_for(compared.call("GET", f"{key_prefix}:after"), 30) == "still here"


def test_resp3_and_glide_values_come_back_in_resp2s_shapes():
    assert resp2({b"a": b"1", "b": 2}) == ["a", "1", "b", 2]
    assert resp2([["m", 1.5], ["n", 2.0]], pairs=True) == ["m", "1.5", "n", "2"]
    assert resp2([True, False, None, {b"x"}, 1e20]) == [1, 0, None, ["x"], "1e+20"]
    with pytest.raises(DataError, match="UTF-8"):
        resp2(b"\xff\xfe")


def test_glides_error_texts_are_read_back_to_what_the_server_sent():
    assert glide_error_text("FG_STALE_LOCK: the lock moved") == "FG_STALE_LOCK the lock moved"
    assert (
        glide_error_text("An error was signalled by the server: - NoScriptError: No matching script. Please use EVAL.")
        == "NOSCRIPT No matching script. Please use EVAL."
    )
    assert glide_error_text("An error was signalled by the server: - ResponseError: unknown command") == (
        "ERR unknown command"
    )
    assert glide_error_text("no code here") == "no code here"
