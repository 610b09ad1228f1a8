"""The pipelined Redis channel: many callers share one write, every reply reaches its own caller, failures are loud."""

from __future__ import annotations

import asyncio
import enum
import socket
import uuid
from dataclasses import replace

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.store.channel import (
    Address,
    PipelinedConnection,
    RedisPyChannel,
    Script,
    UnsupportedRedisOption,
    channel_for,
    pack,
)
from tests.fakes.redis_time import until_blocked
from tests.fakes.waiting import PATIENCE


def test_pack_writes_the_resp_redis_py_would_send():
    assert pack(("SET", "k", "välue")) == b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$6\r\nv\xc3\xa4lue\r\n"
    assert (
        pack(("ZADD", "z", 1.5, 7, b"\x00\xff"))
        == b"*5\r\n$4\r\nZADD\r\n$1\r\nz\r\n$3\r\n1.5\r\n$1\r\n7\r\n$2\r\n\x00\xff\r\n"
    )
    for bad in (None, True, ["list"]):
        with pytest.raises(DataError, match="invalid Redis argument"):
            pack(("SET", "k", bad))  # type: ignore[arg-type]
    ttl = enum.IntEnum("Ttl", {"DAY": 86_400}).DAY  # subclasses of the plain types pack as their values
    assert pack(["EXPIRE", "k", ttl]) == pack(("EXPIRE", "k", 86_400))


def test_the_address_is_taken_from_a_redis_py_client():
    tcp = Address.of(Redis.from_url("redis://alice:s3cret@example.internal:6380/3"))
    assert (tcp.host, tcp.port, tcp.db, tcp.username, tcp.password, tcp.path, tcp.tls) == (
        "example.internal",
        6380,
        3,
        "alice",
        "s3cret",
        None,
        None,
    )
    unix = Address.of(Redis.from_url("unix:///run/valkey.sock?db=2"))
    assert (unix.path, unix.db) == ("/run/valkey.sock", 2)
    assert Address.of(Redis.from_url("rediss://cache.internal:6390/0")).tls is not None


async def test_commands_from_concurrent_callers_share_one_write_and_each_gets_its_own_reply(
    channel: PipelinedConnection, redis: Redis, key_prefix: str
):
    keys = [f"{key_prefix}:k{i}" for i in range(50)]
    await asyncio.gather(*(channel.call("SET", key, f"value {i}") for i, key in enumerate(keys)))
    writes = channel.writes
    values = await asyncio.gather(*(channel.call("GET", key) for key in reversed(keys)))
    assert values == [f"value {i}" for i in reversed(range(50))]
    assert channel.writes == writes + 1  # fifty callers, one write
    assert await redis.get(keys[7]) == "value 7"  # really stored, seen by another client


async def test_call_in_order_runs_a_sequence_in_order_and_an_error_reply_spoils_nothing_else(
    channel: PipelinedConnection, key_prefix: str
):
    key, text = f"{key_prefix}:n", f"{key_prefix}:text"
    assert await channel.call_in_order(("SET", key, 1), ("INCR", key), ("INCRBY", key, 10), ("GET", key)) == [
        "OK",
        2,
        12,
        "12",
    ]
    await channel.call("SET", text, "not a number")
    with pytest.raises(ResponseError, match="not an integer"):
        await channel.call_in_order(("INCR", key), ("INCR", text), ("INCR", key))
    assert await channel.call("GET", key) == "14"  # the commands around the failing one ran, in order
    assert await channel.call("LRANGE", f"{key_prefix}:missing", 0, -1) == []


async def test_a_script_the_server_forgot_is_loaded_again(channel: PipelinedConnection, redis: Redis, key_prefix: str):
    script = Script.of(f"-- {uuid.uuid4().hex}\nreturn redis.call('INCR', KEYS[1])")
    key = f"{key_prefix}:counter"
    assert await script.run(channel, [key], []) == 1  # unknown at first: EVAL runs it and caches it
    assert (await redis.script_exists(script.sha)) == [True]
    assert await script.run(channel, [key], []) == 2
    assert await script.run(RedisPyChannel(redis), [key], []) == 3  # the redis-py route names NOSCRIPT differently


async def test_a_caller_that_gives_up_does_not_shift_the_replies_of_the_others(
    channel: PipelinedConnection, redis: Redis, key_prefix: str
):
    key, empty = f"{key_prefix}:after", f"{key_prefix}:empty-list"
    await channel.call("SET", key, "mine")
    client_id = await channel.call("CLIENT", "ID")
    blocked = asyncio.ensure_future(channel.call("BLPOP", empty, 0))  # until something is pushed
    await until_blocked(redis, client_id)  # sent: its reply is owed to this caller
    blocked.cancel()
    with pytest.raises(asyncio.CancelledError):
        await blocked
    await redis.rpush(empty, "for nobody")  # the BLPOP's reply comes now, for a caller that gave up
    assert await asyncio.wait_for(channel.call("GET", key), PATIENCE) == "mine"  # not the BLPOP's reply
    assert await channel.call("PING") == "PONG"


async def test_a_lost_connection_fails_what_is_in_flight_and_the_next_command_reconnects(
    channel: PipelinedConnection, redis: Redis, key_prefix: str
):
    client_id = await channel.call("CLIENT", "ID")
    waiting = asyncio.ensure_future(channel.call("BLPOP", f"{key_prefix}:never", 0))  # never answered by itself
    await until_blocked(redis, client_id)  # in flight at the server
    await redis.execute_command("CLIENT", "KILL", "ID", client_id)
    with pytest.raises(RedisConnectionError):
        await asyncio.wait_for(waiting, PATIENCE)
    assert await channel.call("CLIENT", "ID") != client_id  # a new connection
    assert await channel.call("PING") == "PONG"


