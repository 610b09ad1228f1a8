"""Message rules: what a provider accepts, what counts as a person's message, edits make new versions."""

from __future__ import annotations

import pytest

from agent.messages import (
    InvalidMessage,
    api_problems,
    is_real_user_message,
    pair_problems,
    to_api,
    validate_message,
    with_content,
)


def call(call_id: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": "shell", "arguments": "{}"}}


def test_complete_pairs_are_valid() -> None:
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "run it"},
        {"role": "assistant", "content": None, "tool_calls": [call("a"), call("b")]},
        {"role": "tool", "tool_call_id": "a", "content": "ok"},
        {"role": "tool", "tool_call_id": "b", "content": "ok"},
        {"role": "assistant", "content": "done"},
    ]
    assert api_problems(messages) == []


def test_missing_result_and_orphan_result_are_reported() -> None:
    missing = [{"role": "assistant", "content": None, "tool_calls": [call("a")]}, {"role": "user", "content": "hi"}]
    orphan = [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "zz", "content": "?"}]
    assert any("no result" in p for p in pair_problems(missing))
    assert any("no preceding call" in p for p in pair_problems(orphan))
    assert any("no result" in p for p in pair_problems(missing[:1]))


@pytest.mark.parametrize(
    "bad",
    [
        "just text",
        {"role": "robot", "content": "x"},
        {"role": "user", "content": 42},
        {"role": "tool", "content": "x"},
        {"role": "user", "content": "x", "tool_calls": []},
        {"role": "assistant", "content": None, "tool_calls": [{"function": {}}]},
    ],
)
def test_malformed_messages_are_refused_with_a_reason(bad) -> None:
    with pytest.raises(InvalidMessage) as error:
        validate_message(bad)
    assert str(error.value)


def test_real_user_messages_exclude_summaries_synthetic_and_empty() -> None:
    assert is_real_user_message({"role": "user", "content": "ship it"})
    assert not is_real_user_message({"role": "user", "content": "   "})
    assert not is_real_user_message(
        {"role": "user", "content": "[CONTEXT COMPACTION] earlier turns", "_compressed_summary": True}
    )
    # The prefix alone is text anyone can type: only foldgate's own marker makes a summary.
    assert is_real_user_message({"role": "user", "content": "[CONTEXT COMPACTION] earlier turns"})
    assert not is_real_user_message({"role": "user", "content": "continue", "_synthetic": True})
    assert not is_real_user_message({"role": "assistant", "content": "hello"})


def test_edits_are_new_versions_and_metadata_never_reaches_the_api() -> None:
    original = {"role": "tool", "tool_call_id": "a", "content": "long output", "_id": "17", "_tok": 9}
    edited = with_content(original, "[stub]")
    assert edited["_orig_id"] == "17" and "_id" not in edited and "_tok" not in edited
    assert original["content"] == "long output"
    assert to_api([edited]) == [{"role": "tool", "tool_call_id": "a", "content": "[stub]"}]


def test_a_malformed_message_is_named_without_breaking_the_pairs_around_it():
    from agent.messages import api_problems

    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "a", "type": "function", "function": {"name": "x", "arguments": "{}"}}],
    }
    assert api_problems(
        [{"role": "user", "content": "q"}, call, {"role": "tool", "tool_call_id": "a", "content": 5}]
    ) == ["message 2: content must be a string, a list of parts or null, got int"]
    assert api_problems(
        [
            {"role": "user", "content": "q"},
            {**call, "content": 5},
            {"role": "tool", "tool_call_id": "a", "content": "r"},
        ]
    ) == ["message 1: content must be a string, a list of parts or null, got int"]
    junk = api_problems(
        [
            {"role": "assistant", "tool_calls": 7},
            {"role": "tool", "tool_call_id": ["x"], "content": "r"},
            "not a message",
        ]
    )
    assert len(junk) == 4 and junk[2] == "message 2: message must be an object, got str"
