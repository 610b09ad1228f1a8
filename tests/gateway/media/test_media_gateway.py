"""Photos, documents and voice through the whole gateway: the real aiogram client on the fake Bot API (getFile and
file downloads), a real GatewayRunner on real Redis, a fake transcription endpoint and a fake LLM provider whose
every request body is checked against the official SDK types."""

from __future__ import annotations

import asyncio
import io

import httpx
from PIL import Image
from pydantic import SecretStr
from pypdf import PdfWriter

from gateway.platforms.telegram import TelegramAdapter
from gateway.platforms.telegram.webhook import SECRET_HEADER
from gateway.store import SessionStore
from tests.fakes.bot_api import FakeBotAPI
from tests.fakes.gateway import make_settings
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.fakes.media import images_in, png
from tests.fakes.sdk_shapes import validate_chat_completions
from tests.fakes.telegram import telegram_gateway, telegram_settings
from tests.fakes.transcription import FakeTranscriptionServer

WINDOW = 200_000
MB = 1024 * 1024


def checked(request: RecordedRequest) -> Reply:
    validate_chat_completions(request.body)
    return Reply.answer(f"seen {len(images_in(request))} images: {request.last_user_text[:60]}")


def blank_pdf(pages: int) -> bytes:
    writer = PdfWriter()
    for _ in range(pages):
        writer.add_blank_page(width=200, height=200)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


async def test_a_photo_an_album_and_a_voice_note_reach_the_model_as_it_takes_them(redis, redis_url, key_prefix) -> None:
    chat = 5150
    photo, album = png(640, 480), [png(100 + i, 80, (10 * i, 90, 200)) for i in range(3)]
    async with (
        FakeBotAPI() as api,
        FakeLLMServer(handler=checked, context_limit=WINDOW) as llm,
        FakeTranscriptionServer(default="the deploy froze again at step four") as speech,
    ):
        settings = make_settings(
            redis_url,
            key_prefix,
            llm.openai_base_url,
            context_length=WINDOW,
            media={"transcription": {"provider": "custom", "base_url": speech.base_url}},
        )
        adapter = TelegramAdapter(telegram_settings(api), poll_timeout=1, typing_interval=0, album_window=0.3)
        async with telegram_gateway(settings, redis, adapter) as runner:
            api.push(api.photo_message(chat, 1, data=photo))  # no caption: it used to be dropped
            await api.wait_until(lambda: len(api.sent) == 1, timeout=60)
            api.push(*api.album(chat, 1, album, caption="the three dashboards"))
            await api.wait_until(lambda: len(api.sent) == 2, timeout=60)
            api.push(api.voice_message(chat, 1, b"OggS" + bytes(2000), duration=12))
            await api.wait_until(lambda: len(api.sent) == 3, timeout=60)
            await runner.wait_idle()
            store = SessionStore(redis, key_prefix)
            transcript = await store.active(f"tg:{chat}", await store.current_session(f"tg:{chat}"))
    first, second, third = llm.requests[:3]
    assert images_in(first) == [photo]
    assert images_in(second)[-3:] == album and len(images_in(second)) == 4  # the earlier photo is still newest-4
    assert "the three dashboards" in second.last_user_text
    assert "the deploy froze again at step four" in third.last_user_text and "0:12" in third.last_user_text
    assert speech.requests and speech.requests[0].model == settings.media.transcription.model
    users = [m for m in transcript if m["role"] == "user"]
    assert [[ref["kind"] for ref in m["_items"]] for m in users] == [["image"], ["image"] * 3, ["voice"]]
    assert all(ref["sha"] and "error" not in ref for m in users for ref in m["_items"])
    assert all("base64" not in str(m["content"]) for m in transcript)  # bytes live in the media store, never here
    assert [m.text for m in api.sent][0].startswith("seen 1 images")


