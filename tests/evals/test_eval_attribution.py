"""Attributed recall: a kept answer counts only when what it is about stands on its line or the next one."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from evals.compaction_eval import (
    Compaction,
    Probe,
    evaluate,
    is_attributed,
    literal_and_attributed,
    load_probes,
    markdown_report,
    summarize,
)

SHA = Probe(
    "demo",
    "Which commit hardened the ledger cutoff?",
    "9f3c2a1",
    "commit ledger cutoff",
    "sha",
    "tool",
    subject=("ledger cutoff",),
)
PATH = Probe(
    "demo",
    "Which file implements the ledger cutoff?",
    "src/app/ledger/cutoff.py",
    "ledger cutoff file",
    "path",
    "user",
    subject=("ledger cutoff",),
)


def test_an_answer_beside_its_subject_is_attributed_and_one_in_a_far_bare_list_is_only_literal() -> None:
    same_line = "## Commits\n- 9f3c2a1 fix(ledger): harden the ledger cutoff\n- 1234abc chore: bump deps"
    next_line = "The ledger cutoff fix was committed as\n9f3c2a1\nand pushed."
    previous_line = "9f3c2a1\nthat was the Ledger-Cutoff hardening"
    far = (
        "## Ledger cutoff work\nWe looked at it.\nThen at the tests.\nThen at the logs.\n\n"
        "## Identifiers\n- 9f3c2a1, #4821"
    )
    for context in (same_line, next_line, previous_line):
        assert literal_and_attributed(SHA, context) == (True, True), context
    assert literal_and_attributed(SHA, far) == (True, False)
    assert literal_and_attributed(SHA, "nothing here") == (False, False)


def test_the_answer_never_attributes_itself() -> None:
    """A path that spells its own topic is still a bare path in a bare list."""
    bare = "## Relevant Files\n- src/app/api/views.py\n- src/app/ledger/cutoff.py\n- src/app/sync/state.py"
    assert literal_and_attributed(PATH, bare) == (True, False)
    assert literal_and_attributed(PATH, "- src/app/ledger/cutoff.py: where the ledger cutoff lives") == (True, True)


def test_subjects_match_across_case_and_separators_and_short_ones_only_as_words() -> None:
    assert is_attributed("E7139 in job ledger_cutoff_sync", "E7139", ("ledger cutoff",))
    assert is_attributed("File ledger/cutoff.py, in apply_ledger_cutoff\nE7139", "E7139", ("Ledger Cutoff",))
    assert not is_attributed("E7139 in debug mode", "E7139", ("bug",))
    assert is_attributed("E7139 is the bug we saw", "E7139", ("bug",))
    assert is_attributed("E7139 pushed straight to main", "E7139", ("push",))  # longer ones may sit inside a word
    # Any one occurrence beside its subject is enough.
    assert is_attributed("E7139\n\n\n\nledger cutoff: E7139", "E7139", ("ledger cutoff",))
    assert not is_attributed("E7139 ledger cutoff", "E7139", ())


def test_probes_load_their_subject_and_old_probe_files_fall_back_on_the_query(tmp_path: Path) -> None:
    probes = tmp_path / "probes.jsonl"
    records = [
        {
            "session": "demo",
            "question": "q?",
            "answer": "9f3c2a1",
            "query": "commit ledger cutoff",
            "subject": ["ledger cutoff"],
        },
        {"session": "demo", "question": "q?", "answer": "38733", "query": "payout warmup port staging"},
        {"session": "demo", "question": "q?", "answer": "x", "query": "q", "subject": "one phrase"},
    ]
    probes.write_text("".join(json.dumps(record) + "\n" for record in records))
    with_subject, old, single = load_probes(probes)
    assert with_subject.subject == with_subject.about == ("ledger cutoff",)
    assert old.subject == () and old.about == ("payout", "warmup", "staging")  # "port" names the kind of fact
    assert single.about == ("one phrase",)
    assert literal_and_attributed(old, "payout_warmup:\n  listen_port: 38733") == (True, True)


@dataclass
class BareList:
    """A test-only policy: the system prompt and a note that lists the identifiers far from their topics."""

    name: str = "bare-list"

    async def compact(self, messages: list[dict]) -> Compaction:
        note = (
            "## Progress\nWorked on the ledger cutoff and the invoice rounding.\n\nThen lunch.\n\nThen more tests.\n\n"
            "## Identifiers\n9f3c2a1\n#4821"
        )
        return Compaction(messages[:1] + [{"role": "user", "content": note}], summarizer_calls=0)


async def test_runs_report_attributed_counts_beside_literal_and_recovery() -> None:
    messages = [
        {"_id": "s", "role": "system", "content": "You are a coding agent."},
        {"_id": "u1", "role": "user", "content": "I opened PR #4821 for the invoice rounding change"},
        {"_id": "t1", "role": "user", "content": "9f3c2a1 fix(ledger): harden the ledger cutoff"},
    ]
    pr = Probe("demo", "Which PR?", "#4821", "PR invoice rounding", "pr", "user", subject=("invoice rounding",))
    run = await evaluate("demo", messages, [pr, SHA], BareList())
    assert (run.closed_book, run.attributed, run.recovered) == (2, 0, 2)
    record = run.as_dict()
    assert record["attributed_hits"] == 0 and record["attributed_recall"] == 0.0
    assert record["closed_book_recall"] == 1.0
    assert {item["answer"]: item["line"] for item in record["unattributed"]} == {"#4821": "#4821", "9f3c2a1": "9f3c2a1"}
    row = summarize([run])["bare-list"]
    assert row["attributed_hits"] == 0 and row["by_kind"]["sha"] == [1, 1, 1, 0]
    text = markdown_report([run], 1_000_000)
    assert "| 100% (2/2) | 0% (0/2) | 100% (2/2) |" in text
    assert "## Kept but not attributed" in text and "`9f3c2a1`" in text
