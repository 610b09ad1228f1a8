"""Photos, files and voice messages from every platform: what each becomes, and fetching its bytes.

Telegram runs the real aiogram client against the fake Bot API (getFile and file downloads
included); Discord builds its messages from the gateway payloads Discord sends, with attachments
served by a fake CDN on loopback; the terminal reads real files.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from pydantic import ValidationError

from gateway.media.errors import MediaError, MediaTooLarge
from gateway.platforms.base import IncomingMessage, MediaItem
from gateway.platforms.discord import DiscordAdapter
from gateway.platforms.local import TerminalAdapter
from gateway.platforms.recording import RecordingAdapter
from gateway.platforms.telegram import SECRET_HEADER, TelegramAdapter
from tests.fakes.bot_api import FakeBotAPI
from tests.fakes.discord_api import ALICE, DM_CHANNEL_ID, as_message, message_payload
from tests.fakes.discord_cdn import FakeDiscordCDN
from tests.fakes.telegram import Collected, adapter_for, running, telegram_settings

# ``api`` (the fake Bot API), ``discord_api`` and ``adapter`` (the Discord adapter on it) are tests/conftest.py's.
MB = 1024 * 1024
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40
PHOTO = b"\xff\xd8\xff\xe0" + bytes(range(256)) * 300
OGG = b"OggS" + b"\x01" * 5000


@contextlib.asynccontextmanager
async def polling(api: FakeBotAPI, intake: Collected, **options: object) -> AsyncIterator[TelegramAdapter]:
    async with running(adapter_for(api, album_window=0.3, **options), intake) as adapter:
        yield adapter


async def received(api: FakeBotAPI, intake: Collected, count: int, **options: object) -> list[IncomingMessage]:
    """What the adapter hands the intake for the updates pushed, once ``count`` messages arrived and all are
    confirmed."""
    async with polling(api, intake, **options):
        await api.wait_until(lambda: len(intake.messages) >= count and api.pending_updates == 0)
    return intake.messages


# --------------------------------------------------------------------------- the shapes


def test_a_message_may_be_items_alone_and_an_item_is_one_of_four_kinds() -> None:
    item = MediaItem(kind="image", file_id="AgAD", name="photo.jpg")
    assert IncomingMessage(platform="tg", chat_id="1", update_id="1", items=(item,)).text == ""
    with pytest.raises(ValidationError):
        MediaItem(kind="video", file_id="x")  # type: ignore[arg-type]


async def test_a_platform_without_media_says_so() -> None:
    with pytest.raises(MediaError, match="cannot fetch media"):
        await RecordingAdapter().fetch(MediaItem(kind="image", file_id="x", name="a.png"), 10)


# --------------------------------------------------------------------------- Telegram: what each update becomes


async def test_each_kind_of_telegram_media_becomes_its_item(api: FakeBotAPI) -> None:
    intake = Collected()
    api.push(
        api.photo_message(7, 7, data=PHOTO),
        api.document_message(7, 7, PNG, file_name="chart.png", mime_type="image/png", caption="the chart"),
        api.document_message(7, 7, b"%PDF-1.4 ...", file_name="invoice-0425.pdf", mime_type="application/pdf"),
        api.voice_message(7, 7, OGG, duration=12),
        api.audio_message(7, 7, b"ID3" * 100, file_name="standup.mp3", duration=95),
        api.video_note_message(7, 7, b"\x00\x00\x00\x18ftypmp42" * 10, duration=8),
    )
    messages = await received(api, intake, 6)
    assert [message.text for message in messages] == ["", "the chart", "", "", "", ""]
    assert all(message.respond and len(message.items) == 1 for message in messages)
    photo, chart, pdf, voice, audio, note = (message.items[0] for message in messages)
    assert (photo.kind, photo.name, photo.mime, photo.size, photo.width, photo.height) == (
        "image",
        "photo.jpg",
        "image/jpeg",
        len(PHOTO),
        1280,
        960,
    )
    assert (chart.kind, chart.name, chart.mime, chart.size) == ("image", "chart.png", "image/png", len(PNG))
    assert (pdf.kind, pdf.name, pdf.mime) == ("document", "invoice-0425.pdf", "application/pdf")
    assert (voice.kind, voice.mime, voice.duration, voice.size) == ("voice", "audio/ogg", 12.0, len(OGG))
    assert (audio.kind, audio.name, audio.duration) == ("audio", "standup.mp3", 95.0)
    assert (note.kind, note.mime, note.duration) == ("voice", "video/mp4", 8.0)


async def test_the_largest_photo_size_within_the_limit_is_taken(api: FakeBotAPI) -> None:
    intake = Collected()
    api.push(api.photo_message(7, 7, largest_size=25 * MB))  # 1280x960 reported at 25 MB: over the 20 MB limit
    [message] = await received(api, intake, 1)
    [photo] = message.items
    assert (photo.width, photo.height) == (320, 240) and photo.size < 20 * MB


async def test_group_media_keeps_the_speaker_and_a_caption_can_address_the_bot(api: FakeBotAPI) -> None:
    intake = Collected()
    api.push(
        api.photo_message(-100, 5, first_name="Ann"),
        api.photo_message(-100, 6, caption="@foldgate_bot what is this?", first_name="Bob"),
    )
    messages = await received(api, intake, 2)
    assert [(message.text, message.respond) for message in messages] == [("Ann:", False), ("Bob: what is this?", True)]
    assert all(message.items[0].kind == "image" for message in messages)


async def test_an_album_of_three_is_one_message_stored_before_its_parts_are_acknowledged(api: FakeBotAPI) -> None:
    intake = Collected()
    parts = api.album(7, 7, [PHOTO + bytes([n]) for n in range(3)], caption="the three dashboards")
    elsewhere = api.private_message(8, "meanwhile, in another chat")  # handed over while the album gathers
    api.push(*parts, elsewhere)
    premature: list[int] = []
    album_id = str(parts[0]["update_id"])

    def confirmed(offset: int | None) -> None:
        """Record every part an offset confirms to Telegram while its album is not stored yet."""
        if all(message.update_id != album_id for message in intake.messages):
            premature.extend(part["update_id"] for part in parts if offset is not None and part["update_id"] < offset)

    api.on_get_updates = confirmed
    messages = await received(api, intake, 2)
    other, album = messages
    assert album.update_id == album_id and album.text == "the three dashboards" and other.chat_id == "8"
    assert [item.size for item in album.items] == [len(PHOTO) + 1] * 3 and len({i.file_id for i in album.items}) == 3
    assert premature == [], "an album's part was acknowledged before the album was stored"


class CountedHandOvers(Collected):
    """The intake, also noting every hand-over's update id: stored, refused as a repeat, or failed."""

    def __init__(self) -> None:
        super().__init__()
        self.handed: list[str] = []

    async def __call__(self, message: IncomingMessage) -> bool:
        self.handed.append(message.update_id)
        return await super().__call__(message)


