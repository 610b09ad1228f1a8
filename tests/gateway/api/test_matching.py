"""A message's canonical digest and a request's prefix chain: what a stateless client's resent history is
matched by. Pure functions; no Redis here (the index is tested in tests/gateway/store/test_api_sessions.py)."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.messages import InvalidMessage
from gateway.api.matching import (
    ROOT,
    chain,
    conversation,
    digest,
    extended,
    history_end,
    normalised,
    seed_messages,
)
from gateway.api.requests import ChatMessage

ROLES = ("system", "user", "assistant", "tool")


def _message(role: str, text: str) -> dict:
    message = {"role": role, "content": text}
    if role == "tool":
        message["tool_call_id"] = "call_1"
    return message


messages_strategy = st.lists(
    st.builds(_message, st.sampled_from(ROLES), st.text(max_size=30)),
    min_size=1,
    max_size=12,
)


def _call(call_id: str, name: str, arguments: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# --------------------------------------------------------------------------- normalising text


def test_every_whitespace_but_the_space_is_unprintable():
    """What lets :func:`normalised` skip splitting printable text (checked over all of Unicode)."""
    odd = [hex(code) for code in range(sys.maxunicode + 1) if chr(code).isspace() and chr(code).isprintable()]
    assert odd == ["0x20"]


@given(st.text())
def test_normalised_is_whitespace_collapsed(text):
    assert normalised(text) == " ".join(text.split())


# --------------------------------------------------------------------------- one message's digest


def test_a_reply_the_client_trimmed_or_rewrapped_is_the_same_message():
    reply = {"role": "assistant", "content": "Sure.\n\nThe backup ran  at 03:00.\n"}
    assert digest({"role": "assistant", "content": "Sure. The backup ran at 03:00."}) == digest(reply)
    assert digest({"role": "assistant", "content": " Sure.\r\n\tThe backup ran at 03:00. "}) == digest(reply)
    assert digest({"role": "assistant", "content": "Sure. The backup ran at 04:00."}) != digest(reply)


def test_only_what_the_client_sees_counts():
    plain = {"role": "user", "content": "hi"}
    assert digest({**plain, "name": "ada", "_id": "m7", "_compressed_summary": True}) == digest(plain)
    assert digest({"role": "assistant", "content": "hi"}) != digest(plain)
    assert digest({"role": "developer", "content": "hi"}) != digest({"role": "system", "content": "hi"})
    assert digest({"role": "assistant", "content": None}) == digest({"role": "assistant", "content": ""})


def test_text_parts_count_as_their_text_and_images_by_their_url():
    text = {"role": "user", "content": "look at this"}
    assert digest({"role": "user", "content": [{"type": "text", "text": "look at this"}]}) == digest(text)
    assert digest({"role": "user", "content": [{"type": "text", "text": "look"}, "at this"]}) == digest(text)

    def with_image(url: str) -> dict:
        image = {"type": "image_url", "image_url": {"url": url}}
        return {"role": "user", "content": [{"type": "text", "text": "look at this"}, image]}

    cat = with_image("data:image/png;base64,AAAA")
    assert digest(cat) == digest(with_image("data:image/png;base64,AAAA"))
    assert digest(cat) != digest(with_image("data:image/png;base64,AAAB"))
    assert digest(cat) != digest(text)


def test_tool_calls_count_by_name_and_arguments_and_results_by_their_call():
    def calling(call_id: str, arguments: str) -> dict:
        return {"role": "assistant", "content": None, "tool_calls": [_call(call_id, "terminal", arguments)]}

    asked = calling("call_a", '{"cmd": "ls"}')
    assert digest(calling("call_b", '{"cmd":  "ls"}\n')) == digest(asked)  # ids and spacing are not compared
    assert digest(calling("call_a", '{"cmd": "pwd"}')) != digest(asked)
    assert digest({"role": "assistant", "content": None}) != digest(asked)
    result = {"role": "tool", "tool_call_id": "call_a", "content": "a.txt"}
    assert digest({**result, "tool_call_id": "call_b"}) != digest(result)
    assert digest({**result, "content": "b.txt"}) != digest(result)


def test_a_parsed_request_message_digests_as_its_json_did():
    raw = {"role": "user", "content": [{"type": "text", "text": "hello  there"}]}
    assert digest(ChatMessage.model_validate(raw)) == digest(raw) == digest({"role": "user", "content": "hello there"})


# --------------------------------------------------------------------------- the chain


@given(messages_strategy)
def test_each_hash_stands_for_its_prefix(messages):
    hashes = chain(messages)
    assert len(hashes) == len(messages) and all(len(value) == 16 for value in hashes)
    for end in range(len(messages) + 1):
        assert chain(messages[:end]) == hashes[:end]
    assert extended(hashes[-2] if len(hashes) > 1 else None, messages[-1]) == hashes[-1]


@settings(max_examples=50)
@given(messages_strategy, st.data())
def test_an_edit_changes_the_chain_from_the_edited_message_on(messages, data):
    at = data.draw(st.integers(0, len(messages) - 1), label="edited message")
    edited = [*messages[:at], {**messages[at], "content": f"{messages[at]['content']} (edited)"}, *messages[at + 1 :]]
    before, after = chain(messages), chain(edited)
    assert after[:at] == before[:at]
    assert all(old != new for old, new in zip(before[at:], after[at:]))


def test_an_edit_at_position_3_changes_the_chain_from_3_on():
    messages = [_message(role, f"message {index}") for index, role in enumerate(["system", *["user", "assistant"] * 4])]
    edited = [*messages[:3], {**messages[3], "content": "something else"}, *messages[4:]]
    before, after = chain(messages), chain(edited)
    assert after[:3] == before[:3]  # h_1..h_3: messages 0-2
    assert all(old != new for old, new in zip(before[3:], after[3:]))


def test_a_regenerated_last_answer_forks_at_the_last_user_message():
    history = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "what time is it?"},
    ]
    first = chain([*history, {"role": "assistant", "content": "noon"}])
    again = chain([*history, {"role": "assistant", "content": "twelve o'clock"}])
    assert first[:4] == again[:4] and first[4] != again[4]
    # The regenerating request resends the history: it is looked up where that user message starts.
    request = conversation(history)
    assert request.prefix == (3, first[2])
    assert history[request.end] == {"role": "user", "content": "what time is it?"}


def test_a_conversation_names_its_answered_points():
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
        {"role": "assistant", "content": None, "tool_calls": [_call("call_1", "terminal", "{}")]},
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
        {"role": "assistant", "content": "d"},
        {"role": "user", "content": "e"},
    ]
    request = conversation(messages)
    hashes = chain(messages)
    assert request.hashes == hashes and request.answered == [3, 5, 7]
    assert request.end == history_end(messages) == 7
    assert request.prefix == (7, hashes[6])
    assert request.earlier() == [(5, hashes[4]), (3, hashes[2])]
    reply = {"role": "assistant", "content": "f"}
    assert request.after_reply(reply) == (9, chain([*messages, reply])[-1])
    assert request.at(0) == ROOT


def test_a_first_request_has_no_history():
    request = conversation([{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}])
    assert request.end == 0 and request.prefix == (0, ROOT) and request.earlier() == []


# --------------------------------------------------------------------------- a new session's history


def test_seed_messages_keep_the_openai_fields_and_nothing_of_foldgates_own():
    messages = [
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": "hi", "name": "ada", "_compressed_summary": True, "_id": "m1"},
        {"role": "assistant", "tool_calls": [_call("call_1", "terminal", "{}")], "refusal": None},
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "next"},
    ]
    seed = seed_messages(messages, 5)
    assert seed == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi", "name": "ada"},
        {"role": "assistant", "content": None, "tool_calls": [_call("call_1", "terminal", "{}")]},
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
        {"role": "assistant", "content": "done"},
    ]
    seed[1]["content"] = "changed"
    assert messages[1]["content"] == "hi"  # copies: the request is not changed


def test_seed_messages_refuse_what_cannot_be_stored():
    with pytest.raises(InvalidMessage):
        seed_messages([{"role": "tool", "content": "orphan"}], 1)
