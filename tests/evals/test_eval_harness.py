"""Smoke runs of ``foldgate eval compaction``/``decay`` and ``foldgate bench`` on the committed 50K fixtures."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from evals import bench_compress
from evals.compaction_eval import (
    Compaction,
    Probe,
    ProbeResult,
    Run,
    Uncompacted,
    figure_of,
    load_probes,
    load_sessions,
    make_policy,
    markdown_report,
    plot,
    run_eval,
    write_report,
)
from gateway import cli
from gateway.progress import Progress, plural
from tests.fakes.paths import EVAL_DATA, REPO

DATA = EVAL_DATA
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
        # Every planted fact stands beside its subject in its own message, so the whole session is fully attributed.
        assert whole["attributed_recall"] == 1.0 and whole["unattributed"] == []
        assert whole["retained_tokens"] == whole["tokens_before"]
        cut = by_key[(session, "head-tail")]
        assert cut["retained_tokens"] < cut["tokens_before"] / 4
        assert cut["closed_book_recall"] < 0.5 < cut["recovery_recall"]
        for name in REAL_POLICIES:
            run = by_key[(session, name)]
            assert run["retained_tokens"] <= run["tokens_before"]
            assert run["recovery_recall"] >= run["closed_book_recall"] >= run["attributed_recall"] > 0
            assert run["attributed_hits"] + len(run["unattributed"]) == run["closed_book_hits"]
            assert run["cpu_seconds"] >= 0 and run["wall_seconds"] >= 0
    assert set(document["policies"]) == {policy.name for policy in policies}
    assert document["summarizer"] == "deterministic"
    for row in document["policies"].values():
        assert row["attributed_hits"] <= row["closed_book_hits"]
        assert all(attributed <= closed for _, closed, _, attributed in row["by_kind"].values())

    markdown = paths["markdown"].read_text(encoding="utf-8")
    assert "| night-50k-s7 | uncompacted |" in markdown and "head-tail" in markdown
    assert "attributed recall" in markdown and "uncompacted attributed" in markdown
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


@pytest.mark.skipif(not HAS_COMPRESSOR, reason="agent.context_compressor is not in this tree")
def test_cli_eval_decay_compacts_a_small_night_twice_and_reports_attributed_recall_by_quarter(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 50K session at a 40K window: the replay passes the 20K threshold again and again."""
    out = tmp_path / "out"
    code = cli.main(
        [
            "eval",
            "decay",
            "--sessions",
            str(DATA / "night-50k-s7.jsonl"),
            "--probes",
            str(DATA / "probes.jsonl"),
            "--context-length",
            "40000",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "# Decay eval (context window 40,000 tokens)" in printed and "## night-50k-s7 × lean" in printed
    document = json.loads((out / "decay_eval.json").read_text(encoding="utf-8"))
    assert [run["policy"] for run in document["runs"]] == ["legacy", "lean"]
    for run in document["runs"]:
        assert run["compactions"] >= 2
        assert run["checkpoints"][0]["tokens_after"] < run["checkpoints"][0]["tokens_before"]
        for point in run["checkpoints"]:
            assert len(point["quarters"]) == 4
            for quarter in point["quarters"]:
                assert 0 <= quarter["attributed"] <= quarter["literal"] <= quarter["probes"]
        first = run["checkpoints"][-1]["quarters"][0]
        assert first["probes"] > 0  # the first quarter's facts are scored after the last compaction
        replayed = [sum(quarter["probes"] for quarter in point["quarters"]) for point in run["checkpoints"]]
        assert replayed == sorted(replayed)  # later compactions have seen more of the night
    markdown = (out / "decay_eval.md").read_text(encoding="utf-8")
    assert "| compaction | after message |" in markdown and "% of " in markdown


def test_the_stand_in_summarizer_writes_every_section_within_budget_and_updates_its_notes() -> None:
    import asyncio

    from agent.compaction.summarizer import Summarizer
    from agent.compaction.summary_prompt import build_request, missing_sections
    from agent.tokens import count_text
    from evals.stand_in_summarizer import StandInSummarizer

    turns = [
        "[m1] user: fix the ledger cutoff, and never push directly to main.",
        "[m2] assistant: I fixed it in src/app/ledger/cutoff.py. Committed it as 9f3c2a1.",
        "[m3] tool result (terminal): Traceback (most recent call last):\nKeyError: 'customer_ref' [E7139]",
        "[m4] user: we go with Redis streams instead of Kafka.",
    ]
    entries = [type("Entry", (), {"text": text, "tokens": 20})() for text in turns]
    stand_in = StandInSummarizer()
    assert isinstance(stand_in, Summarizer)
    request = build_request(entries, budget_tokens=400, previous_summary=None, focus_topic=None)
    notes = asyncio.run(stand_in.call_llm(task="compression", messages=request, max_tokens=540))
    assert missing_sections(notes) == [] and count_text(notes) <= 540
    assert "[m1] fix the ledger cutoff, and never push directly to main." in notes
    assert "src/app/ledger/cutoff.py" in notes and "E7139" in notes and "Redis streams instead of Kafka" in notes
    assert asyncio.run(stand_in.call_llm(task="compression", messages=request, max_tokens=540)) == notes
    later = build_request(entries[3:], budget_tokens=400, previous_summary=notes, focus_topic=None)
    updated = asyncio.run(stand_in.call_llm(task="compression", messages=later, max_tokens=540))
    assert "[m1] fix the ledger cutoff" in updated  # the goal and earlier items carry over
    tight = asyncio.run(stand_in.call_llm(task="compression", messages=request, max_tokens=120))
    assert missing_sections(tight) == [] and count_text(tight) <= 120


@pytest.mark.skipif(not HAS_COMPRESSOR, reason="agent.context_compressor is not in this tree")
def test_cli_eval_compaction_with_the_stand_in_summarizer_says_who_wrote_the_notes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(
        [
            *EVAL_ARGS,
            "--policies",
            "uncompacted,lean",
            "--context-length",
            "200000",
            "--summarizer",
            "stand-in",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    assert "Summarizer: stand-in." in capsys.readouterr().out
    document = json.loads((tmp_path / "compaction_eval.json").read_text(encoding="utf-8"))
    lean = next(run for run in document["runs"] if run["policy"] == "lean")
    assert document["summarizer"] == "stand-in"
    assert lean["stats"]["summarizer"] == "stand-in" and lean["summarizer_calls"] >= 1


async def test_the_configured_summarizer_is_the_one_the_gateway_builds(tmp_path: Path) -> None:
    from agent.compaction.summarizer import LLMSummarizer
    from evals.compaction_eval import open_summarizer, summarizer_label

    config = tmp_path / "config.yaml"
    config.write_text(
        f"gateway:\n  home: {tmp_path / 'home'}\nmodel:\n  provider: custom\n  name: eval-main\n"
        "  base_url: http://127.0.0.1:9/v1\n  api_key: unused\n"
        "auxiliary:\n  compression:\n    model: eval-notes\n    context_length: 64000\n"
    )
    async with open_summarizer("configured", str(config)) as summarizer:  # built and closed, never called
        assert isinstance(summarizer, LLMSummarizer)
        assert (summarizer.name, summarizer.context_length) == ("eval-notes", 64_000)
        assert summarizer_label("configured", summarizer) == "configured (eval-notes)"
    async with open_summarizer("deterministic") as none:
        assert none is None and summarizer_label("deterministic", none) == "deterministic"


def test_cli_eval_refuses_unknown_policies_and_missing_sessions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
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
        cli.main(
            ["eval", "compaction", "--sessions", str(tmp_path / "nothing"), "--probes", probes, "--out", str(tmp_path)]
        )
        == 2
    )
    assert "no session file" in capsys.readouterr().err


def test_cli_bench_refuses_an_unknown_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bench", "nonsense"]) == 2
    assert "compress" in capsys.readouterr().err


@pytest.mark.skipif(not HAS_COMPRESSOR, reason="agent.context_compressor is not in this tree")
def test_bench_compress_reports_medians_and_ratios_side_by_side(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
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
    from agent.engine_registry import register_context_engine, unregister_context_engine

    class LastTwenty:
        """A registered engine that keeps the system prompt and the last 20 messages."""

        def __init__(self, model: str, context_length: int) -> None:
            self.last_compaction = None

        async def compress(self, messages: list[dict], force: bool = False) -> list[dict]:
            self.last_compaction = {
                "outcome": "compacted",
                "calls": 3,
                "replaced_ids": [m["_id"] for m in messages[1:-20]],
            }
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


# --- the eval without matplotlib, progress, and the chart -----------------------------------------

REPO = REPO
EVAL_ARGS = [
    "eval",
    "compaction",
    "--sessions",
    str(DATA / "night-50k-s7.jsonl"),
    "--probes",
    str(DATA / "probes.jsonl"),
]


def _extra_with_matplotlib() -> str:
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    return next(name for name, requirements in extras.items() if any(r.startswith("matplotlib") for r in requirements))


def _run_cli(argv: list[str], cwd: Path, *, prelude: str = "") -> subprocess.CompletedProcess[str]:
    """``foldgate ARGV`` in a fresh interpreter, stdout and stderr to pipes (so not a terminal)."""
    code = f"{prelude}\nimport sys\nfrom gateway.cli import main\nsys.exit(main({argv!r}))"
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def test_eval_without_matplotlib_writes_the_numbers_and_says_how_to_get_the_plot(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "compaction_eval.png").write_bytes(b"a plot of an earlier run")
    # None in sys.modules makes every `import matplotlib` fail, as on a machine without it.
    done = _run_cli([*EVAL_ARGS, "--out", str(out)], tmp_path, prelude="import sys; sys.modules['matplotlib'] = None")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert json.loads((out / "compaction_eval.json").read_text(encoding="utf-8"))["runs"]
    assert "| night-50k-s7 | uncompacted |" in (out / "compaction_eval.md").read_text(encoding="utf-8")
    assert not (out / "compaction_eval.png").exists()  # no stale plot beside new numbers
    hints = [line for line in done.stderr.splitlines() if "matplotlib" in line]
    assert len(hints) == 1 and f"pip install 'foldgate[{_extra_with_matplotlib()}]'" in hints[0]
    assert "plot:" not in done.stdout


def test_eval_progress_on_a_pipe_is_a_few_plain_lines(tmp_path: Path) -> None:
    done = _run_cli([*EVAL_ARGS, "--policies", "uncompacted,search-only", "--out", str(tmp_path)], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stderr and "\x1b" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("compaction eval:")]
    assert 2 <= len(lines) <= 12
    assert lines[-1] == "compaction eval: 2/2 runs (100%)"


@pytest.mark.skipif(not HAS_COMPRESSOR, reason="agent.context_compressor is not in this tree")
def test_bench_progress_on_a_pipe_is_a_few_plain_lines(tmp_path: Path) -> None:
    code = (
        f"from evals import bench_compress\n"
        f"raise SystemExit(bench_compress.main({str(tmp_path)!r}, sizes=(5_000, 8_000), runs=3))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("bench compress:")]
    assert 2 <= len(lines) <= 12  # 24 compress() calls, a line per tenth
    assert lines[-1].startswith("bench compress: 24/24 compress() calls (100%)")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_redraws_one_line_on_a_terminal_and_prints_tenths_elsewhere() -> None:
    pipe, terminal = io.StringIO(), _Terminal()
    for stream in (pipe, terminal):
        with Progress(1000, "message", stream, label="replay") as bar:
            for done in range(1, 1001):
                bar.update(done)
    assert "\r" not in pipe.getvalue()
    printed = pipe.getvalue().splitlines()
    # the first update says the work began, then a line per tenth
    assert printed[0] == "replay: 1/1,000 messages (0%)" and len(printed) == 11
    assert printed[-1] == "replay: 1,000/1,000 messages (100%)"
    shown = terminal.getvalue()
    assert shown.startswith("\r[") and shown.endswith("\n") and shown.count("\n") == 1
    assert "1,000/1,000 messages" in shown.rsplit("\r", 1)[1]


def test_progress_without_a_stream_prints_nothing_and_counts_read_right() -> None:
    bar = Progress(3, "run", None)
    bar.update()
    bar.close()
    assert plural(1, "word") == "1 word" and plural(2, "word") == "2 words" and plural(1_000, "run") == "1,000 runs"
    line = io.StringIO()
    with Progress(1, "session", line) as one:
        one.update(1)
    assert line.getvalue() == "1/1 session (100%)\n"


def _runs(tmp_sessions: dict[str, list[tuple[int | str, ...]]]) -> list[Run]:
    """Runs with given (policy, retained tokens, closed-book hits, recovered hits[, attributed hits]) of 10 probes
    each."""
    probe = Probe(session="s", question="q", answer="a", query="q")
    made = []
    for session, rows in tmp_sessions.items():
        for policy, retained, closed, recovered, *attributed in rows:
            tied = attributed[0] if attributed else 0
            results = [ProbeResult(probe, n < closed, n < recovered, attributed=n < tied) for n in range(10)]
            made.append(Run(session, policy, 50_000, 100, retained, 10, 0, results, 0.0, 0.0, 0.0, 0, {}))
    return made


def test_the_chart_keeps_sessions_apart_and_every_marker_visible() -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    runs = _runs(
        {
            "small": [("uncompacted", 49_502, 10, 10), ("legacy", 49_502, 10, 10), ("lean", 11_730, 8, 10)],
            "large": [("uncompacted", 496_886, 10, 10), ("legacy", 112_274, 9, 10), ("lean", 18_900, 9, 10)],
        }
    )
    figure = figure_of(runs, 1_000_000)
    try:
        panels = [axis for axis in figure.axes if axis.get_visible()]
        assert [axis.get_title().split()[0] for axis in panels] == ["small", "large"]
        for axis, session in zip(panels, ("small", "large")):
            assert axis.get_xscale() == "log"
            kept = {run.retained_tokens for run in runs if run.session == session}
            ticks = axis.get_xticks()
            assert all(any(abs(tick / value - 1) < 0.25 for tick in ticks) for value in kept)
            # no line joins two policies (or sessions): each is one point, or a stem at one x
            for line in axis.get_lines():
                assert len(set(line.get_xdata())) == 1
            # markers of equal data are drawn apart: the uncompacted and legacy rings of "small" do not coincide
            centres = {
                tuple(line.get_transform().transform((line.get_xdata()[0], line.get_ydata()[0])).round(1))
                for line in axis.get_lines()
                if len(line.get_xdata()) == 1 and line.get_markerfacecolor() == "none"
            }
            assert len(centres) == 3
        labels = [text.get_text() for text in figure.legends[0].get_texts()]
        assert {"uncompacted", "legacy", "lean"} <= set(labels)
        assert any("closed-book" in label for label in labels) and any("recovery" in label for label in labels)
    finally:
        plt.close(figure)


def test_the_png_keeps_its_labels_inside(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib import image

    runs = _runs({"only": [("uncompacted", 49_502, 10, 10), ("lean", 11_730, 8, 10)]})
    plot(runs, tmp_path / "chart.png", 1_000_000)
    pixels = image.imread(tmp_path / "chart.png")
    # a tight bounding box leaves only a thin white margin: the outermost rows and columns are blank paper
    assert (
        pixels[:2].min() > 0.9 and pixels[-2:].min() > 0.9 and pixels[:, :2].min() > 0.9 and pixels[:, -2:].min() > 0.9
    )


def test_the_by_kind_table_says_which_number_is_which(monkeypatch: pytest.MonkeyPatch) -> None:
    from evals import compaction_eval

    runs = _runs({"s": [("uncompacted", 50_000, 10, 10, 10), ("lean", 9_000, 7, 10, 4)]})
    monkeypatch.setattr(compaction_eval, "RECOVERY_HITS", 1)
    text = markdown_report(runs, 1_000_000)
    header = next(line for line in text.splitlines() if line.startswith("| kind |"))
    assert "uncompacted closed-book | uncompacted attributed | uncompacted recovery" in header
    assert "lean closed-book | lean attributed | lean recovery" in header
    assert "| fact | 10 | 100% (10/10) | 100% (10/10) | 100% (10/10) | 70% (7/10) | 40% (4/10) | 100% (10/10) |" in text
    assert "top 1 search hit " in text
