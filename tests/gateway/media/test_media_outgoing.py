"""Images and files the bot sends: an image model's picture reaches Telegram as a photo, Discord as an attachment,
the terminal as a saved file and the web chat under its reply; it is kept like a photo the person sent (the model
can ``session_fetch`` it later), a tool result marked for the person goes out too, and a resend after a crash
posts no file twice.

The provider is the loopback fake speaking OpenRouter's chat completions: an image model answers with
``message.images`` (streamed as ``delta.images``) only when the request asks for ``modalities`` with ``"image"``,
and every request body is checked against the official SDK types plus OpenRouter's documented extensions.
"""

from __future__ import annotations

import base64
import io
import re
from typing import Any

from PIL import Image

from agent.context_compressor import ContextCompressor
from agent.llm.client import ChatClient
from agent.llm.openai_chat import build_request, parse_response
from agent.loop import Agent, ToolRunning
from agent.models import request_rules
from agent.tools import Tool, ToolOutput, ToolRegistry
from gateway.delivery.replies import Replies
from gateway.delivery.stream import ReplyStream
from gateway.outage import Health
from gateway.platforms.base import IncomingMessage, OpenGate, OutgoingFile
from gateway.platforms.local import TerminalAdapter
from gateway.platforms.recording import RecordingAdapter
from gateway.platforms.telegram import TelegramAdapter
from gateway.store import SessionStore
from gateway.store.media import MediaStore
from tests.fakes.bot_api import FakeBotAPI
from tests.fakes.discord_api import CHANNEL_ID
from tests.fakes.gateway import make_settings
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.fakes.media import images_in
from tests.fakes.sdk_shapes import validate_openrouter_chat
from tests.fakes.telegram import telegram_gateway, telegram_settings
from tests.fakes.waiting import wait_for

IMAGE_MODEL = "google/gemini-2.5-flash-image"
WINDOW = 200_000


