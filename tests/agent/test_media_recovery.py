"""Photos survive what a long chat goes through, on the whole gateway: the real aiogram client on the fake Bot API,
a real GatewayRunner on real Redis, and a fake LLM provider whose every request body is checked against the official
SDK types. Thirty compactions and a restart later the photo is still named in the summary and ``session_fetch`` shows
it to the model again; a broken download leaves nothing stuck; a turn retried after a provider failure stores its
photo and its message once."""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator

from agent.compaction.summary_prompt import SECTION_HEADINGS, SYSTEM_PROMPT
from agent.llm.openai_chat import TOOL_IMAGES_HEADING
from agent.messages import is_summary, stand_in
from agent.tokens import content_text
from gateway.config import Settings
from gateway.events import CompressEvent
from gateway.platforms.telegram import TelegramAdapter
from gateway.store import SessionStore
from tests.fakes.bot_api import FakeBotAPI
from tests.fakes.gateway import make_settings
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply
from tests.fakes.media import images_in, png
from tests.fakes.sdk_shapes import validate_chat_completions
from tests.fakes.telegram import telegram_gateway, telegram_settings

NOTES = "\n".join(f"{heading}\n- noted" for heading in SECTION_HEADINGS)
WIDE = 200_000
WORDS = ("ledger", "invoice", "quarter", "forecast", "budget", "vendor", "refund", "margin", "payroll", "audit")


def is_summary_request(request: RecordedRequest) -> bool:
    return SYSTEM_PROMPT[:40] in request.system


def figures(rng: random.Random, index: int) -> str:
    """One long message of the night's budget talk (about 900 tokens, within Telegram's 4,096 characters)."""
    words = [f"{rng.choice(WORDS)}-{rng.randrange(10_000)}" for _ in range(380)]
    return f"round {index}: " + " ".join(words)


async def transcript_of(redis, prefix: str, chat: str) -> list[dict]:
    store = SessionStore(redis, prefix)
    return await store.active(chat, await store.current_session(chat))


def polling(api: FakeBotAPI) -> TelegramAdapter:
    """A fresh Telegram client of ``api`` (one per start of the gateway)."""
    return TelegramAdapter(telegram_settings(api), poll_timeout=1, typing_interval=0)


async def kept(runner, chat: str) -> tuple[list[dict], int, int]:
    """The chat's user messages, and how many items its media store holds in how many bytes."""
    transcript = await runner.store.active(chat, await runner.store.current_session(chat))
    media = runner.media_store
    return (
        [m for m in transcript if m["role"] == "user"],
        await runner.store.redis.zcard(media.keys(chat).media_held),
        await media.held_bytes(chat),
    )


