"""``foldgate bench my_chats`` runs end to end at a tiny size and writes what it promises: every planted fact found
first, from the chat it was said in, and nothing of another person's private chat. No timing is asserted."""

from __future__ import annotations

import json

import pytest

from evals import bench_my_chats
from evals.cli import available_benchmarks, benchmark_summaries


@pytest.mark.timeout(120)
def test_my_chats_finds_each_planted_fact_where_it_was_said_and_leaks_nothing(tmp_path, redis_url):
    assert "my_chats" in available_benchmarks() and "my chats" in benchmark_summaries()["my_chats"]
    assert bench_my_chats.main(tmp_path, redis_url=redis_url, chats=6, messages=3_000, runs=1) == 0
    result = json.loads((tmp_path / "bench_my_chats.json").read_text())
    assert result["chats"] == 6 and result["messages"] == 3_000 and result["leaked_hits"] == 0
    assert [(fact["rank"], fact["found_in"]) for fact in result["facts"]] == [
        (1, fact["said_in"]) for fact in result["facts"]
    ]
    assert set(result["warm_by_kind_ms"]) >= {"planted fact", "date phrase", "regex", "no hit"}
    assert 0 < result["warm_ms"]["p50"] <= result["warm_ms"]["p99"] and result["cold_ms"] > 0
    assert "| warm, every query |" in (tmp_path / "bench_my_chats.md").read_text()
