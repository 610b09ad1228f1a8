"""A live transcript with a broken tool pair (an orphan result, a call never answered) is repaired for
each turn as the provider would check it: every later message is answered, nothing is deleted."""

from __future__ import annotations

import pytest

from agent.messages import pair_problems
from agent.transcript_repair import MISSING_RESULT, repair_transcript
from gateway.worker.runner import GatewayRunner
from tests.fakes.gateway import make_settings, message, running_gateway
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest, Reply


def echo(request: RecordedRequest) -> Reply:
    return Reply.answer(f"echo: {request.last_user_text}")


def call(call_id: str, name: str = "lookup") -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


# --------------------------------------------------------------------------- the pure function


def test_a_valid_transcript_comes_back_unchanged_and_as_the_same_objects():
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [call("a"), call("b")]},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        {"role": "tool", "tool_call_id": "b", "content": "2"},
        {"role": "assistant", "content": "done"},
    ]
    repair = repair_transcript(messages)
    assert not repair.changed
    assert all(a is b for a, b in zip(repair.messages, messages)) and len(repair.messages) == len(messages)


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "ghost", "content": "x"}],
        [{"role": "assistant", "content": None, "tool_calls": [call("a")]}, {"role": "user", "content": "next"}],
        [{"role": "assistant", "content": None, "tool_calls": [call("a")]}],
        [
            {"role": "assistant", "content": None, "tool_calls": [call("a")]},
            {"role": "tool", "tool_call_id": "a", "content": "1"},
            {"role": "tool", "tool_call_id": "a", "content": "again"},
            {"role": "assistant", "content": None, "tool_calls": [call("a"), call("b")]},
            {"role": "tool", "tool_call_id": "b", "content": "2"},
        ],
    ],
)
def test_every_broken_pairing_is_repaired(messages):
    repair = repair_transcript(messages)
    assert repair.changed
    assert pair_problems([*repair.messages, {"role": "user", "content": "new"}]) == []
    assert all(m.get("tool_call_id") != "ghost" for m in repair.messages)


def test_a_stored_call_keeps_its_stored_form():
    stored = {"role": "assistant", "content": None, "tool_calls": [call("a")], "_id": "7"}
    repair = repair_transcript([stored, {"role": "user", "content": "next"}])
    assert repair.messages[0] is stored and repair.messages[1]["content"] == MISSING_RESULT
    assert repair.unanswered == ["a"]


# --------------------------------------------------------------------------- through a running gateway


async def _plant(runner: GatewayRunner, chat: str, planted: list[dict]) -> list[str]:
    """Store messages straight into the chat's live transcript, as corruption or an old bug would."""
    sid = await runner.store.current_session(chat)
    lock = await runner.store.acquire_lock(chat, 30)
    assert lock is not None
    try:
        return await runner.store.append(chat, sid, planted, lock=lock)
    finally:
        await runner.store.release_lock(lock)


async def _talk(runner, chat_id: str, texts: list[str], start: int) -> None:
    for index, text in enumerate(texts, start):
        await runner.intake(message(chat_id, f"{chat_id}-{index}", text))
        await runner.wait_idle(timeout=20)


@pytest.mark.parametrize(
    "planted, name",
    [
        ([{"role": "tool", "tool_call_id": "call_lost", "content": "orphan result body"}], "orphan"),
        ([{"role": "assistant", "content": None, "tool_calls": [call("call_dangling")]}], "dangling"),
    ],
)
async def test_a_broken_pair_in_the_live_transcript_does_not_break_the_chat(
    redis, redis_url, key_prefix, planted, name
):
    async with FakeLLMServer(handler=echo) as server:
        settings = make_settings(redis_url, key_prefix, server.openai_base_url, context_length=32_000)
        async with running_gateway(settings, redis) as (runner, adapter, _events):
            await _talk(runner, "c", ["first"], 0)
            chat = message("c", "x", "").chat
            [planted_id] = await _plant(runner, chat, [dict(m) for m in planted])
            await _talk(runner, "c", ["second", "third", "fourth"], 1)
            sid = await runner.store.current_session(chat)
            retrievable = await runner.store.get_messages(chat, sid, [planted_id])
            quarantined = await runner.store.quarantined(chat)
            active_ids = [m["_id"] for m in await runner.store.active(chat, sid)]
    assert [text for _chat, text in adapter.sent] == ["echo: first", "echo: second", "echo: third", "echo: fourth"]
    for request in server.requests:
        assert pair_problems(request.messages) == [], request.messages
    assert retrievable and retrievable[0]["content"] == planted[0]["content"]  # never deleted
    if name == "orphan":  # moved out of the live transcript once, into the quarantine with a reason
        assert planted_id not in active_ids
        assert [r["id"] for r in quarantined] == [planted_id] and "no preceding tool call" in quarantined[0]["reason"]
    else:  # the stored call stays; its stand-in result, stored by the first repair, is in each request
        assert planted_id in active_ids
        assert all(MISSING_RESULT in str(r.messages) for r in server.requests[1:])
