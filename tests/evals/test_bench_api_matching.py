"""``foldgate bench api_matching`` runs in a tiny configuration and reports what it promises.

No timing is asserted (speed belongs to the benchmark itself): what is checked is that the request it
times continues the stored session in one round trip, and that the edited one forks where it was edited.
"""

from __future__ import annotations

import json

import pytest

from evals import bench_api_matching
from evals.cli import available_benchmarks


@pytest.mark.timeout(60)
def test_api_matching_times_the_hashing_and_the_lookup_apart(tmp_path, redis_url):
    assert "api_matching" in available_benchmarks()
    assert bench_api_matching.main(tmp_path, redis_url=redis_url, sizes=(101, 1_001), runs=3, edit_runs=2) == 0
    result = json.loads((tmp_path / "bench_api_matching.json").read_text())
    assert [row["messages"] for row in result["rows"]] == [101, 1_001]
    for row in result["rows"]:
        assert row["index_entries"] == row["messages"] // 2
        assert row["match"] == {"kind": "continues", "position": row["messages"]}
        assert row["edit_match"] == {"kind": "forks", "position": 3}
        assert row["lookup_round_trips"] == 1
        for part in ("hash_ms", "lookup_ms", "together_ms", "edit_lookup_ms"):
            assert 0 <= row[part]["p50"] <= row[part]["p99"]
    assert set(result["verdict"]) == {"lookup_goal_met", "together_goal_met"}
    assert "| 1,001 |" in (tmp_path / "bench_api_matching.md").read_text()
