"""``foldgate bench people_memory`` runs end to end at a tiny size and reports every row it promises: each read
case beside its PING and meta() baseline, each fold size at each memory size, and a memory that keeps its size
from one compaction to the next. No timing is asserted."""

from __future__ import annotations

import json

import pytest

from evals import bench_people_memory
from evals.cli import available_benchmarks, benchmark_summaries

READ_COLUMNS = {"ping", "meta", "hgetall", "entries", "steady", "first"}
WRITE_COLUMNS = {"fold_records", "commit_baseline", "commit_memory", "publish"}


@pytest.mark.timeout(120)
def test_people_memory_reports_every_read_and_write_row(tmp_path, redis_url):
    assert "people_memory" in available_benchmarks()
    assert "people's memory" in benchmark_summaries()["people_memory"]
    options = {"entries": (3, 20), "group": (20, 5), "folds": (20, 60), "messages": 5, "compactions": 2}
    assert bench_people_memory.main(tmp_path, redis_url=redis_url, **options) == 0
    result = json.loads((tmp_path / "bench_people_memory.json").read_text())

    assert [row["case"] for row in result["read"]] == [
        "private, 3 entries",
        "private, 20 entries",
        "group, 20 speaker's + 5 group's",
        "group, speaker has 20 private + 3 here",
    ]
    assert [row["entries_parsed"] for row in result["read"]] == [3, 20, 25, 26]
    for row in result["read"]:
        assert set(row["ms"]) == READ_COLUMNS
        assert all(0 < cell["p50"] <= cell["p99"] for cell in row["ms"].values())
        assert row["tokens_steady"] > 0 and row["shown"] > 0  # the block carried entries
    private_20 = result["read"][1]
    assert private_20["tokens_steady"] <= result["max_tokens"] and private_20["left_out"] == 0

    assert [(row["folded_messages"], row["entries_kept"]) for row in result["write"]] == [
        (20, 3),
        (20, 20),
        (60, 3),
        (60, 20),
    ]
    for row in result["write"]:
        assert set(row["ms"]) == WRITE_COLUMNS and row["compactions"] == 2
        assert row["records"] >= 5 and row["new_entries"] == row["records"]  # the self-statements were kept
        assert row["entries_after"] == row["entries_kept"]  # what each publish added was removed again

    markdown = (tmp_path / "bench_people_memory.md").read_text()
    for row in result["read"]:
        assert f"| {row['case']} |" in markdown
    assert markdown.count("\n| 60 |") == 2
