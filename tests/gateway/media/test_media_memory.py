"""Bounded memory under a flood of media: the process's bound on bytes being taken in at once holds (never more
reserved than it allows, a waiting item proceeds when bytes are given back, in arrival order, never refused),
ItemIntake keeps to it across chats on real Redis, its setting is checked; and ``foldgate bench media`` runs end
to end in a tiny configuration and writes the figures it promises."""

from __future__ import annotations

import asyncio
import json

import pytest
from pydantic import ValidationError
from redis.asyncio import Redis

from evals import bench_media
from evals.cli import available_benchmarks
from gateway.config.models import MediaSettings
from gateway.media.in_flight import BytesInFlight
from gateway.media.message import ItemIntake
from gateway.platforms.base import IncomingMessage, MediaItem
from gateway.store.channel import PipelinedConnection
from gateway.store.media import MediaStore

MB = 1024 * 1024


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


# --------------------------------------------------------------------------- the bound itself


async def test_concurrent_holders_never_reserve_more_than_the_bound() -> None:
    bound = BytesInFlight(100)
    inside: list[int] = []
    most = 0

    async def take(size: int, seconds: float) -> None:
        nonlocal most
        async with bound.hold(size):
            inside.append(size)
            most = max(most, bound.held)
            assert bound.held <= bound.limit
            await asyncio.sleep(seconds)
            inside.remove(size)

    sizes = [30, 50, 40, 20, 70, 10, 60, 30, 90, 5] * 3
    await asyncio.gather(*(take(size, 0.001 * (index % 4)) for index, size in enumerate(sizes)))
    assert bound.held == 0 and inside == [] and bound.waiting == 0
    assert most <= 100 and bound.peak == most
    assert bound.peak > 50  # they did overlap: the bound, not a lock, kept them within it


async def test_a_waiting_item_proceeds_when_bytes_are_given_back() -> None:
    bound = BytesInFlight(100)
    release = asyncio.Event()
    entered: list[str] = []

    async def holder() -> None:
        async with bound.hold(80):
            entered.append("first")
            await release.wait()

    async def waiter() -> None:
        async with bound.hold(40):
            entered.append("second")

    first = asyncio.create_task(holder())
    await settle()
    second = asyncio.create_task(waiter())
    await settle()
    assert entered == ["first"] and bound.waiting == 1 and bound.held == 80  # waits; not refused
    release.set()
    await asyncio.wait_for(asyncio.gather(first, second), 1)
    assert entered == ["first", "second"] and bound.held == 0


async def test_waiters_are_served_in_arrival_order_so_a_large_one_is_not_passed_over() -> None:
    bound = BytesInFlight(100)
    order: list[str] = []
    release = asyncio.Event()

    async def hold(name: str, size: int, until: asyncio.Event | None = None) -> None:
        async with bound.hold(size):
            order.append(name)
            if until is not None:
                await until.wait()

    tasks = [asyncio.create_task(hold("a", 60, release))]
    await settle()
    tasks.append(asyncio.create_task(hold("large", 90)))
    await settle()
    tasks.append(asyncio.create_task(hold("small", 10)))  # it would fit now, but the large one came first
    await settle()
    assert order == ["a"]
    release.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 1)
    assert order == ["a", "large", "small"]


async def test_a_cancelled_waiter_leaves_no_reservation_and_does_not_block_the_next() -> None:
    bound = BytesInFlight(100)
    release = asyncio.Event()
    order: list[str] = []

    async def hold(name: str, size: int, until: asyncio.Event | None = None) -> None:
        async with bound.hold(size):
            order.append(name)
            if until is not None:
                await until.wait()

    first = asyncio.create_task(hold("a", 50, release))
    await settle()
    blocked = asyncio.create_task(hold("large", 90))
    await settle()
    behind = asyncio.create_task(hold("small", 30))
    await settle()
    blocked.cancel()  # the head of the queue goes away: the one behind it fits beside the holder
    await asyncio.wait_for(behind, 1)
    assert order == ["a", "small"] and bound.held == 50
    release.set()
    await first
    assert bound.held == 0 and bound.waiting == 0
    with pytest.raises(asyncio.CancelledError):
        await blocked


async def test_an_item_larger_than_the_bound_goes_alone() -> None:
    bound = BytesInFlight(100)
    async with bound.hold(500) as reserved:
        assert reserved == 100 and bound.held == 100


def test_the_setting_defaults_to_four_items_and_is_at_least_one() -> None:
    assert MediaSettings().bytes_in_flight == 4 * MediaSettings().max_bytes
    assert MediaSettings(max_bytes=2 * MB, max_bytes_in_flight=3 * MB).bytes_in_flight == 3 * MB
    with pytest.raises(ValidationError, match="max_bytes_in_flight"):
        MediaSettings(max_bytes=2 * MB, max_bytes_in_flight=MB)


