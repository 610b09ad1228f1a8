"""How a request waits for its reply: the events that answer it, and seeing that none will come."""

from __future__ import annotations

import asyncio

import pytest

from agent.llm.errors import ProviderUnavailable
from gateway.api import turns
from gateway.api.errors import ApiError
from gateway.outage import waiting_notice
from gateway.platforms.base import IncomingMessage
from tests.fakes.waiting import wait_for

MESSAGE = IncomingMessage(platform="api", chat_id="alice/s_1", user_id="alice", update_id="u1", text="hi")


class StubInbox:
    """An inbox holding the message's entry until :attr:`done` is set."""

    def __init__(self) -> None:
        self.done = False
        #: How many times the inbox was asked: a waiter that asked several times and is still waiting saw the entry.
        self.asked = 0

    async def waiting(self, chat: str, limit: int) -> list[str]:
        assert chat == MESSAGE.chat
        self.asked += 1
        return [] if self.done else ['{"update_id": "other"}', MESSAGE.model_dump_json()]


@pytest.fixture(autouse=True)
def quick_checks(monkeypatch):
    monkeypatch.setattr(turns, "CHECK_SECONDS", 0.02)
    monkeypatch.setattr(turns, "GONE_GRACE_SECONDS", 0.05)


async def test_events_of_other_messages_are_passed_over():
    queue: asyncio.Queue = asyncio.Queue()
    for event in (
        {"type": "final", "reply_to": "u0", "text": "old"},
        {"type": "final", "reply_to": "u1", "text": "new"},
    ):
        queue.put_nowait(event)
    assert (await turns.Waiter(queue, StubInbox(), MESSAGE).next_event())["text"] == "new"


async def test_a_message_whose_turn_ended_without_a_reply_is_429():
    inbox = StubInbox()
    waiter = turns.Waiter(asyncio.Queue(), inbox, MESSAGE)
    waiting = asyncio.create_task(waiter.next_event())
    await wait_for(lambda: inbox.asked >= 3, what="the waiter to look at the inbox three times")
    assert not waiting.done()  # still in the inbox: its turn may be running
    inbox.done = True
    with pytest.raises(ApiError) as refused:
        await asyncio.wait_for(waiting, 5)
    assert refused.value.status == 429 and refused.value.code == "not_answered"


@pytest.mark.parametrize(
    ("event", "status"),
    [
        ({"type": "refusal", "kind": "provider_away", "text": "any words"}, 503),
        ({"type": "refusal", "kind": "rate_limited"}, 429),
        ({"type": "refusal", "kind": "over_budget", "text": "spent", "resets_at": 1.0}, 429),
        ({"type": "final", "text": ""}, 429),
    ],
)
def test_refusals_by_kind_and_a_silent_end_are_errors(event, status):
    with pytest.raises(ApiError) as refused:
        turns.read_event(event)
    assert refused.value.status == status and refused.value.retry_after


def test_a_notice_is_never_read_for_its_words():
    """Only the refusal's kind makes an error: a notice that reads like one is still the text of an answer."""
    notice = waiting_notice(ProviderUnavailable("overloaded", status=503))
    assert turns.read_event({"type": "notice", "text": notice}) == turns.ReplyEvent(True, notice)


def test_a_commands_answer_is_the_reply():
    assert turns.read_event({"type": "notice", "text": "Commands: /help"}) == turns.ReplyEvent(True, "Commands: /help")
