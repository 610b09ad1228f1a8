"""Documents and Discord attachments through the whole gateway: a real GatewayRunner on real Redis, the platform's
real client (aiogram on the fake Bot API; discord.py on the fake REST API with attachments on a fake CDN, its gateway
connection never opened) and a fake LLM provider whose every request body is checked against the official SDK types.
A PDF's text layer and a UTF-16 log reach the model as text under their header lines; a Discord image as an image part.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from agent.tokens import content_text
from gateway.platforms.discord import DiscordAdapter
from gateway.platforms.telegram import TelegramAdapter
from gateway.store import SessionStore
from gateway.worker.runner import GatewayRunner
from tests.fakes.bot_api import FakeBotAPI
from tests.fakes.discord_api import ALICE, DM_CHANNEL_ID, message_payload, receive
from tests.fakes.discord_cdn import FakeDiscordCDN
from tests.fakes.gateway import make_settings
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.fakes.media import images_in, pdf, png
from tests.fakes.sdk_shapes import validate_chat_completions
from tests.fakes.telegram import telegram_gateway, telegram_settings

# The Discord fixtures used here by name (``adapter``, ``discord_api``, ``gateway``) are tests/conftest.py's.
WINDOW = 200_000
LOG = (
    "2026-04-25 03:12:07 ERROR billing-worker: disk full on /var/lib/ledger\n"
    "2026-04-25 03:12:09 WARN  billing-worker: retry 1/5 — écriture refusée, Ошибка записи\n"
)


def checked(request: RecordedRequest) -> Reply:
    validate_chat_completions(request.body)
    return Reply.answer(f"seen {len(images_in(request))} images")


def last_user(request: RecordedRequest) -> str:
    message = request.messages[-1]
    assert message["role"] == "user"
    return content_text(message["content"])


async def test_a_pdfs_text_layer_and_a_utf16_log_reach_the_model_as_text_under_their_headers(
    redis, redis_url, key_prefix
) -> None:
    chat = 5170
    invoice, log = pdf("Invoice 0425", "Total 42 EUR"), LOG.encode("utf-16")
    async with FakeBotAPI() as api, FakeLLMServer(handler=checked, context_limit=WINDOW) as llm:
        settings = make_settings(redis_url, key_prefix, llm.openai_base_url, context_length=WINDOW)
        adapter = TelegramAdapter(telegram_settings(api), poll_timeout=1, typing_interval=0)
        async with telegram_gateway(settings, redis, adapter) as runner:
            api.push(
                api.document_message(
                    chat,
                    1,
                    invoice,
                    file_name="invoice-0425.pdf",
                    mime_type="application/pdf",
                    caption="is this one paid?",
                )
            )
            await api.wait_until(lambda: len(api.sent) == 1, timeout=60)
            api.push(api.document_message(chat, 1, log, file_name="billing.log", mime_type="text/plain"))
            await api.wait_until(lambda: len(api.sent) == 2, timeout=60)
            await runner.wait_idle()
            store = SessionStore(redis, key_prefix)
            transcript = await store.active(f"tg:{chat}", await store.current_session(f"tg:{chat}"))
            stored = [
                await runner.media_store.get(f"tg:{chat}", m["_items"][0]["sha"]) for m in transcript if m.get("_items")
            ]
    first, second = llm.requests
    assert last_user(first) == (
        "is this one paid?\n\n[document invoice-0425.pdf, 2 pages]\n[page 1]\nInvoice 0425\n\n[page 2]\nTotal 42 EUR"
    )
    assert last_user(second) == f"[document billing.log, {len(log)} bytes]\n{LOG}"
    assert images_in(first) == images_in(second) == []
    assert [m.text for m in api.sent] == ["seen 0 images", "seen 0 images"]  # nothing went wrong: no line above
    users = [m for m in transcript if m["role"] == "user"]
    assert [m["_items"][0]["name"] for m in users] == ["invoice-0425.pdf", "billing.log"]
    assert users[0]["_items"][0]["pages"] == 2 and all("error" not in m["_items"][0] for m in users)
    assert stored == [(invoice, "application/pdf"), (log, "text/plain")]  # the originals are kept as sent


@pytest_asyncio.fixture
async def llm() -> AsyncIterator[FakeLLMServer]:
    """The Discord tests' ``gateway`` fixture talks to this provider: every request body checked."""
    async with FakeLLMServer(handler=checked, context_limit=WINDOW) as server:
        yield server


async def test_a_discord_attachment_reaches_the_model_as_an_image_part(
    adapter: DiscordAdapter, discord_api, llm: FakeLLMServer, gateway: GatewayRunner
) -> None:
    chart = png(640, 480, (240, 180, 20))
    async with FakeDiscordCDN(channel_id=DM_CHANNEL_ID) as cdn:
        attachment = cdn.attachment("latency.png", chart, content_type="image/png", width=640, height=480)
        await receive(
            adapter,
            message_payload(
                ALICE, "why the spike at 3am?", channel_id=DM_CHANNEL_ID, guild=False, attachments=(attachment,)
            ),
        )
        await gateway.wait_idle()
        chat = f"dc:{DM_CHANNEL_ID}"
        transcript = await gateway.store.active(chat, await gateway.store.current_session(chat))
    (request,) = llm.requests
    assert images_in(request) == [chart]
    assert "why the spike at 3am?" in last_user(request)
    assert discord_api.contents(DM_CHANNEL_ID) == ["seen 1 images"]
    assert len(cdn.requests) == 1  # fetched once, from the attachment's URL
    (user,) = [m for m in transcript if m["role"] == "user"]
    ref = user["_items"][0]
    assert (ref["kind"], ref["name"], ref["w"], ref["h"], ref["file_id"]) == (
        "image",
        "latency.png",
        640,
        480,
        attachment["url"],
    )