async def test_a_file_too_large_a_broken_download_and_a_pdf_without_text_each_get_one_clear_reply(
    redis, redis_url, key_prefix
) -> None:
    chat = 5151
    async with FakeBotAPI() as api, FakeLLMServer(handler=checked, context_limit=WINDOW) as llm:
        settings = make_settings(redis_url, key_prefix, llm.openai_base_url, context_length=WINDOW)
        adapter = TelegramAdapter(telegram_settings(api), poll_timeout=1, typing_interval=0)
        async with telegram_gateway(settings, redis, adapter) as runner:
            api.push(api.document_message(chat, 1, size=50 * MB, file_name="dump.tar", mime_type="application/x-tar"))
            await api.wait_until(lambda: len(api.sent) == 1, timeout=60)
            broken = api.document_message(chat, 1, b"x" * 400_000, file_name="trace.log", caption="what failed?")
            api.break_download(broken["message"]["document"]["file_id"])
            api.push(broken)
            await api.wait_until(lambda: len(api.sent) == 2, timeout=60)
            api.push(api.document_message(chat, 1, blank_pdf(2), file_name="scan.pdf", mime_type="application/pdf"))
            await api.wait_until(lambda: len(api.sent) == 3, timeout=60)
            api.push(api.private_message(chat, "and now plain text"))
            await api.wait_until(lambda: len(api.sent) == 4, timeout=60)
            await runner.wait_idle()
            store = SessionStore(redis, key_prefix)
            transcript = await store.active(f"tg:{chat}", await store.current_session(f"tg:{chat}"))
    replies = [m.text for m in api.sent]
    assert replies[0].startswith("⚠️ I could not take in dump.tar: it is 50 MB, over the 20 MB limit")
    assert replies[1].startswith("⚠️ I could not take in trace.log: the download of trace.log stopped after")
    assert "scan.pdf" in replies[2] and "text" in replies[2].split("\n\n")[0]
    assert replies[3] == "seen 0 images: and now plain text"
    assert not any("dump" in path for path in api.downloads)  # refused before a byte was downloaded
    users = [m for m in transcript if m["role"] == "user"]
    assert len(users) == 4 and users[1]["content"].startswith("what failed?")
    assert [ref.get("error", "") != "" for m in users[:3] for ref in m["_items"]] == [True, True, True]
    assert "dump.tar" in users[0]["content"] and "50 MB" in users[0]["content"]


async def test_the_media_settings_bound_what_is_taken_in_and_what_one_request_carries(
    redis, redis_url, key_prefix
) -> None:
    """``media.max_bytes``, ``media.image_max_side`` and ``media.max_images_per_request``, set in the configuration,
    reach the adapter, the intake and the agent: a file over the configured limit is refused naming it, images are
    stored and sent scaled to the configured side, and a request carries only the configured number inline."""
    chat = 5152
    album = [png(640, 480, (20 * i, 90, 200)) for i in range(3)]
    async with FakeBotAPI() as api, FakeLLMServer(handler=checked, context_limit=WINDOW) as llm:
        settings = make_settings(
            redis_url,
            key_prefix,
            llm.openai_base_url,
            context_length=WINDOW,
            media={"max_bytes": MB, "max_images_per_request": 1, "image_max_side": 256},
        )
        telegram = settings.platforms.telegram.model_copy(
            update={"enabled": True, "token": SecretStr(api.token), "api_server": api.base_url}
        )
        adapter = TelegramAdapter.from_settings(
            settings.model_copy(update={"platforms": settings.platforms.model_copy(update={"telegram": telegram})})
        )
        adapter.poll_timeout, adapter.album_window = 1, 0.3  # read when polling starts
        async with telegram_gateway(settings, redis, adapter) as runner:
            api.push(*api.album(chat, 1, album, caption="three charts"))
            await api.wait_until(lambda: len(api.sent) == 1, timeout=60)
            api.push(api.document_message(chat, 1, size=2 * MB, file_name="big.log", mime_type="text/plain"))
            await api.wait_until(lambda: len(api.sent) == 2, timeout=60)
            await runner.wait_idle()
    sent = images_in(llm.requests[0])
    assert len(sent) == 1 and Image.open(io.BytesIO(sent[0])).size == (256, 192)
    assert llm.requests[0].last_user_text.count("[image: photo.jpg, 256×192]") == 3  # one labels the part sent
    assert api.sent[1].text.startswith("⚠️ I could not take in big.log: it is 2 MB, over the 1 MB limit")


async def test_an_album_delivered_by_webhook_part_by_part_is_answered_once_with_every_image(
    redis, redis_url, key_prefix
) -> None:
    """Telegram posts a webhook's album one part at a time, each after the last was answered: the parts are
    stored as they come and the turn of the first waits for the rest, so the model sees the whole album."""
    chat, album = 5152, [png(120 + i, 90, (20 * i, 60, 160)) for i in range(3)]
    async with FakeBotAPI() as api, FakeLLMServer(handler=checked, context_limit=WINDOW) as llm:
        settings = make_settings(redis_url, key_prefix, llm.openai_base_url, context_length=WINDOW)
        adapter = TelegramAdapter(
            telegram_settings(api, mode="webhook", webhook_secret="s3cret", listen_port=0),
            set_webhook=False,
            typing_interval=0,
        )
        async with telegram_gateway(settings, redis, adapter) as runner:
            url = f"http://127.0.0.1:{adapter.webhook_port}/telegram/webhook"
            async with httpx.AsyncClient(timeout=10) as client:
                for part in api.album(chat, 1, album, caption="compare these three"):
                    answer = await client.post(url, json=part, headers={SECRET_HEADER: "s3cret"})
                    assert answer.status_code == 200
                    await asyncio.sleep(0.05)  # Telegram's next post follows the answer
            await api.wait_until(lambda: len(api.sent) >= 1, timeout=60)
            await runner.wait_idle()
    assert len(api.sent) == 1 and api.sent[0].text.startswith("seen 3 images")
    assert len(llm.requests) == 1 and images_in(llm.requests[0]) == album
    assert "compare these three" in str(llm.requests[0].messages)
