"""``foldgate bench api`` runs in a tiny configuration and reports what it promises.

No timing is asserted (speed belongs to the benchmark itself): what is checked is that every request was
answered both ways with the provider's reply, whole and streamed, and that the added time is the difference of
the two sides' percentiles.
"""

from __future__ import annotations

import json

import pytest

from evals import bench_api
from evals.cli import available_benchmarks


@pytest.mark.timeout(120)
def test_api_times_each_load_direct_and_through_foldgate(tmp_path, redis_url):
    assert "api" in available_benchmarks()
    code = bench_api.main(
        tmp_path,
        redis_url=redis_url,
        concurrency=(1, 3),
        requests={1: 4, 3: 6},
        warm_up=1,
        matching_sizes=(21,),
        settle=False,
    )
    assert code == 0
    result = json.loads((tmp_path / "bench_api.json").read_text())
    assert [(row["concurrency"], row["stream"]) for row in result["rows"]] == [
        (1, False),
        (1, True),
        (3, False),
        (3, True),
    ]
    for row in result["rows"]:
        for side in ("direct", "foldgate"):
            figures = row[side]
            assert figures["answered"] == row["requests"], figures["errors"]
            assert figures["errors"] == {} and figures["wrong_replies"] == 0
            assert 0 < figures["total_ms"]["p50"] <= figures["total_ms"]["p99"]
            assert figures["first_delta_ms"]["p50"] <= figures["total_ms"]["p50"]
        assert row["direct"]["server_cpu_ms_per_request"] is None
        assert row["foldgate"]["server_cpu_ms_per_request"] > 0
        for q in ("p50", "p99"):
            assert row["added_ms"][q] == pytest.approx(row["foldgate"]["total_ms"][q] - row["direct"]["total_ms"][q])
        assert (row["added_first_delta_ms"] is None) == (not row["stream"])
    assert [match["messages"] for match in result["matching"]] == [21]
    table = (tmp_path / "bench_api.md").read_text()
    assert "| 3 | yes | 6 |" in table and "hash and lookup" in table