def chart(width: int = 320, height: int = 200) -> bytes:
    image = Image.new("RGB", (width, height), (250, 250, 250))
    image.paste((38, 139, 210), (20, height // 3, width // 2, height))
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def data_url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


def size_of(data: bytes) -> tuple[int, int]:
    return Image.open(io.BytesIO(data)).size


# --------------------------------------------------------------------------- the dialect


def test_an_image_model_is_asked_for_images_and_its_answer_carries_them_decoded() -> None:
    body = build_request(
        [{"role": "user", "content": "draw it"}],
        model=IMAGE_MODEL,
        max_tokens=100,
        tools=None,
        temperature=None,
        rules=request_rules(IMAGE_MODEL, "openrouter"),
    )
    assert body["modalities"] == ["image", "text"]
    validate_openrouter_chat(body)
    plain = build_request(
        [{"role": "user", "content": "hi"}],
        model="openai/gpt-4o",
        max_tokens=100,
        tools=None,
        temperature=None,
        rules=request_rules("openai/gpt-4o", "openrouter"),
    )
    assert "modalities" not in plain
    picture = chart()
    answer = parse_response(
        {
            "choices": [
                {
                    "finish_reason": "stop",
                    "message": {
                        "role": "assistant",
                        "content": "",
                        "images": [
                            {"type": "image_url", "image_url": {"url": data_url(picture)}},
                            {"type": "image_url", "image_url": {"url": "https://example.invalid/not-inline.png"}},
                        ],
                    },
                }
            ]
        }
    )
    assert [(image.mime, image.data) for image in answer.images] == [
        ("image/png", picture)
    ]  # an image alone is an answer


# --------------------------------------------------------------------------- Telegram, end to end


async def test_an_image_the_model_makes_reaches_telegram_as_a_photo_and_can_be_fetched_back(
    redis, redis_url, key_prefix
) -> None:
    chat, picture = 6160, chart()
    bodies: list[dict[str, Any]] = []

    def model(request: RecordedRequest) -> Reply:
        bodies.append(request.body)
        validate_openrouter_chat(request.body)
        text = request.last_user_text
        if "draw" in text:
            return Reply.answer("Here is the chart.", images=[data_url(picture)])
        if "show it again" in text and request.messages[-1]["role"] == "user":
            made = re.search(r"\[image (\w+): image-1\.png", str(request.messages))
            assert made, "the earlier image is named by a stand-in line the model can fetch it by"
            return Reply.tool_call("session_fetch", {"ids": [made.group(1)]})
        return Reply.answer(f"I see {len(images_in(request))} image(s).")

    async with FakeBotAPI() as api, FakeLLMServer(flavor="openrouter", handler=model, context_limit=WINDOW) as llm:
        settings = make_settings(redis_url, key_prefix, llm.openai_base_url, context_length=WINDOW, model=IMAGE_MODEL)
        adapter = TelegramAdapter(telegram_settings(api), poll_timeout=1, typing_interval=0)
        async with telegram_gateway(settings, redis, adapter) as runner:
            api.push(api.private_message(chat, "draw the latency chart"))
            await api.wait_until(lambda: len(api.sent_files) == 1 and len(api.sent) == 1, timeout=60)
            api.push(api.private_message(chat, "show it again"))
            await api.wait_until(lambda: len(api.sent) == 2, timeout=60)
            await runner.wait_idle()
            store = SessionStore(redis, key_prefix)
            transcript = await store.active(f"tg:{chat}", await store.current_session(f"tg:{chat}"))
    photo = api.sent_files[0]
    assert (photo.chat_id, photo.method, photo.name) == (str(chat), "sendPhoto", "image-1.png")
    assert size_of(photo.data) == (320, 200)
    assert api.sent[0].text == "Here is the chart."  # the text, then the photo: never base64 in a message
    assert all("base64" not in sent.text for sent in api.sent)
    assert all(body.get("modalities") == ["image", "text"] for body in bodies)
    made = next(m for m in transcript if m["role"] == "assistant" and m.get("_items"))
    assert [(ref["kind"], ref["w"], ref["h"]) for ref in made["_items"]] == [("image", 320, 200)]
    assert "base64" not in str(made["content"])
    assert size_of(images_in(llm.requests[-1])[-1]) == (320, 200)  # session_fetch gave the model the image again
    assert api.sent[1].text == "I see 1 image(s)."
    assert len(api.sent_files) == 1  # a fetch shows the model the image; it is not sent to the person again


# --------------------------------------------------------------------------- the agent: a tool's file for the person


async def test_a_tool_result_marked_for_the_person_is_the_turns_outgoing_and_a_plain_one_is_not() -> None:
    drawn = {"kind": "image", "sha": "a" * 64, "name": "plot.png", "mime": "image/png", "w": 10, "h": 10}

    async def plot(_args: dict[str, Any]) -> ToolOutput:
        return ToolOutput("plotted", (drawn,), deliver=True)

    async def peek(_args: dict[str, Any]) -> ToolOutput:
        return ToolOutput("looked", ({**drawn, "sha": "b" * 64, "name": "old.png"},))

    tools = ToolRegistry()
    tools.add(Tool("plot", "draw a plot", {"type": "object", "properties": {}}, plot))
    tools.add(Tool("peek", "look at an old photo", {"type": "object", "properties": {}}, peek))
    async with FakeLLMServer() as llm:
        llm.enqueue(
            Reply.tool_call("plot", {}, call_id="c1"), Reply.tool_call("peek", {}, call_id="c2"), Reply.answer("done")
        )
        client = ChatClient(llm.openai_base_url, api_key="k", route="custom")
        engine = ContextCompressor(model="test-model", context_length=WINDOW)
        agent = Agent(client, engine, model="test-model", tools=tools)
        result = await agent.run_turn([], {"role": "user", "content": "plot it"})
        await client.aclose()
    assert result.reply == "done"
    assert [item["name"] for item in result.outgoing] == ["plot.png"]


# --------------------------------------------------------------------------- delivery: journaled, paced, resent once


class FlakyFiles(RecordingAdapter):
    """Refuses its second file once, as a platform having a bad second does."""

    def __init__(self) -> None:
        super().__init__("local")
        self.refused = False

    async def send_file(self, chat_id: str, file: OutgoingFile, *, reply_to: str | None = None) -> None:
        if len(self.files) == 1 and not self.refused:
            self.refused = True
            raise ConnectionResetError("the upload was cut off")
        await super().send_file(chat_id, file, reply_to=reply_to)


async def test_a_reply_with_files_resent_after_a_failure_posts_each_file_once(redis, key_prefix) -> None:
    waits: list[float] = []

    async def no_wait(seconds: float) -> None:
        waits.append(seconds)

    store = SessionStore(redis, key_prefix)
    media = MediaStore(redis, key_prefix, max_bytes=5_000_000, max_total_bytes=50_000_000)
    chat = "local:outgoing"
    one, two = chart(100, 50), chart(60, 40)
    refs = [
        {
            "kind": "image",
            "sha": await media.put(chat, data, mime="image/png", name=name, file_id="made:x"),
            "name": name,
        }
        for data, name in ((one, "one.png"), (two, "two.png"))
    ]
    refs.append({"kind": "document", "sha": "f" * 64, "name": "gone.csv"})  # dropped from the store meanwhile
    platform = FlakyFiles()
    replies = Replies(store, {"local": platform}, lambda message: OpenGate(), Health("Redis"), media, sleep=no_wait)
    message = IncomingMessage(platform="local", chat_id="outgoing", update_id="u1", text="plot both")
    lock = await store.acquire_lock(chat, 30)
    assert lock is not None
    await replies.deliver(message, "Two plots.", items=refs, lock=lock)
    await replies.deliver(message, "Two plots.", items=refs, lock=lock)  # a resend after a crash
    assert [(file.name, file.data) for _, file in platform.files] == [("one.png", one), ("two.png", two)]
    assert [text for _, text in platform.sent].count("[document: gone.csv, no longer kept; ask again for it]") == 1
    assert waits == [1.0]  # the one cut-off upload was tried again after the first wait of REPLY_DELIVERY


async def test_only_files_are_sent_when_the_reply_has_no_text(redis, key_prefix) -> None:
    store = SessionStore(redis, key_prefix)
    media = MediaStore(redis, key_prefix, max_bytes=5_000_000, max_total_bytes=50_000_000)
    sha = await media.put("local:quiet", chart(), mime="image/png", name="image-1.png", file_id="made:x")
    platform = RecordingAdapter()
    replies = Replies(store, {"local": platform}, lambda message: OpenGate(), Health("Redis"), media)
    message = IncomingMessage(platform="local", chat_id="quiet", update_id="u1", text="just draw")
    await replies.deliver(message, "", items=[{"kind": "image", "sha": sha, "name": "image-1.png"}])
    assert platform.sent == [] and [file.name for _, file in platform.files] == ["image-1.png"]


# --------------------------------------------------------------------------- Discord and the terminal


async def test_discord_gets_the_image_as_an_attachment_and_a_file_too_big_for_a_bot_as_a_line(
    adapter, discord_api
) -> None:
    picture = chart()
    await adapter.send_file(str(CHANNEL_ID), OutgoingFile("image", picture, "chart.png", "image/png"), reply_to="42")
    await adapter.send_file(
        str(CHANNEL_ID), OutgoingFile("document", bytes(11 * 1024 * 1024), "dump.bin", "application/octet-stream")
    )
    assert discord_api.uploads == [(str(CHANNEL_ID), "chart.png", picture)]
    posted = [m for m in discord_api.created if m["channel_id"] == str(CHANNEL_ID)]
    assert [a["filename"] for a in posted[0]["attachments"]] == ["chart.png"]
    assert "dump.bin" in posted[1]["content"] and "more than Discord takes" in posted[1]["content"]


async def test_the_terminal_saves_each_file_and_prints_where(tmp_path) -> None:
    out = io.StringIO()
    terminal = TerminalAdapter(stdout=out, files_dir=tmp_path)
    for _ in range(2):
        await terminal.send_file("terminal", OutgoingFile("image", chart(), "image-1.png", "image/png"))
    assert sorted(path.name for path in tmp_path.iterdir()) == ["image-1-2.png", "image-1.png"]
    assert f"[image saved: {tmp_path / 'image-1.png'}]" in out.getvalue()
    assert size_of((tmp_path / "image-1-2.png").read_bytes()) == (320, 200)


class ShownSurface:
    """A reply surface that keeps what it shows: the preview, then the final text (None until finished)."""

    interval = 0.01

    def __init__(self) -> None:
        self.preview_text = ""
        self.final: str | None = None

    async def preview(self, text: str) -> bool:
        self.preview_text = text
        return True

    async def finish(self, text: str) -> None:
        self.final = text


async def test_a_reply_of_images_only_still_ends_its_preview(redis, key_prefix) -> None:
    store = SessionStore(redis, key_prefix)
    media = MediaStore(redis, key_prefix, max_bytes=5_000_000, max_total_bytes=50_000_000)
    sha = await media.put("local:shown", chart(), mime="image/png", name="image-1.png", file_id="made:x")
    platform, surface = RecordingAdapter(), ShownSurface()
    stream = ReplyStream(surface, previews=True)
    await stream(ToolRunning("draw_chart", "{}"))
    await wait_for(lambda: surface.preview_text, what="the tool's status line in the preview")
    assert surface.preview_text == "🔧 draw_chart …"
    replies = Replies(store, {"local": platform}, lambda message: OpenGate(), Health("Redis"), media)
    message = IncomingMessage(platform="local", chat_id="shown", update_id="u1", text="draw")
    await replies.deliver(message, "", stream, items=[{"kind": "image", "sha": sha, "name": "image-1.png"}])
    assert surface.final == ""  # the status line is taken down, the web chat's reply marked done
    assert [file.name for _, file in platform.files] == ["image-1.png"]


async def test_telegram_sends_a_panorama_it_refuses_as_a_photo_as_a_document() -> None:
    async with FakeBotAPI() as api:
        adapter = TelegramAdapter(telegram_settings(api))
        try:
            await adapter.send_file("77", OutgoingFile("image", chart(2200, 100), "wide.png", "image/png"))
            await adapter.send_file("77", OutgoingFile("document", b"a,b\n1,2\n", "table.csv", "text/csv"))
        finally:
            await adapter.stop()
    assert [(sent.method, sent.name) for sent in api.sent_files] == [
        ("sendDocument", "wide.png"),
        ("sendDocument", "table.csv"),
    ]
    assert [(attempt.method, attempt.status, attempt.description) for attempt in api.attempts] == [
        ("sendPhoto", 400, "Bad Request: PHOTO_INVALID_DIMENSIONS"),
        ("sendDocument", 200, ""),
        ("sendDocument", 200, ""),
    ]
