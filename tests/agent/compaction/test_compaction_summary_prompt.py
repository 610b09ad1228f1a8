"""Phase 3's request: sections, the update instruction, the transcript the summarizer reads, pieces."""

from agent.compaction.prune import PRUNED_TOOL_OUTPUT, prune_tool_outputs
from agent.compaction.summarizer import split_entries
from agent.compaction.summary_prompt import (
    SECTION_HEADINGS,
    UPDATE_INSTRUCTION,
    TranscriptEntry,
    build_request,
    clean_summary,
    missing_sections,
    transcript_entries,
)
from agent.messages import tool_names_by_call_id
from agent.tokens import count_message
from tests.fakes.histories import Transcript

VALID = "\n".join(f"{heading}\n- x" for heading in SECTION_HEADINGS)


def test_all_sections_present_is_valid_and_heading_variants_are_accepted():
    assert missing_sections(VALID) == []
    assert missing_sections(VALID.replace("Constraints & Preferences", "Constraints and preferences")) == []
    assert missing_sections(VALID.replace("## Key Decisions", "## Decisions")) == ["## Key Decisions"]
    assert len(missing_sections("just some prose")) == 7


def test_clean_summary_strips_fences_and_our_prefix():
    assert clean_summary(f"```markdown\n{VALID}\n```") == VALID
    assert clean_summary(f"[CONTEXT COMPACTION] {VALID}") == VALID


def test_first_request_asks_for_notes_and_later_ones_to_update_the_previous_notes():
    entries = [TranscriptEntry("[m-4] user: hi", 10)]
    first = build_request(entries, budget_tokens=2000, previous_summary=None, focus_topic=None)
    assert first[0]["role"] == "system" and "## Critical Context" in first[0]["content"]
    assert "not instructions" in first[0]["content"]
    assert UPDATE_INSTRUCTION not in first[1]["content"] and "[m-4] user: hi" in first[1]["content"]
    later = build_request(entries, budget_tokens=2000, previous_summary="## Goal\nold", focus_topic="billing")
    assert "<previous_notes>\n## Goal\nold\n</previous_notes>" in later[1]["content"]
    assert UPDATE_INSTRUCTION in later[1]["content"] and "billing" in later[1]["content"]


def test_transcript_shows_ids_roles_tool_names_arguments_and_pruned_outputs():
    t = Transcript(system=None)
    t.user("read the config")
    t.call("read_file", {"path": "conf/app.yaml"}, "k: v\n" * 100)
    pruned = prune_tool_outputs(t.messages)
    entries = transcript_entries(
        pruned, [count_message(m) for m in t.messages], tool_names_by_call_id(t.messages), 10_000
    )
    text = "\n".join(entry.text for entry in entries)
    assert "[m-1] user: read the config" in text
    assert '-> calls read_file({"path": "conf/app.yaml"})' in text
    assert f"[m-3] tool result (read_file): {PRUNED_TOOL_OUTPUT} (was 500 chars)" in text


def test_an_oversized_message_is_cut_in_the_middle_with_a_fetch_hint():
    t = Transcript(system=None)
    t.user("START " + "word " * 5000 + " END")
    entries = transcript_entries(t.messages, [count_message(t.messages[0])], {}, 500)
    assert entries[0].tokens == 506
    assert "START" in entries[0].text and "END" in entries[0].text
    assert 'session_fetch(ids=["m-1"])' in entries[0].text


def test_pieces_respect_capacity_and_keep_order():
    entries = [TranscriptEntry(str(i), 40) for i in range(10)]
    pieces = split_entries(entries, 100)
    assert [len(piece) for piece in pieces] == [2, 2, 2, 2, 2]
    assert [e.text for piece in pieces for e in piece] == [str(i) for i in range(10)]
