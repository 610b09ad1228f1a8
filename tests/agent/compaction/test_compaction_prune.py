"""Phase 1: bulky old tool output is cleared before the summarizer sees it; originals stay archivable."""

from agent.compaction.prune import PRUNED_TOOL_OUTPUT, prune_tool_outputs


def test_tool_results_over_200_chars_are_cleared():
    messages = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "cat", "arguments": "{}"}}],
            "_id": "m-1",
        },
        {"role": "tool", "tool_call_id": "c1", "content": "x" * 201, "_id": "m-2", "_tok": 99},
    ]
    pruned = prune_tool_outputs(messages)
    assert pruned[1]["content"] == PRUNED_TOOL_OUTPUT
    assert pruned[1]["_pruned_chars"] == 201
    assert pruned[1]["tool_call_id"] == "c1"


def test_an_edited_result_is_a_new_version_and_the_original_is_untouched():
    original = {"role": "tool", "tool_call_id": "c1", "content": "y" * 500, "_id": "m-2", "_tok": 130}
    [pruned] = prune_tool_outputs([original])
    assert "_id" not in pruned and "_tok" not in pruned
    assert pruned["_orig_id"] == "m-2"
    assert original["content"] == "y" * 500 and original["_id"] == "m-2"


def test_short_results_and_other_roles_are_kept_as_they_are():
    short = {"role": "tool", "tool_call_id": "c1", "content": "z" * 200, "_id": "m-2"}
    user = {"role": "user", "content": "u" * 5000, "_id": "m-3"}
    pruned = prune_tool_outputs([short, user])
    assert pruned[0] is short and pruned[1] is user
