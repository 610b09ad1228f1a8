"""What keeps media cheap and safe over a long chat: an image whose bytes the chat's allowance dropped comes back
from its platform by its file id, a retried turn takes its items in once, and an image is never decoded past a pixel
cap nor stored heavier than a provider takes."""

from __future__ import annotations

import io
import random

import pytest
from PIL import Image
from redis.asyncio import Redis

from gateway.config.models import MediaSettings
from gateway.media.errors import MediaError
from gateway.media.images import MAX_STORED_BYTES, prepare_image_now
from gateway.media.message import ItemIntake
from gateway.media.source import ChatMedia
from gateway.platforms.base import IncomingMessage, MediaItem
from gateway.store.channel import PipelinedConnection
from gateway.store.media import MediaStore
from gateway.store.taken import TakenRecords

CHAT = "tg:77"


def png(side: int, seed: int) -> bytes:
    """A noisy image (so it is several KB as PNG), different for each seed."""
    out = io.BytesIO()
    Image.frombytes("RGB", (side, side), random.Random(seed).randbytes(side * side * 3)).save(out, "PNG")
    return out.getvalue()


class Platform:
    """Serves files by id the way a platform's fetch does, and counts what was asked for."""

    def __init__(self, **files: bytes) -> None:
        self.files = files
        self.asked: list[str] = []
        self.refuse = False

    async def fetch(self, item: MediaItem, limit: int) -> bytes:
        self.asked.append(item.file_id)
        if self.refuse or item.file_id not in self.files:
            raise MediaError(f"{item.name} is gone from the platform")
        return self.files[item.file_id][: limit + 1]


def photo(update: str, file_id: str, size: int) -> IncomingMessage:
    return IncomingMessage(
        platform="tg",
        chat_id="77",
        update_id=update,
        items=(MediaItem(kind="image", file_id=file_id, name=f"{file_id}.png", mime="image/png", size=size),),
    )


async def first_of_two_dropped(
    redis: Redis, key_prefix: str, channel: PipelinedConnection
) -> tuple[Platform, MediaStore, ItemIntake, dict, bytes]:
    """Two photos into a chat whose allowance holds one: the first one's bytes are dropped, its record kept."""
    first, second = png(64, 10), png(64, 250)
    platform = Platform(first=first, second=second)
    settings = MediaSettings(max_bytes=max(len(first), len(second)), max_total_bytes=max(len(first), len(second)))
    store = MediaStore(
        redis, key_prefix, max_bytes=settings.max_bytes, max_total_bytes=settings.max_total_bytes, channel=channel
    )
    intake = ItemIntake(store, settings, None, {"tg": platform.fetch})
    old = (await intake.take(photo("1", "first", len(first)))).refs[0]
    await intake.take(photo("2", "second", len(second)))
    return platform, store, intake, old, first


async def test_a_dropped_image_is_fetched_again_by_its_file_id(
    redis: Redis, key_prefix: str, channel: PipelinedConnection
) -> None:
    platform, store, intake, old, first = await first_of_two_dropped(redis, key_prefix, channel)
    assert await store.get(CHAT, old["sha"]) is None
    media = ChatMedia(store, CHAT, intake.fetch_again)
    data, mime = await media.read(old["sha"])
    assert (data, mime) == (first, "image/png") and platform.asked == ["first", "second", "first"]
    assert await store.get(CHAT, old["sha"]) == (first, "image/png")  # kept again: the next read asks no one


async def test_an_image_the_platform_no_longer_has_is_simply_not_there(
    redis: Redis, key_prefix: str, channel: PipelinedConnection
) -> None:
    platform, store, intake, old, _ = await first_of_two_dropped(redis, key_prefix, channel)
    platform.refuse = True
    assert await ChatMedia(store, CHAT, intake.fetch_again).read(old["sha"]) is None
    assert await ChatMedia(store, CHAT).read(old["sha"]) is None  # without a way back, nothing is asked
    assert platform.asked == ["first", "second", "first"]
    assert await ChatMedia(store, "dc:77", intake.fetch_again).read(old["sha"]) is None  # another chat: no record


async def test_a_retried_turn_takes_its_items_in_once(
    redis: Redis, key_prefix: str, channel: PipelinedConnection
) -> None:
    """A turn retried after a failure (the provider away, a crash) reads what its first attempt took in:
    no second download, no second paid transcription."""
    image = png(64, 3)
    platform = Platform(first=image)
    settings = MediaSettings()
    store = MediaStore(
        redis, key_prefix, max_bytes=settings.max_bytes, max_total_bytes=settings.max_total_bytes, channel=channel
    )
    intake = ItemIntake(
        store, settings, None, {"tg": platform.fetch}, records=TakenRecords(channel, key_prefix, ttl_seconds=60)
    )
    message = photo("1", "first", len(image))
    first, again = await intake.take(message), await intake.take(message)
    assert again == first and first.refs[0]["sha"] and platform.asked == ["first"]
    other = await intake.take(photo("2", "first", len(image)))  # another entry is taken in on its own
    assert other.refs[0]["sha"] == first.refs[0]["sha"] and platform.asked == ["first", "first"]


def test_an_image_of_too_many_pixels_is_refused_before_it_is_decoded() -> None:
    out = io.BytesIO()
    Image.new("1", (8000, 7000)).save(out, "PNG")  # 56 megapixels in a few kilobytes
    assert len(out.getvalue()) < 100_000
    with pytest.raises(MediaError, match="too many pixels"):
        prepare_image_now(out.getvalue(), 2048)


def test_an_image_too_heavy_for_a_provider_is_stored_lighter() -> None:
    heavy = png(2000, 9)  # noise: about 12 MB as PNG, over what Anthropic takes (5 MB of base64)
    assert len(heavy) > MAX_STORED_BYTES
    picture = prepare_image_now(heavy, 2048)
    assert len(picture.data) <= MAX_STORED_BYTES and picture.mime == "image/jpeg"
    assert Image.open(io.BytesIO(picture.data)).size == (picture.width, picture.height)
