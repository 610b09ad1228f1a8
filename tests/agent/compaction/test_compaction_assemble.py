"""Phase 4: system note on the first compaction only, the summary message, and tool-pair sanitizing."""

from agent.compaction.assemble import (
    STAND_IN_RESULT,
    SYSTEM_NOTE,
    assemble,
    note_system_prompt,
    sanitize_tool_pairs,
    summary_message,
)
from agent.messages import is_real_user_message, is_summary, pair_problems
from tests.fakes.histories import Transcript


def call(call_id, name="run"):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


def test_first_compaction_notes_the_system_prompt_as_a_new_version():
    t = Transcript(system="Be brief.")
    t.exchange("hi", "hello")
    head = note_system_prompt(t.messages[:3])
    assert head[0]["content"] == f"Be brief.\n\n{SYSTEM_NOTE}"
    assert head[0]["_orig_id"] == "m-1" and "_id" not in head[0]
    assert head[1] is t.messages[1]
    assert note_system_prompt(head)[0] is head[0]  # never noted twice


def test_later_compactions_leave_the_system_prompt_byte_identical():
    t = Transcript(system="Be brief.")
    t.exchange("hi", "hello")
    summary = summary_message("[CONTEXT COMPACTION] notes", "user")
    out = assemble(t.messages[:3], summary, [t.messages[2]], first_compaction=False)
    assert out[0] is t.messages[0]


def test_list_content_system_prompt_gets_a_text_part():
    head = note_system_prompt([{"role": "system", "content": [{"type": "text", "text": "Be brief."}]}])
    assert head[0]["content"][-1] == {"type": "text", "text": SYSTEM_NOTE}


def test_summary_message_is_marked_and_never_a_real_user_message():
    message = summary_message("[CONTEXT COMPACTION] notes", "user")
    assert message["_compressed_summary"] is True and message["_synthetic"] is True
    assert is_summary(message) and not is_real_user_message(message)


def test_results_whose_call_is_gone_are_dropped():
    messages = [
        {"role": "user", "content": "q"},
        {"role": "tool", "tool_call_id": "gone", "content": "orphan"},
        {"role": "assistant", "content": "a"},
    ]
    assert sanitize_tool_pairs(messages) == [messages[0], messages[2]]


def test_calls_without_results_get_a_stand_in_before_the_next_message():
    messages = [
        {"role": "assistant", "content": "", "tool_calls": [call("c1"), call("c2")]},
        {"role": "tool", "tool_call_id": "c2", "content": "two"},
        {"role": "user", "content": "next"},
    ]
    out = sanitize_tool_pairs(messages)
    assert [m.get("tool_call_id") for m in out] == [None, "c2", "c1", None]
    assert out[2]["content"] == STAND_IN_RESULT and out[2]["_synthetic"] is True
    assert pair_problems(out) == []


def test_a_call_still_in_flight_at_the_end_is_left_alone():
    messages = [
        {"role": "user", "content": "deploy"},
        {"role": "assistant", "content": "", "tool_calls": [call("c1"), call("c2")]},
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
    ]
    assert sanitize_tool_pairs(messages) == messages
    closed = sanitize_tool_pairs(messages, keep_trailing_pending=False)
    assert pair_problems(closed) == []


def test_reused_call_ids_are_removed_from_the_later_call():
    messages = [
        {"role": "assistant", "content": "", "tool_calls": [call("c1")]},
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "assistant", "content": "again", "tool_calls": [call("c1")], "_id": "m-3"},
        {"role": "tool", "tool_call_id": "c1", "content": "dup"},
        {"role": "user", "content": "ok"},
    ]
    out = sanitize_tool_pairs(messages)
    assert pair_problems(out) == []
    assert out[2]["content"] == "again" and "tool_calls" not in out[2] and out[2]["_orig_id"] == "m-3"