async def test_a_server_that_stops_answering_times_out_instead_of_hanging(redis: Redis, key_prefix: str):
    channel = PipelinedConnection.like(redis, reply_timeout=0.2)
    try:
        with pytest.raises(RedisTimeoutError, match="no reply"):
            await asyncio.wait_for(channel.call("BLPOP", f"{key_prefix}:never", 3), 2)
        assert await channel.call("PING") == "PONG"
    finally:
        await channel.aclose()


async def test_credentials_and_the_database_are_used(redis: Redis, key_prefix: str):
    user, password = f"fgtest-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    await redis.execute_command("ACL", "SETUSER", user, "on", f">{password}", "~*", "+@all")
    channel = PipelinedConnection(replace(Address.of(redis), username=user, password=password, db=5))
    key = f"{key_prefix}:db5"
    try:
        assert await channel.call("ACL", "WHOAMI") == user
        await channel.call("SET", key, "here")
        assert await redis.get(key) is None  # not in the client's database 0
        assert await channel.call("GET", key) == "here"
    finally:
        await channel.call("DEL", key)
        await channel.aclose()
        await redis.execute_command("ACL", "DELUSER", user)


async def test_a_wrong_password_is_refused_with_the_servers_reason(redis: Redis):
    channel = PipelinedConnection(replace(Address.of(redis), username="nobody", password="wrong"))
    try:
        with pytest.raises(ResponseError, match="WRONGPASS|invalid"):
            await channel.call("PING")
    finally:
        await channel.aclose()


async def test_an_unreachable_server_is_named_in_the_error():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    channel = PipelinedConnection(Address(port=port, connect_timeout=1.0))
    try:
        with pytest.raises(RedisConnectionError, match=f"127.0.0.1:{port}"):
            await channel.call("PING")
    finally:
        await channel.aclose()


async def test_a_closed_channel_refuses_commands(redis: Redis):
    channel = PipelinedConnection.like(redis)
    assert await channel.call("PING") == "PONG"
    await channel.aclose()
    with pytest.raises(RedisConnectionError, match="closed"):
        await channel.call("PING")


async def test_text_that_is_not_utf8_fails_only_its_own_caller(
    channel: PipelinedConnection, redis: Redis, key_prefix: str
):
    await redis.execute_command("SET", f"{key_prefix}:bad", b"\xff\xfe")
    await channel.call("SET", f"{key_prefix}:good", "fine")
    bad, good = await asyncio.gather(
        channel.call("GET", f"{key_prefix}:bad"), channel.call("GET", f"{key_prefix}:good"), return_exceptions=True
    )
    assert isinstance(bad, DataError) and "UTF-8" in str(bad)
    assert good == "fine"  # same write, same connection: unaffected
    assert await channel.call("PING") == "PONG"


async def test_commands_of_a_sequence_that_cannot_all_be_packed_are_not_sent(
    channel: PipelinedConnection, key_prefix: str
):
    with pytest.raises(DataError):
        await channel.call_in_order(("SET", f"{key_prefix}:first", "1"), ("SET", f"{key_prefix}:second", None))  # type: ignore[arg-type]
    assert await channel.call("EXISTS", f"{key_prefix}:first") == 0


def test_options_only_redis_py_understands_keep_the_redis_py_route():
    assert isinstance(
        channel_for(Redis.from_url("rediss://cache.internal:6390/0?ssl_certfile=/c.pem&ssl_keyfile=/k.pem")),
        RedisPyChannel,
    )
    assert isinstance(channel_for(Redis.from_url("rediss://cache.internal:6390/0")), PipelinedConnection)


def test_a_cluster_client_gets_the_redis_py_route():
    from redis.asyncio.cluster import RedisCluster

    cluster = RedisCluster(host="127.0.0.1", port=7000)  # not connected: only the type matters
    assert isinstance(channel_for(cluster), RedisPyChannel)
    assert isinstance(channel_for(Redis()), PipelinedConnection)


async def test_the_urls_client_name_keepalive_and_socket_timeout_are_honoured(redis_url: str):
    name = f"fgtest-{uuid.uuid4().hex[:8]}"
    separator = "&" if "?" in redis_url else "?"
    client = Redis.from_url(f"{redis_url}{separator}client_name={name}&socket_keepalive=true&socket_timeout=0.3")
    channel = channel_for(client)
    try:
        assert isinstance(channel, PipelinedConnection) and channel.reply_timeout == 0.3
        assert await channel.call("CLIENT", "GETNAME") == name
        with pytest.raises(RedisTimeoutError, match="no reply"):
            await asyncio.wait_for(channel.call("BLPOP", f"{name}:never", 3), 2)  # 0.3 s, not the 30 s default
    finally:
        await channel.aclose()
        await client.aclose()


@pytest.mark.parametrize("option", ["health_check_interval=10", "protocol=3"])
def test_a_url_option_the_connection_does_not_implement_is_refused_in_one_line(option: str):
    from gateway.startup_errors import explain

    with pytest.raises(UnsupportedRedisOption) as refused:
        channel_for(Redis.from_url(f"redis://cache.internal:6390/0?{option}"))
    assert explain(refused.value) == (
        f"redis.url: the Redis URL option {option} is not supported by foldgate's "
        "Redis connection — remove it from the URL"
    )