async def test_thirty_compactions_and_a_restart_later_session_fetch_shows_the_photo_again(
    redis, redis_url, key_prefix
) -> None:
    chat, window = 5160, 8_000
    photo = png(640, 480, (20, 120, 220))
    rng = random.Random(27)
    asked: list[str] = []  # the photo's message id, once the session holds it

    def script(request: RecordedRequest) -> Reply:
        validate_chat_completions(request.body)
        if is_summary_request(request):
            return Reply.answer(NOTES)
        if request.messages[-1]["role"] == "user" and "whiteboard?" in request.last_user_text:
            return Reply.tool_call("session_fetch", {"ids": asked}, call_id="call_fetch")
        return Reply.answer("noted")

    compactions: list[CompressEvent] = []

    def count_compactions(event: object) -> None:
        if isinstance(event, CompressEvent):
            compactions.append(event)

    async with FakeBotAPI() as api, FakeLLMServer(handler=script, context_limit=window) as llm:
        settings = make_settings(
            redis_url, key_prefix, llm.openai_base_url, context_length=window, compression={"protect_last_n": 2}
        )
        async with telegram_gateway(settings, redis, polling(api)) as runner:
            runner.events.subscribe(count_compactions)  # before any message: nothing has been compacted yet
            api.push(api.private_message(chat, "morning, the budget review starts now"))  # the protected head
            await api.wait_until(lambda: len(api.sent) == 1, timeout=60)
            api.push(api.photo_message(chat, 1, "our plan, on the whiteboard", data=photo))
            await api.wait_until(lambda: len(api.sent) == 2, timeout=60)
            await runner.wait_idle()
            stored = await transcript_of(redis, key_prefix, f"tg:{chat}")
            sent_photo = next(m for m in stored if m.get("_items"))
            asked.append(sent_photo["_id"])
            index = 0
            while len(compactions) < 30:
                assert index < 200, f"only {len(compactions)} compactions after {index} messages"
                api.push(api.private_message(chat, figures(rng, index)))
                index += 1
                await api.wait_until(lambda n=index: len(api.sent) == 2 + n, timeout=60)
            await runner.wait_idle()
        assert llm.overflowed == []
        async with telegram_gateway(settings, redis, polling(api)) as runner:
            runner.events.subscribe(count_compactions)
            before_restart = len(llm.requests)
            api.push(api.private_message(chat, "what was on the whiteboard?"))
            await api.wait_until(lambda: len(api.sent) == 3 + index, timeout=60)
            await runner.wait_idle()
            live = await transcript_of(redis, key_prefix, f"tg:{chat}")

    assert all(event.trigger in ("in_loop", "hygiene") for event in compactions)
    line = stand_in(sent_photo["_id"], sent_photo["_items"][0])
    assert line.startswith(f"[image {sent_photo['_id']}: ") and "640×480" in line
    summary = next(m for m in live if is_summary(m))
    assert line in content_text(summary["content"])
    assert sent_photo not in live  # folded away long ago: only the summary names it
    turns = [r for r in llm.requests[before_restart:] if not is_summary_request(r)]
    fetch, answer = turns[-2:]
    assert fetch.messages[-1]["role"] == "user" and fetch.body.get("tools")
    last = answer.messages[-1]
    assert answer.messages[-2]["role"] == "tool" and last["role"] == "user"
    assert last["content"][0]["text"] == TOOL_IMAGES_HEADING
    assert images_in(_only(last)) == [photo]  # the same bytes, as an image part, after the tool result
    tool_results = [m for m in live if m["role"] == "tool"]
    assert tool_results and tool_results[-1]["_items"][0]["sha"] == sent_photo["_items"][0]["sha"]


def _only(message: dict) -> RecordedRequest:
    """A request holding just ``message`` (to read its image parts with ``images_in``)."""
    return RecordedRequest(method="POST", path="", headers={}, raw=b"", body={"messages": [message]}, dialect="openai")


def answer_with_images(request: RecordedRequest) -> Reply:
    validate_chat_completions(request.body)
    return Reply.answer(f"seen {len(images_in(request))} images: {request.last_user_text[:40]}")


async def test_a_photo_whose_download_breaks_leaves_nothing_stuck_for_the_message_after_it(
    redis, redis_url, key_prefix
) -> None:
    chat = 5161
    async with FakeBotAPI() as api, FakeLLMServer(handler=answer_with_images, context_limit=WIDE) as llm:
        settings = make_settings(redis_url, key_prefix, llm.openai_base_url, context_length=WIDE)
        async with telegram_gateway(settings, redis, polling(api)) as runner:
            broken = api.photo_message(chat, 1, "the rack after the move", data=png(800, 600))
            file_id = broken["message"]["photo"][-1]["file_id"]
            api.break_download(file_id)
            api.push(broken)
            # sent while the photo is being taken in: it waits behind that turn (which took in its backlog already,
            # so the two are not coalesced) and must not be held up by the broken download
            await api.wait_until(lambda: file_id in api.file_requests, timeout=60)
            api.push(api.private_message(chat, "and the cables are labelled now"))
            await api.wait_until(lambda: len(api.sent) == 2, timeout=60)
            await runner.wait_idle()
            assert await runner.inbox.marked() == 0
            users, items, held = await kept(runner, f"tg:{chat}")
    first, second = [m.text for m in api.sent]
    assert first.startswith("⚠️ I could not take in photo.jpg: the download of photo.jpg stopped after")
    assert first.split("\n\n", 1)[1].startswith("seen 0 images: the rack after the move")
    assert second == "seen 0 images: and the cables are labelled now"
    assert [m["content"].split("\n\n")[0] for m in users] == [
        "the rack after the move",
        "and the cables are labelled now",
    ]
    assert users[0]["_items"][0]["error"] and not users[0]["_items"][0].get("sha")
    assert "_items" not in users[1] and items == held == 0


