"""MediaStore on a real Redis: stored once by content hash, bytes read back raw, the per-chat allowance
dropping the oldest items' bytes but keeping what names them, every key on the chat's hash tag."""

from __future__ import annotations

import asyncio
import hashlib
import os

import pytest
from redis.asyncio import Redis

from gateway.media.errors import MediaTooLarge
from gateway.store import WrongKeyType
from gateway.store.channel import PipelinedConnection
from gateway.store.media import MediaStore

CHAT = "tg:555"
KB = 1024


def make_store(
    redis: Redis, prefix: str, channel: PipelinedConnection | None, *, total: int = 10 * KB, each: int = 4 * KB
) -> MediaStore:
    return MediaStore(redis, prefix, max_bytes=each, max_total_bytes=total, channel=channel)


@pytest.fixture
def media(redis: Redis, key_prefix: str, channel: PipelinedConnection) -> MediaStore:
    return make_store(redis, key_prefix, channel)


async def test_bytes_come_back_exactly_with_their_mime(media: MediaStore) -> None:
    data = bytes(range(256)) * 8 + b"\xff\xfe\x00\x80"  # not UTF-8: the read must not decode
    sha = await media.put(CHAT, data, mime="image/png", name="p.png", file_id="AgAD1")
    assert sha == hashlib.sha256(data).hexdigest()
    assert await media.get(CHAT, sha) == (data, "image/png")
    assert await media.get("tg:other", sha) is None  # items are the chat's own
    assert await media.get(CHAT, "0" * 64) is None


async def test_storing_the_same_bytes_again_keeps_one_copy_and_the_newest_handle(media: MediaStore) -> None:
    data = os.urandom(3 * KB)
    first, second = await asyncio.gather(
        media.put(CHAT, data, mime="image/jpeg", name="a.jpg", file_id="old"),
        media.put(CHAT, data, mime="image/jpeg", name="a.jpg", file_id="old"),
    )
    assert first == second
    assert await media.held_bytes(CHAT) == 3 * KB
    await media.put(CHAT, data, mime="image/jpeg", name="b.jpg", file_id="new")
    about = await media.about(CHAT, first)
    assert about is not None and (about.file_id, about.name, about.size, about.held) == ("new", "b.jpg", 3 * KB, True)
    assert await media.held_bytes(CHAT) == 3 * KB


async def test_an_item_over_the_limit_is_refused_before_redis(media: MediaStore, redis: Redis, key_prefix: str) -> None:
    with pytest.raises(MediaTooLarge):
        await media.put(CHAT, b"x" * (4 * KB + 1), mime="", name="big.bin", file_id="f")
    assert [key async for key in redis.scan_iter(match=f"{key_prefix}:*")] == []


async def test_at_the_allowance_the_oldest_bytes_go_and_their_handles_stay(media: MediaStore) -> None:
    items = [os.urandom(3 * KB) for _ in range(4)]
    shas = []
    for number, data in enumerate(items):
        shas.append(await media.put(CHAT, data, mime="image/webp", name=f"{number}.webp", file_id=f"file-{number}"))
    # 4 x 3 KB in a 10 KB allowance: the first one's bytes were dropped to make room for the fourth
    assert await media.held_bytes(CHAT) == 9 * KB
    assert await media.get(CHAT, shas[0]) is None
    assert [await media.get(CHAT, sha) for sha in shas[1:]] == [(data, "image/webp") for data in items[1:]]
    dropped = await media.about(CHAT, shas[0])
    assert dropped is not None and (dropped.file_id, dropped.name, dropped.size, dropped.held) == (
        "file-0",
        "0.webp",
        3 * KB,
        False,
    )
    # stored again (fetched from the platform once more), it is the newest: the next to go is the second item
    await media.put(CHAT, items[0], mime="image/webp", name="0.webp", file_id="file-0b")
    assert await media.get(CHAT, shas[0]) == (items[0], "image/webp")
    assert await media.get(CHAT, shas[1]) is None
    assert await media.held_bytes(CHAT) == 9 * KB


async def test_storing_again_counts_as_now_for_the_order_of_dropping(media: MediaStore) -> None:
    a, b, c = (os.urandom(4 * KB) for _ in range(3))
    sha_a = await media.put(CHAT, a, mime="", name="a", file_id="a")
    sha_b = await media.put(CHAT, b, mime="", name="b", file_id="b")
    await media.put(CHAT, a, mime="", name="a", file_id="a")  # a is the newest now
    await media.put(CHAT, c, mime="", name="c", file_id="c")
    assert await media.get(CHAT, sha_b) is None
    assert await media.get(CHAT, sha_a) == (a, "")


async def test_one_large_item_can_push_out_several(redis: Redis, key_prefix: str, channel: PipelinedConnection) -> None:
    media = make_store(redis, key_prefix, channel, total=10 * KB, each=10 * KB)
    small = [await media.put(CHAT, os.urandom(2 * KB), mime="", name=str(n), file_id=str(n)) for n in range(5)]
    big = await media.put(CHAT, os.urandom(7 * KB), mime="", name="big", file_id="big")
    held = [await media.get(CHAT, sha) is not None for sha in small]
    assert held == [False, False, False, False, True]
    assert await media.held_bytes(CHAT) == 9 * KB and await media.get(CHAT, big) is not None


async def test_chats_have_their_own_allowance_and_keys_share_the_chat_tag(
    media: MediaStore, redis: Redis, key_prefix: str
) -> None:
    data = os.urandom(4 * KB)
    for chat in ("tg:1", "tg:2", "tg:3"):
        await media.put(chat, data, mime="", name="n", file_id="f")
        assert await media.held_bytes(chat) == 4 * KB
    keys = [key async for key in redis.scan_iter(match=f"{key_prefix}:*")]
    assert len(keys) == 9
    for key in keys:
        chat = key.split("{", 1)[1].split("}", 1)[0]
        assert chat in ("tg:1", "tg:2", "tg:3") and key.startswith(f"{key_prefix}:{{{chat}}}:media:")


async def test_a_total_that_drifted_heals_when_nothing_is_held(media: MediaStore, redis: Redis) -> None:
    keys = media.keys(CHAT)
    await redis.set(keys.media_bytes, 9 * KB)  # counted items whose keys someone deleted
    sha = await media.put(CHAT, os.urandom(4 * KB), mime="", name="n", file_id="f")
    assert await media.held_bytes(CHAT) == 4 * KB and await media.get(CHAT, sha) is not None


async def test_a_key_of_another_type_refuses_the_write_and_changes_nothing(media: MediaStore, redis: Redis) -> None:
    keys = media.keys(CHAT)
    await redis.set(keys.media_held, "junk")
    with pytest.raises(WrongKeyType):
        await media.put(CHAT, b"abc", mime="", name="n", file_id="f")
    assert await redis.exists(keys.media(hashlib.sha256(b"abc").hexdigest()), keys.media_bytes) == 0


async def test_without_a_channel_the_store_runs_through_redis_py(redis: Redis, key_prefix: str) -> None:
    media = make_store(redis, key_prefix, None)
    data = b"\x89PNG\r\n\x1a\n" + os.urandom(100)
    sha = await media.put(CHAT, data, mime="image/png", name="p.png", file_id="f")
    assert await media.get(CHAT, sha) == (data, "image/png")
    about = await media.about(CHAT, sha)
    assert about is not None and about.held and about.size == len(data)


def test_limits_that_cannot_hold_an_item_are_refused(redis: Redis) -> None:
    with pytest.raises(ValueError):
        MediaStore(redis, "fg", max_bytes=10, max_total_bytes=5)
