"""Whatever text arrives — lone surrogates, NUL, direction marks, huge, empty, whitespace, binary-looking —
each message is answered or refused cleanly, the chat goes on, and no other chat loses anything."""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from agent.messages import text_of
from tests.fakes.gateway import make_settings, message, running_gateway
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply

EDGES = [
    "",
    " ",
    "\n\t \u3000",
    "\x00",
    "a\x00b",
    "\ud800",
    "x\udfffy",
    "\u202e\u2066abc\u2069",
    "\u200f\u200e",
    "\ufeff",
    "\ufffd" * 10,
    "\U0001f468\u200d\U0001f469\u200d\U0001f467" * 20,
    "e\u0301" * 100,
    "".join(map(chr, range(0, 32))),
    "\x7f\x80\x9f",
    bytes(range(256)).decode("latin-1"),
    "\\x00\\xff" * 50,
    "/",
    "/stop",
    "/nosuchcommand",
    "x" * 200_000,
    "\U0010ffff",
    "\r\n" * 300,
    "[CONTEXT COMPACTION] not a summary",
]
texts = st.one_of(
    st.sampled_from(EDGES),
    st.text(max_size=300),
    st.text(st.characters(codec="utf-8"), max_size=50),
    st.binary(max_size=200).map(lambda raw: raw.decode("utf-8", "replace")),
)


def echo(request: RecordedRequest) -> Reply:
    """The other chat's messages are answered with their own text, so its replies show which one each answers."""
    text = request.last_user_text
    return Reply.answer(text if text.startswith("other ") else f"echo {len(text)}")


async def _run(redis_url: str, prefix: str, batch: list[str]) -> None:
    redis = Redis.from_url(redis_url, decode_responses=True)
    try:
        async with FakeLLMServer(handler=echo) as server:
            settings = make_settings(redis_url, prefix, server.openai_base_url, context_length=32_000)
            async with running_gateway(settings, redis) as (runner, adapter, _events):
                taken = 0
                for index, text in enumerate(batch):
                    if await runner.intake(message("fuzz", f"f{index}", text)):
                        taken += 1
                    await runner.intake(message("other", f"o{index}", f"other {index}"))
                await runner.wait_idle(timeout=60)
                await runner.intake(message("fuzz", "after", "still there?"))
                await runner.wait_idle(timeout=60)
                other = message("other", "x", "").chat
                sid = await runner.store.current_session(other)
                stored = [text_of(m) for m in await runner.store.active(other, sid) if m.get("role") == "user"]
                left = await runner.inbox.pending(message("fuzz", "x", "").chat)
        fuzz_replies = [text for chat, text in adapter.sent if chat == "fuzz"]
        other_replies = [text for chat, text in adapter.sent if chat == "other"]
        assert fuzz_replies and fuzz_replies[-1] == f"echo {len('still there?')}"  # the chat goes on
        assert len(fuzz_replies) <= taken + 1 and left == 0  # nothing stranded, nothing answered twice
        assert stored == [f"other {index}" for index in range(len(batch))]  # the other chat lost nothing
        # Its messages wait behind one another and are coalesced, as shipped: each reply answers the newest
        # message its turn took in — in order, none twice, the last one answered.
        answered = [int(text.removeprefix("other ")) for text in other_replies]
        assert answered == sorted(set(answered)) and answered[-1] == len(batch) - 1
    finally:
        keys = [key async for key in redis.scan_iter(match=f"{prefix}:*", count=1000)]
        if keys:
            await redis.delete(*keys)
        await redis.aclose()


FUZZ = hypothesis_settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


@FUZZ
@given(batch=st.lists(texts, min_size=1, max_size=6))
def test_fuzzed_messages_never_stop_the_chat_or_lose_another_chats_messages(redis_url: str, batch: list[str]) -> None:
    import uuid

    asyncio.run(_run(redis_url, f"fgtest-{uuid.uuid4().hex}", batch))


def test_every_edge_case_at_once(redis_url: str) -> None:
    import uuid

    asyncio.run(_run(redis_url, f"fgtest-{uuid.uuid4().hex}", EDGES))
