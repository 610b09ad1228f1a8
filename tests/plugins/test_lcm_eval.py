"""The ``lcm`` engine in the compaction eval: ``--policies lcm`` runs, and its own tools recover what it folded."""

from __future__ import annotations

import json
from pathlib import Path

from evals.compaction_eval import load_probes, load_sessions, make_policy, run_eval
from gateway import cli
from tests.fakes.paths import EVAL_DATA

DATA = EVAL_DATA


def test_cli_eval_accepts_the_lcm_policy(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    code = cli.main(
        [
            "eval",
            "compaction",
            "--sessions",
            str(DATA),
            "--probes",
            str(DATA / "probes.jsonl"),
            "--policies",
            "lean,lcm",
            "--context-length",
            "200000",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    assert "| night-50k-s7 | lcm | compacted |" in capsys.readouterr().out
    runs = json.loads((out / "compaction_eval.json").read_text(encoding="utf-8"))["runs"]
    by_key = {(run["session"], run["policy"]): run for run in runs}
    for session in ("night-50k-s7", "night-50k-s8"):
        lcm, lean = by_key[(session, "lcm")], by_key[(session, "lean")]
        assert lcm["retained_tokens"] < lcm["tokens_before"] / 2
        assert lcm["recovery_recall"] == 1.0 and lcm["closed_book_recall"] >= lean["closed_book_recall"]
        # The index costs little next to what it replaces.
        assert lcm["retained_tokens"] - lean["retained_tokens"] < 0.02 * lcm["tokens_before"]


async def test_lcm_grep_then_lcm_expand_recovers_every_probe_answer() -> None:
    """What the harness's recovery score approximates with one search, done with the engine's own tools."""
    sessions = load_sessions(str(DATA))
    probes = load_probes(DATA / "probes.jsonl")
    policy = make_policy("lcm", 200_000)
    for name, messages in sessions.items():
        await run_eval({name: messages}, probes, [policy])
        engine = policy.engine
        assert engine.ledger.records and engine.view.history is None
        for probe in (p for p in probes if p.session == name):
            hits = json.loads(await engine.handle_tool_call("lcm_grep", {"pattern": probe.query, "limit": 4}))["hits"]
            expanded = json.loads(await engine.handle_tool_call("lcm_expand", {"ids": [hit["id"] for hit in hits]}))
            assert any(
                probe.answer in message["content"] or probe.answer in json.dumps(message.get("tool_calls"))
                for message in expanded["messages"]
            ), probe.question