async def test_an_album_the_intake_could_not_store_comes_again_and_is_stored_once(api: FakeBotAPI) -> None:
    intake = CountedHandOvers()
    parts = api.album(7, 7, [PHOTO, PHOTO[::-1]])
    album_id = str(parts[0]["update_id"])
    intake.failures[album_id] = 1  # Redis is down when the album is handed over
    api.push(*parts)
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        await asyncio.sleep(0)

    async with polling(api, intake, retry_sleep=sleep):
        await api.wait_until(lambda: len(intake.messages) == 1 and api.pending_updates == 0)
        # the chat's next message closes an album of the chat still being gathered, and is handed over after it:
        # had the parts been taken twice, that second album would be handed over by now
        api.push(api.private_message(7, "and the next one"))
        await api.wait_until(lambda: len(intake.messages) == 2 and api.pending_updates == 0)
    messages = intake.messages
    assert len(messages[0].items) == 2 and messages[1].text == "and the next one"
    assert intake.handed.count(album_id) == 2  # refused once (Redis down), stored once: never taken twice
    assert intake.failures[album_id] == 0  # the failure did happen
    offsets = [call.offset for call in api.get_updates_calls if call.offset is not None]
    assert parts[0]["update_id"] in offsets  # held at the album while it was not stored


async def test_an_album_is_closed_by_the_next_message_of_its_chat_not_of_another(api: FakeBotAPI) -> None:
    intake = Collected()
    first = api.album(7, 7, [PHOTO, PHOTO])
    second = api.album(7, 7, [PNG])
    api.push(*first, api.private_message(8, "elsewhere"), *second, api.private_message(7, "which one is wrong?"))
    messages = await received(api, intake, 4)
    ours = [message for message in messages if message.chat_id == "7"]
    assert [(len(message.items), message.text) for message in ours] == [(2, ""), (1, ""), (0, "which one is wrong?")]
    assert [message.update_id for message in ours[:2]] == [str(first[0]["update_id"]), str(second[0]["update_id"])]


