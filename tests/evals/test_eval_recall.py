"""The recall scorer: a planted answer that is present counts, one that was removed does not."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.messages import with_content
from evals.compaction_eval import (
    Compaction,
    Probe,
    Uncompacted,
    context_text,
    evaluate,
    load_probes,
    load_session,
    removed_messages,
    score_probe,
)


def conversation() -> list[dict]:
    return [
        {"_id": "s", "role": "system", "content": "You are a coding agent."},
        {"_id": "u1", "role": "user", "content": "I opened PR #4821 for the invoice rounding change"},
        {
            "_id": "a1",
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "terminal", "arguments": json.dumps({"command": "git log --oneline"})},
                }
            ],
        },
        {
            "_id": "t1",
            "role": "tool",
            "tool_call_id": "c1",
            "content": "9f3c2a1 fix(ledger): harden the ledger cutoff job\n1234abc chore: bump deps",
        },
        {"_id": "a2", "role": "assistant", "content": "The ledger cutoff fix is 9f3c2a1."},
        {"_id": "u2", "role": "user", "content": "thanks, what's next?"},
    ]


PR = Probe(
    "demo", "What is the PR number for the invoice rounding change?", "#4821", "PR invoice rounding", "pr", "user"
)
SHA = Probe("demo", "Which commit hardened the ledger cutoff?", "9f3c2a1", "commit ledger cutoff", "sha", "tool")


def test_an_answer_present_in_the_compacted_context_counts_closed_book() -> None:
    messages = conversation()
    result = score_probe(PR, context_text(messages), removed=[])
    assert result.closed_book and result.recovered and result.reason is None


def test_an_answer_only_in_tool_call_arguments_still_counts_as_present() -> None:
    messages = [
        {
            "_id": "a",
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c",
                    "type": "function",
                    "function": {"name": "terminal", "arguments": json.dumps({"command": "gh pr view 4821 # #4821"})},
                }
            ],
        }
    ]
    assert score_probe(PR, context_text(messages), removed=[]).closed_book


def test_a_removed_answer_is_missed_closed_book_but_recovered_by_search() -> None:
    messages = conversation()
    compacted = [messages[0], {"role": "user", "content": "[CONTEXT COMPACTION] we talked about billing"}, messages[5]]
    removed = removed_messages(messages, compacted)
    assert [message["_id"] for message in removed] == ["u1", "a1", "t1", "a2"]
    result = score_probe(PR, context_text(compacted), removed, messages, compacted)
    assert not result.closed_book
    assert result.recovered
    assert result.reason == "not kept (summarized or dropped)"


def test_a_removed_answer_the_search_cannot_surface_is_lost_and_says_why() -> None:
    messages = conversation()
    compacted = [messages[0], messages[5]]
    removed = removed_messages(messages, compacted)
    blind = Probe("demo", "Which commit?", "9f3c2a1", "kubernetes autoscaler", "sha", "tool")
    result = score_probe(blind, context_text(compacted), removed, messages, compacted)
    assert not result.closed_book and not result.recovered
    assert "not in the top" in (result.reason or "")


def test_a_message_replaced_by_a_stub_is_reported_as_replaced() -> None:
    messages = conversation()
    stub = with_content(messages[3], "[Old tool output cleared to save context space]")
    compacted = messages[:3] + [stub] + messages[5:]
    removed = removed_messages(messages, compacted)
    assert [message["_id"] for message in removed] == ["t1", "a2"]
    result = score_probe(SHA, context_text(compacted), removed, messages, compacted)
    assert not result.closed_book and result.recovered
    assert result.reason == "message replaced (stub or pruned copy)"


def test_recovery_only_counts_the_answer_when_it_falls_inside_a_snippet() -> None:
    filler = "\n".join(f"line {n} of an unrelated build log with nothing in it" for n in range(400))
    messages = [
        {"_id": "s", "role": "system", "content": "sys"},
        {"_id": "big", "role": "user", "content": "ledger cutoff notes:\n" + filler + "\nthe hash was 9f3c2a1"},
    ]
    compacted = messages[:1]
    result = score_probe(SHA, context_text(compacted), removed_messages(messages, compacted), messages, compacted)
    assert not result.recovered
    assert "snippet missed the answer" in (result.reason or "")


@dataclass
class DropEverythingButSystem:
    """A test-only policy: the harshest compaction there is."""

    name: str = "drop-all"

    async def compact(self, messages: list[dict]) -> Compaction:
        return Compaction(messages[:1], summarizer_calls=0)


async def test_evaluate_compares_policies_on_the_same_session() -> None:
    messages = conversation()
    kept = await evaluate("demo", messages, [PR, SHA], Uncompacted())
    dropped = await evaluate("demo", messages, [PR, SHA], DropEverythingButSystem())
    assert (kept.closed_book, kept.recovered) == (2, 2)
    assert (dropped.closed_book, dropped.recovered) == (0, 2)
    assert dropped.retained_tokens < kept.retained_tokens == kept.tokens_before
    assert dropped.removed == len(messages) - 1
    record = dropped.as_dict()
    assert record["closed_book_recall"] == 0.0 and record["recovery_recall"] == 1.0
    assert {miss["answer"] for miss in record["misses"]} == {"#4821", "9f3c2a1"}


async def test_the_policy_works_on_a_copy_and_never_edits_the_session() -> None:
    @dataclass
    class Vandal:
        name: str = "vandal"

        async def compact(self, messages: list[dict]) -> Compaction:
            for message in messages:
                message["content"] = "gone"
            return Compaction(messages)

    messages = conversation()
    run = await evaluate("demo", messages, [PR], Vandal())
    assert messages[1]["content"].startswith("I opened PR #4821")
    assert run.closed_book == 0 and "edited in place" in (run.results[0].reason or "")


def test_loaders_validate_what_they_read(tmp_path: Path) -> None:
    session = tmp_path / "demo.jsonl"
    session.write_text('{"role": "user", "content": "hi"}\n{"role": "assistant", "content": "hello"}\n')
    assert [message["_id"] for message in load_session(session)] == ["m00000", "m00001"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"role": "robot", "content": "hi"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        load_session(bad)
    probes = tmp_path / "probes.jsonl"
    probes.write_text('{"session": "demo", "question": "q?", "answer": "a", "query": "q", "extra": 1}\n')
    assert load_probes(probes)[0].answer == "a"
    probes.write_text('{"session": "demo", "question": "q?", "query": "q"}\n')
    with pytest.raises(ValueError, match="answer"):
        load_probes(probes)