# --------------------------------------------------------------------------- ItemIntake keeps to it


class SlowFiles:
    """A platform whose downloads take a while and count how many run at once (and their reported bytes)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.running = 0
        self.most = 0

    async def __call__(self, item: MediaItem, limit: int) -> bytes:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await asyncio.sleep(0.02)
            return self.data
        finally:
            self.running -= 1


async def test_many_chats_sending_at_once_take_in_at_most_the_bound(
    redis: Redis, key_prefix: str, channel: PipelinedConnection
) -> None:
    settings = MediaSettings(max_bytes=64 * 1024, max_total_bytes=MB, max_bytes_in_flight=3 * 64 * 1024)
    store = MediaStore(
        redis, key_prefix, max_bytes=settings.max_bytes, max_total_bytes=settings.max_total_bytes, channel=channel
    )
    files = SlowFiles(bytes(60 * 1024))
    intake = ItemIntake(store, settings, None, {"tg": files})

    def document(chat: int, size: int) -> IncomingMessage:
        item = MediaItem(
            kind="document", file_id=f"f{chat}", name=f"dump-{chat}.zip", mime="application/zip", size=size
        )
        return IncomingMessage(platform="tg", chat_id=str(chat), update_id=str(chat), items=(item,))

    # reported sizes: 60 KB each, so three at once; unknown sizes reserve the whole 64 KB item limit
    taken = await asyncio.gather(*(intake.take(document(chat, 60 * 1024 if chat % 2 else 0)) for chat in range(20)))
    assert all(result.refs[0]["sha"] for result in taken)  # every one was taken in: they waited, none was refused
    assert files.most == 3
    assert intake.in_flight.peak <= settings.bytes_in_flight and intake.in_flight.held == 0


async def test_an_item_refused_on_its_reported_size_reserves_nothing(
    redis: Redis, key_prefix: str, channel: PipelinedConnection
) -> None:
    settings = MediaSettings(max_bytes=64 * 1024, max_total_bytes=MB)
    store = MediaStore(
        redis, key_prefix, max_bytes=settings.max_bytes, max_total_bytes=settings.max_total_bytes, channel=channel
    )
    bound = BytesInFlight(settings.max_bytes)
    intake = ItemIntake(store, settings, None, {"tg": SlowFiles(b"")}, in_flight=bound)
    item = MediaItem(kind="document", file_id="big", name="huge.zip", size=10 * MB)
    async with bound.hold(settings.max_bytes):  # the bound is full: a refusal must not wait behind it
        result = await asyncio.wait_for(
            intake.take(IncomingMessage(platform="tg", chat_id="1", update_id="1", items=(item,))), 1
        )
    assert "over the" in result.problems[0] and bound.peak == settings.max_bytes


# --------------------------------------------------------------------------- the benchmark


def test_the_media_benchmark_is_found_by_foldgate_bench() -> None:
    assert "media" in available_benchmarks()


@pytest.mark.timeout(240)
def test_the_media_benchmark_floods_a_gateway_process_and_reports_its_peak_memory(tmp_path, redis_url) -> None:
    code = bench_media.main(
        tmp_path, redis_url=redis_url, chats=4, size=2 * MB, warm_size=16 * 1024, bounds=(None, 4 * 20 * MB * 10)
    )
    assert code == 0
    result = json.loads((tmp_path / "bench_media.json").read_text())
    default, raised = result["flood"]
    assert default["max_bytes_in_flight"] == 4 * 20 * MB and raised["max_bytes_in_flight"] == 4 * 20 * MB * 10
    for flood in (default, raised):
        assert flood["chats"] == 4 and flood["downloads"] >= 8  # each chat's warm-up document and its flood one
        assert 0 < flood["warm_rss_mb"] <= flood["peak_rss_mb"]
        assert flood["peak_over_warm_mb"] == pytest.approx(flood["peak_rss_mb"] - flood["warm_rss_mb"], abs=0.2)
        assert flood["seconds_to_answer_all"] > 0
    rows = {(row["width"], row["height"]): row for row in result["image_tokens"]}
    assert len(rows) == 10
    assert rows[(1024, 1024)]["openai"] == 765 and rows[(2048, 4096)]["openai"] == 1105
    assert rows[(1092, 1092)]["anthropic"] == 1590 and rows[(200, 200)]["anthropic"] == 54
    assert all(
        row["openai_agrees"] in (None, True) and row["anthropic_agrees"] in (None, True) for row in rows.values()
    )
    text = (tmp_path / "bench_media.md").read_text()
    assert "peak over warm" in text and "| 1024×1024 | 765 | 765 (agrees)" in text
