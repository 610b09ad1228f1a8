"""``foldgate eval decay``: compact at the threshold, go on from the compacted list, score the facts by their age."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from evals.compaction_eval import Probe
from evals.decay_eval import before_model_call, markdown_report, probe_positions, quarter_of, replay
from gateway import cli
from tests.fakes.paths import EVAL_DATA

DATA = EVAL_DATA


@dataclass
class Stats:
    outcome: str = "compacted"
    summarizer: str = "deterministic"
    calls: int = 0


@dataclass
class KeepLastTwo:
    """A test-only compressor: past ``threshold_tokens`` it keeps the first message, a note, and the last two."""

    threshold_tokens: int
    note: str = "notes: the ledger cutoff was fixed in 9f3c2a1"
    seen: list[list[Any]] = field(default_factory=list)
    last_compaction: Stats | None = None

    def should_compress(self, tokens: int) -> bool:
        return tokens >= self.threshold_tokens

    async def compress(self, messages: list[dict]) -> list[dict]:
        self.seen.append([message.get("_id") for message in messages])
        self.last_compaction = Stats()
        return [messages[0], {"role": "user", "content": self.note}, *messages[-2:]]


def night(turns: int) -> list[dict]:
    messages = [{"_id": "m0", "role": "system", "content": "You are a coding agent."}]
    for turn in range(1, turns + 1):
        messages.append({"_id": f"m{len(messages)}", "role": "user", "content": f"turn {turn}: " + "word " * 200})
        messages.append({"_id": f"m{len(messages)}", "role": "assistant", "content": f"reply {turn}"})
    return messages


def test_quarters_split_the_session_by_message_position() -> None:
    assert [quarter_of(position, 8) for position in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert quarter_of(99, 100) == 3 and quarter_of(0, 1) == 0


def test_compaction_waits_for_the_tool_results_of_a_round() -> None:
    messages = [{"role": "user"}, {"role": "assistant"}, {"role": "tool"}, {"role": "tool"}, {"role": "assistant"}]
    assert [before_model_call(messages, position) for position in range(5)] == [True, False, False, True, True]


def test_probes_are_placed_by_message_id_or_by_the_first_message_holding_the_answer() -> None:
    messages = night(3)
    messages[3]["content"] += " 9f3c2a1"
    by_id = Probe("s", "q?", "reply 2", "q", message_id="m4")
    by_answer = Probe("s", "q?", "9f3c2a1", "q")
    nowhere = Probe("s", "q?", "absent", "q")
    assert probe_positions(messages, [by_id, by_answer, nowhere]) == [(by_id, 4), (by_answer, 3)]


async def test_the_replay_continues_from_the_compacted_list_and_scores_only_replayed_facts() -> None:
    messages = night(8)  # 17 messages
    early = Probe("s", "q?", "turn 1:", "q", message_id="m1", subject=("turn",))
    late = Probe("s", "q?", "reply 8", "q", message_id="m16", subject=("reply",))
    kept = Probe("s", "q?", "9f3c2a1", "q", message_id="m2", subject=("ledger cutoff",))
    compressor = KeepLastTwo(threshold_tokens=700)
    run = await replay("s", messages, [early, late, kept], "fake", compressor)
    assert len(run.checkpoints) >= 2
    # The second compaction saw the first one's output, not the whole session so far.
    assert compressor.seen[1][:2] == ["m0", None]
    for point in run.checkpoints:
        first = point.quarters[0]
        assert first.probes == 2  # "early" and "kept" (message m2 is in the first quarter); never "late" before m16
        assert first.literal == first.attributed == 1  # "turn 1:" is gone; the note keeps 9f3c2a1 beside its subject
        assert point.tokens_after < point.tokens_before and point.summary_by == "deterministic"
    assert sum(score.probes for score in run.checkpoints[-1].quarters) == (
        3 if run.checkpoints[-1].replayed > 16 else 2
    )
    text = markdown_report([run], 4_000, "deterministic")
    assert "| s | fake |" in text and "## s × fake" in text and "first quarter" in text


def test_cli_decay_refuses_what_it_cannot_replay(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "eval",
        "decay",
        "--sessions",
        str(DATA / "night-50k-s7.jsonl"),
        "--probes",
        str(DATA / "probes.jsonl"),
        "--out",
        str(tmp_path),
    ]
    assert cli.main([*args, "--policies", "lean,uncompacted"]) == 2
    assert "legacy and lean" in capsys.readouterr().err
    assert cli.main([*args, "--summarizer", "configured", "--config", str(tmp_path / "none.yaml")]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith("foldgate eval: --summarizer configured:")
    assert not (tmp_path / "decay_eval.json").exists()


def test_decay_json_has_a_row_per_compaction(tmp_path: Path) -> None:
    assert (
        cli.main(
            [
                "eval",
                "decay",
                "--sessions",
                str(DATA / "night-50k-s8.jsonl"),
                "--probes",
                str(DATA / "probes.jsonl"),
                "--policies",
                "lean",
                "--context-length",
                "30000",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    document = json.loads((tmp_path / "decay_eval.json").read_text(encoding="utf-8"))
    assert document["context_length"] == 30_000 and document["summarizer"] == "deterministic"
    [run] = document["runs"]
    assert run["compactions"] == len(run["checkpoints"]) >= 2
    numbers = [point["number"] for point in run["checkpoints"]]
    assert numbers == list(range(1, len(numbers) + 1))
    assert all(len(point["quarters"]) == 4 for point in run["checkpoints"])