@contextlib.asynccontextmanager
async def provider_first(
    reply: Reply, redis_url: str, key_prefix: str
) -> AsyncIterator[tuple[FakeBotAPI, FakeLLMServer, Settings]]:
    """The fake Bot API, a provider whose first request gets ``reply`` (then it answers), and settings for them
    with no retries in the client: a failed request fails the turn itself, after its items were taken in."""
    async with FakeBotAPI() as api, FakeLLMServer(handler=answer_with_images, context_limit=WIDE) as llm:
        settings = make_settings(redis_url, key_prefix, llm.openai_base_url, context_length=WIDE)
        settings.model.max_retries = 0
        llm.enqueue(reply)
        yield api, llm, settings


async def test_a_turn_the_provider_fails_once_is_retried_and_stores_its_photo_and_message_once(
    redis, redis_url, key_prefix
) -> None:
    chat, photo = 5162, png(320, 240, (90, 200, 90))
    async with (
        provider_first(Reply.server_error(500), redis_url, key_prefix) as (api, llm, settings),
        telegram_gateway(settings, redis, polling(api)) as runner,
    ):
        api.push(api.photo_message(chat, 1, "the new floor plan", data=photo))
        await api.wait_until(lambda: len(api.sent) == 2, timeout=60)
        await runner.wait_idle()
        users, items, held = await kept(runner, f"tg:{chat}")
    failed, answered = llm.requests
    assert failed.messages == answered.messages  # the retry is the same turn, items and all
    assert images_in(failed) == images_in(answered) == [photo]
    notice, reply = [m.text for m in api.sent]
    assert notice.startswith("⚠️") and reply.startswith("seen 1 images: the new floor plan")
    assert len(users) == 1 and len(users[0]["_items"]) == 1
    assert items == 1 and held == len(photo)


async def test_a_turn_cut_short_by_a_stop_after_taking_its_photo_in_is_answered_after_the_restart_once(
    redis, redis_url, key_prefix
) -> None:
    chat, photo = 5163, png(320, 240, (200, 90, 200))
    # the process goes away while the provider is thinking
    async with provider_first(Reply.hang(), redis_url, key_prefix) as (api, llm, settings):
        async with telegram_gateway(settings, redis, polling(api)) as runner:
            api.push(api.photo_message(chat, 1, "the badge for the new office", data=photo))
            await api.wait_until(lambda: len(llm.requests) == 1, timeout=60)
            assert await runner.stop(grace_seconds=0) == 1  # the turn is cancelled: nothing of it committed
        async with telegram_gateway(settings, redis, polling(api)) as runner:
            await api.wait_until(lambda: len(api.sent) == 1, timeout=60)
            await runner.wait_idle()
            users, items, held = await kept(runner, f"tg:{chat}")
    cut, answered = llm.requests
    assert images_in(cut) == images_in(answered) == [photo]
    assert api.sent[0].text.startswith("seen 1 images: the badge for the new office")
    assert len(users) == 1 and [ref["kind"] for ref in users[0]["_items"]] == ["image"]
    assert items == 1 and held == len(photo)
