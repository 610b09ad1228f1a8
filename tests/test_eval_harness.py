"""Smoke runs of ``foldgate eval compaction`` and ``foldgate bench`` on the committed 50K fixtures."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from evals import bench_compress
from evals.compaction_eval import Compaction, Uncompacted, load_probes, load_sessions, make_policy, run_eval, write_report
from gateway import cli

DATA = Path(__file__).resolve().parents[1] / "evals" / "fixtures" / "data"
HAS_COMPRESSOR = importlib.util.find_spec("agent.context_compressor") is not None
REAL_POLICIES = ["legacy", "lean"] if HAS_COMPRESSOR else []


@dataclass
class KeepHeadAndTail:
    """A test-only policy: system prompt plus the last 10 messages, the middle simply dropped."""

    name: str = "head-tail"

    async def compact(self, messages: list[dict]) -> Compaction:
        return Compaction(messages[:1] + messages[-10:], summarizer_calls=0)


async def test_smoke_run_on_committed_fixtures_writes_json_markdown_and_plot(tmp_path: Path) -> None:
    sessions = load_sessions(str(DATA))
    probes = load_probes(DATA / "probes.jsonl")
    assert len(sessions) >= 2 and probes
    policies = [Uncompacted(), KeepHeadAndTail()] + [make_policy(name, 1_000_000) for name in REAL_POLICIES]
    runs = await run_eval(sessions, probes, policies)
    paths = write_report(runs, tmp_path, 1_000_000)

    document = json.loads(paths["json"].read_text(encoding="utf-8"))
    by_key = {(run["session"], run["policy"]): run for run in document["runs"]}
    assert len(by_key) == len(sessions) * len(policies)
    for session in sessions:
        whole = by_key[(session, "uncompacted")]
        assert whole["closed_book_recall"] == 1.0 and whole["recovery_recall"] == 1.0
        assert whole["retained_tokens"] == whole["tokens_before"]
        cut = by_key[(session, "head-tail")]
        assert cut["retained_tokens"] < cut["tokens_before"] / 4
        assert cut["closed_book_recall"] < 0.5 < cut["recovery_recall"]
        for name in REAL_POLICIES:
            run = by_key[(session, name)]
            assert run["retained_tokens"] <= run["tokens_before"]
            assert run["recovery_recall"] >= run["closed_book_recall"]
            assert run["cpu_seconds"] >= 0 and run["wall_seconds"] >= 0
    assert set(document["policies"]) == {policy.name for policy in policies}

    markdown = paths["markdown"].read_text(encoding="utf-8")
    assert "| night-50k-s7 | uncompacted |" in markdown and "head-tail" in markdown
    assert "## Why facts left the context" in markdown
    assert paths["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_eval_compaction_writes_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    session = DATA / "night-50k-s7.jsonl"
    code = cli.main(
        [
            "eval",
            "compaction",
            "--sessions",
            str(session),
            "--probes",
            str(DATA / "probes.jsonl"),
            "--policies",
            ",".join(["uncompacted", "search-only"] + REAL_POLICIES),
            "--out",
            str(out),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "| night-50k-s7 | search-only |" in printed
    document = json.loads((out / "compaction_eval.json").read_text(encoding="utf-8"))
    assert [run["session"] for run in document["runs"]] == ["night-50k-s7"] * (2 + len(REAL_POLICIES))
    search_only = next(run for run in document["runs"] if run["policy"] == "search-only")
    assert search_only["closed_book_recall"] == 0.0 and search_only["recovery_recall"] > 0.8
    assert (out / "compaction_eval.md").is_file() and (out / "compaction_eval.png").is_file()


def test_cli_eval_refuses_unknown_policies_and_missing_sessions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    probes = str(DATA / "probes.jsonl")
    assert (
        cli.main(
            [
                "eval",
                "compaction",
                "--sessions",
                str(DATA),
                "--probes",
                probes,
                "--policies",
                "uncompacted,no_such_engine",
                "--out",
                str(tmp_path),
            ]
        )
        == 2
    )
    assert "no_such_engine" in capsys.readouterr().err
    assert (
        cli.main(["eval", "compaction", "--sessions", str(tmp_path / "nothing"), "--probes", probes, "--out", str(tmp_path)]) == 2
    )
    assert "no session file" in capsys.readouterr().err


def test_cli_bench_refuses_an_unknown_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bench", "nonsense"]) == 2
    assert "compress" in capsys.readouterr().err


@pytest.mark.skipif(not HAS_COMPRESSOR, reason="agent.context_compressor is not in this tree")
def test_bench_compress_reports_medians_and_ratios_side_by_side(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_compress.main(tmp_path, sizes=(10_000, 30_000), runs=1) == 0
    rows = json.loads((tmp_path / "bench_compress.json").read_text(encoding="utf-8"))["rows"]
    assert {(row["tail_mode"], row["tokens_ratio"] > 1.5) for row in rows} == {
        ("lean", False),
        ("lean", True),
        ("legacy", False),
        ("legacy", True),
    }
    for row in rows:
        assert row["cpu_seconds_warm"] >= 0 and row["cpu_seconds_cold"] >= 0 and row["retained_tokens"] > 0
    assert "| lean |" in capsys.readouterr().out


async def test_an_engine_registered_by_name_is_evaluated_like_the_built_in_policies() -> None:
    from agent.context_engine import register_context_engine, unregister_context_engine

    class LastTwenty:
        """A registered engine that keeps the system prompt and the last 20 messages."""

        def __init__(self, model: str, context_length: int) -> None:
            self.last_compaction = None

        async def compress(self, messages: list[dict], force: bool = False) -> list[dict]:
            self.last_compaction = {"outcome": "compacted", "calls": 3, "replaced_ids": [m["_id"] for m in messages[1:-20]]}
            return messages[:1] + messages[-20:]

    register_context_engine("eval_last_twenty", LastTwenty)
    try:
        policy = make_policy("eval_last_twenty", 1_000_000)
        sessions = load_sessions(str(DATA / "night-50k-s7.jsonl"))
        probes = load_probes(DATA / "probes.jsonl")
        [run] = await run_eval(sessions, probes, [policy])
    finally:
        unregister_context_engine("eval_last_twenty")
    assert run.policy == "eval_last_twenty" and run.summarizer_calls == 3
    assert run.messages_after == 21 and run.removed == run.messages_before - 21
    assert run.stats["replaced_ids"] == {"count": run.removed}
    assert run.recovered > run.closed_book
