"""foldgate on a real 3-node Redis Cluster (Valkey from the installed package): every step of the store, the
inbox and a whole gateway turn works when a chat's keys live on one node and other chats on others."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from gateway.server.lifecycle import connect_or_embed, server_binary
from gateway.store import SessionStore
from tests.fakes.gateway import make_settings, message, running_gateway
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.fakes.waiting import wait_for

SLOTS = ((0, 5460), (5461, 10922), (10923, 16383))


def free_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free too."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port + 10_000 > 65_535:
            continue
        with socket.socket() as bus:
            try:
                bus.bind(("127.0.0.1", port + 10_000))
            except OSError:
                continue
        return port


async def answers(node: Redis) -> bool:
    """Whether a freshly started node answers PING yet."""
    try:
        return bool(await node.ping())
    except Exception:  # still starting: refused, reset
        return False


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster_url(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    base = tmp_path_factory.mktemp("cluster")
    ports = [free_port() for _ in SLOTS]
    processes = []
    for port in ports:
        directory = base / str(port)
        directory.mkdir()
        processes.append(
            subprocess.Popen(
                [
                    str(server_binary()),
                    "--port",
                    str(port),
                    "--bind",
                    "127.0.0.1",
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--dir",
                    str(directory),
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    nodes = [Redis(port=port) for port in ports]
    try:
        for process in processes:
            assert process.poll() is None, "a cluster node failed to start"
        for node, port in zip(nodes, ports):
            await wait_for(lambda node=node: answers(node), what=f"the cluster node on port {port} to answer PING")
        for node, (first, last) in zip(nodes, SLOTS):
            await node.execute_command("CLUSTER", "ADDSLOTSRANGE", first, last)
        for port in ports[1:]:
            await nodes[0].execute_command("CLUSTER", "MEET", "127.0.0.1", port)

        async def ready() -> bool:
            states = [await node.execute_command("CLUSTER", "INFO") for node in nodes]
            return all(b"cluster_state:ok" in state for state in states)

        await wait_for(ready, what="the cluster to report cluster_state:ok on every node")
        yield f"redis://127.0.0.1:{ports[0]}/0"
    finally:
        for node in nodes:
            await node.aclose()
        for process in processes:
            process.terminate()
            process.wait(timeout=10)


async def test_store_and_inbox_steps_run_on_a_cluster_with_chats_on_different_nodes(cluster_url, tmp_path):
    client, embedded = await connect_or_embed(cluster_url, tmp_path, cluster=True)
    assert embedded is None and isinstance(client, RedisCluster)
    try:
        store = SessionStore(client, "fgc")
        chats = [f"tg:{n}" for n in range(12)]
        assert len({key_slot(store.keys(chat).session.encode()) * 3 // 16384 for chat in chats}) == 3
        for chat in chats:
            sid = await store.current_session(chat)
            lock = await store.acquire_lock(chat, 30)
            assert lock is not None
            await store.append(
                chat,
                sid,
                [
                    {"role": "user", "content": f"hello from {chat}"},
                    {"role": "assistant", "content": "hi"},
                    {"role": "user", "content": "fold this"},
                ],
                lock=lock,
            )
            active = await store.active(chat, sid)
            commit = await store.commit_compaction(
                chat,
                sid,
                [active[0], {"role": "assistant", "content": "summary"}],
                lock=lock,
                in_place=True,
                compaction_id="c1",
            )
            assert commit.session_id == sid and len(commit.archived_ids) == 2
            assert [m["content"] for m in await store.archive(chat, sid)] == ["hi", "fold this"]
            assert await store.seen(chat, "u1") and not await store.seen(chat, "u1")
    finally:
        await client.aclose()


async def test_a_gateway_answers_chats_across_the_cluster(cluster_url, tmp_path):
    def echo(request: RecordedRequest) -> Reply:
        return Reply.answer(f"echo: {request.last_user_text}")

    client, _ = await connect_or_embed(cluster_url, tmp_path, cluster=True)
    try:
        async with FakeLLMServer(handler=echo) as server:
            settings = make_settings(cluster_url, "fgcg", server.openai_base_url, context_length=16_000)
            async with running_gateway(settings, client) as (runner, adapter, _events):
                for index in range(3):
                    for chat in range(9):
                        await runner.intake(message(f"c{chat}", f"{chat}-{index}", f"chat {chat} turn {index}"))
                await runner.wait_idle()
    finally:
        await client.aclose()
    for chat in range(9):
        assert [text for chat_id, text in adapter.sent if chat_id == f"c{chat}"] == [
            f"echo: chat {chat} turn {index}" for index in range(3)
        ]