async def test_a_webhook_hands_each_part_of_an_album_over_at_once_naming_its_album(api: FakeBotAPI) -> None:
    """Telegram waits for each answer before it delivers the chat's next part: a part held back for the next
    would only be answered late, so each goes at once, and a part that could not be stored is answered 500."""
    intake = Collected()
    parts = api.album(7, 7, [PHOTO, PNG, OGG], caption="three")
    intake.failures[str(parts[1]["update_id"])] = 1  # the second hand-over finds Redis down
    adapter = TelegramAdapter(
        telegram_settings(api, mode="webhook", webhook_secret="s3cret", listen_port=0), set_webhook=False
    )
    await adapter.start(intake)
    try:
        url = f"http://127.0.0.1:{adapter.webhook_port}/telegram/webhook"
        async with httpx.AsyncClient(timeout=10) as client:
            answers = []
            for part in [*parts, parts[1]]:  # one after another, the refused part delivered again
                answer = await client.post(url, json=part, headers={SECRET_HEADER: "s3cret"})
                answers.append((answer.status_code, answer.text))
    finally:
        await adapter.stop()
    assert answers == [(200, "stored"), (500, "not stored"), (200, "stored"), (200, "stored")]
    group = parts[0]["message"]["media_group_id"]
    assert [(message.update_id, message.album, len(message.items)) for message in intake.messages] == [
        (str(parts[0]["update_id"]), group, 1),
        (str(parts[2]["update_id"]), group, 1),
        (str(parts[1]["update_id"]), group, 1),
    ]
    assert intake.messages[0].text == "three"


# --------------------------------------------------------------------------- Telegram: fetching


async def test_fetch_returns_the_bytes_by_get_file_and_download(api: FakeBotAPI) -> None:
    intake = Collected()
    api.push(api.photo_message(7, 7, data=PHOTO), api.voice_message(7, 7, OGG))
    async with polling(api, intake) as adapter:
        await api.wait_until(lambda: len(intake.messages) == 2)
        photo, voice = (message.items[0] for message in intake.messages)
        assert await adapter.fetch(photo, 20 * MB) == PHOTO
        assert await adapter.fetch(voice, 20 * MB) == OGG
    assert api.file_requests == [photo.file_id, voice.file_id] and len(api.downloads) == 2


async def test_a_file_over_the_limit_is_refused_before_any_byte_is_downloaded(api: FakeBotAPI) -> None:
    intake = Collected()
    api.push(
        api.document_message(7, 7, size=50 * MB, file_name="dump.tar", mime_type="application/x-tar"),
        api.document_message(7, 7, b"x" * 5000, file_name="notes.txt"),
    )
    async with polling(api, intake) as adapter:
        await api.wait_until(lambda: len(intake.messages) == 2)
        big, small = (message.items[0] for message in intake.messages)
        assert big.size == 50 * MB
        with pytest.raises(MediaTooLarge, match=r"dump.tar is 50 MB, over the 20 MB limit"):
            await adapter.fetch(big, 20 * MB)
        assert api.file_requests == [] and api.downloads == []  # the reported size was enough
        unreported = small.model_copy(update={"size": 0})  # a size the platform did not report: getFile's counts
        with pytest.raises(MediaTooLarge, match=r"notes.txt is 4.9 KB, over the 1000 bytes limit"):
            await adapter.fetch(unreported, 1000)
        assert api.file_requests == [small.file_id] and api.downloads == []
        # over the Bot API's own 20 MB: getFile refuses it ("file is too big"), nothing is downloaded
        with pytest.raises(MediaTooLarge, match="over the 40 MB limit"):
            await adapter.fetch(big.model_copy(update={"size": 0}), 40 * MB)
        assert api.downloads == []


async def test_a_download_cut_halfway_raises_a_clear_error(api: FakeBotAPI) -> None:
    intake = Collected()
    update = api.document_message(7, 7, bytes(300_000), file_name="trace.log")
    api.break_download(update["message"]["document"]["file_id"])
    api.push(update)
    async with polling(api, intake) as adapter:
        await api.wait_until(lambda: len(intake.messages) == 1)
        with pytest.raises(MediaError, match="the download of trace.log stopped after"):
            await adapter.fetch(intake.messages[0].items[0], 20 * MB)
    assert len(api.downloads) == 1


# --------------------------------------------------------------------------- Discord


@pytest_asyncio.fixture
async def cdn() -> AsyncIterator[FakeDiscordCDN]:
    async with FakeDiscordCDN(channel_id=DM_CHANNEL_ID) as server:
        yield server


async def test_discord_attachments_become_items_by_their_type(adapter: DiscordAdapter, cdn: FakeDiscordCDN) -> None:
    chart = cdn.attachment("chart.png", PNG, content_type="image/png", width=640, height=480)
    voice = cdn.attachment("voice-message.ogg", OGG, content_type="audio/ogg", voice=True, duration=7.5)
    song = cdn.attachment("standup.mp3", b"ID3" * 10, content_type="audio/mpeg")
    pdf = cdn.attachment("invoice.pdf", b"%PDF-1.4", content_type="application/pdf")
    unknown = cdn.attachment("blob.bin", b"\x00" * 10)
    data = message_payload(
        ALICE, "", channel_id=DM_CHANNEL_ID, guild=False, attachments=(chart, voice, song, pdf, unknown)
    )
    message = adapter.to_incoming(as_message(adapter, data))
    assert message is not None and message.text == "" and message.respond
    assert [(item.kind, item.name, item.mime, item.size) for item in message.items] == [
        ("image", "chart.png", "image/png", len(PNG)),
        ("voice", "voice-message.ogg", "audio/ogg", len(OGG)),
        ("audio", "standup.mp3", "audio/mpeg", 30),
        ("document", "invoice.pdf", "application/pdf", 8),
        ("document", "blob.bin", "", 10),
    ]
    assert (message.items[0].width, message.items[0].height, message.items[1].duration) == (640, 480, 7.5)
    assert message.items[0].file_id == chart["url"]


