"""The chaos soak's overload phase on a small flood: the shipped settings answer a chat's waiting messages as one
backlog, and the phase checks what that promises — every message stored once in order, replies in order, the
last message answered — and finds a chat that breaks it."""

from __future__ import annotations

from evals.bench_chaos import _answered_in_order, overload_phase


async def test_a_small_flood_is_stored_in_order_and_every_chat_answered(redis_url):
    flood = await overload_phase(redis_url, chats=3, per_chat=4, burst=12)
    assert flood["messages"] == 3 * 4 + 12
    assert flood["chats_not_answered_once_in_order"] == []
    assert 4 <= flood["answers"] <= 3 * 4 + 12  # at least each chat's last message; a backlog answered once


def test_replies_out_of_order_twice_or_missing_the_last_are_wrong():
    sent = ["a", "b", "c"]
    assert _answered_in_order(sent, ["echo: c"])
    assert _answered_in_order(sent, ["echo: a", "echo: c"])
    assert not _answered_in_order(sent, ["echo: a", "echo: b"])  # the last message never answered
    assert not _answered_in_order(sent, ["echo: b", "echo: b", "echo: c"])  # one answered twice
    assert not _answered_in_order(sent, ["echo: b", "echo: a", "echo: c"])  # out of order
    assert not _answered_in_order(sent, ["echo: x", "echo: c"])  # a reply to nothing sent
    assert not _answered_in_order(sent, [])