async def test_a_discord_voice_message_is_known_by_its_flag(adapter: DiscordAdapter, cdn: FakeDiscordCDN) -> None:
    recording = cdn.attachment("voice-message.mp3", b"ID3" * 10, content_type="audio/mpeg")
    data = {
        **message_payload(ALICE, "", channel_id=DM_CHANNEL_ID, guild=False, attachments=(recording,)),
        "flags": 1 << 13,
    }  # IS_VOICE_MESSAGE
    message = adapter.to_incoming(as_message(adapter, data))
    assert message is not None and message.items[0].kind == "voice"


async def test_server_chatter_with_only_an_attachment_keeps_the_speaker(
    adapter: DiscordAdapter, cdn: FakeDiscordCDN
) -> None:
    data = message_payload(ALICE, "", attachments=(cdn.attachment("x.png", PNG, content_type="image/png"),))
    message = adapter.to_incoming(as_message(adapter, data))
    assert message is not None and message.text == "Alice:" and not message.respond and len(message.items) == 1


async def test_discord_fetch_streams_the_attachment_with_the_limit(
    adapter: DiscordAdapter, cdn: FakeDiscordCDN
) -> None:
    def item(attachment: dict[str, object]) -> MediaItem:
        data = message_payload(ALICE, "", channel_id=DM_CHANNEL_ID, guild=False, attachments=(attachment,))
        message = adapter.to_incoming(as_message(adapter, data))
        assert message is not None
        return message.items[0]

    assert await adapter.fetch(item(cdn.attachment("chart.png", PNG, content_type="image/png")), MB) == PNG
    assert len(cdn.requests) == 1
    big = item(cdn.attachment("dump.tar", size=30 * MB))
    with pytest.raises(MediaTooLarge, match="dump.tar is 30 MB, over the 25 MB limit"):
        await adapter.fetch(big, 25 * MB)
    assert len(cdn.requests) == 1  # refused by the reported size: no request at all
    broken = cdn.attachment("trace.log", bytes(400_000))
    cdn.break_download(broken["url"])
    with pytest.raises(MediaError, match="the download of trace.log stopped after"):
        await adapter.fetch(item(broken), MB)
    # a server that does not say the size: cut off once more than the limit arrived
    unsized = cdn.attachment("stream.bin", bytes(300_000))
    cdn.without_length(unsized["url"])
    with pytest.raises(MediaTooLarge, match="stream.bin is more than 100 KB, over the 100 KB limit"):
        await adapter.fetch(item(unsized).model_copy(update={"size": 0}), 100 * 1024)


# --------------------------------------------------------------------------- the terminal


async def test_attach_in_the_terminal_sends_the_file_as_an_item(tmp_path: Path) -> None:
    notes = tmp_path / "my notes.txt"
    notes.write_text("deploy at 9\n", encoding="utf-8")
    chart = tmp_path / "chart.png"
    chart.write_bytes(PNG)
    stdin = io.StringIO(f'/attach "{notes}" summarise this\n/attach {chart}\n/attach {tmp_path}/missing.pdf\n')
    stdout = io.StringIO()
    adapter = TerminalAdapter(stdin=stdin, stdout=stdout)
    intake = Collected()
    await adapter.start(intake)
    await asyncio.wait_for(adapter.closed.wait(), 5)
    text_file, image = intake.messages
    assert text_file.text == "summarise this" and image.text == ""
    [item] = text_file.items
    assert (item.kind, item.name, item.mime, item.size, item.file_id) == (
        "document",
        "my notes.txt",
        "text/plain",
        12,
        f"path:{notes}",
    )
    assert (image.items[0].kind, image.items[0].mime) == ("image", "image/png")
    assert "cannot attach" in stdout.getvalue() and "missing.pdf" in stdout.getvalue()
    assert await adapter.fetch(item, 100) == b"deploy at 9\n"
    assert await adapter.fetch(image.items[0], MB) == PNG
    with pytest.raises(MediaTooLarge, match="chart.png is"):
        await adapter.fetch(image.items[0], 100)
    notes.unlink()
    with pytest.raises(MediaError, match="cannot read my notes.txt"):
        await adapter.fetch(item, 100)
