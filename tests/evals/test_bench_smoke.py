"""The gateway benchmarks run end to end in a tiny configuration and write the figures they promise.

No timing is asserted (speed belongs to the benchmarks themselves); what is checked is
that every message was answered and accounted for, that the memory figures describe a
compaction that really archived something, and that the context plot shows both
compaction layers keeping a long conversation inside its window.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from evals import bench_context, bench_memory, bench_throughput
from evals.cli import available_benchmarks

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_the_new_benchmarks_are_found_by_foldgate_bench():
    assert {"throughput", "memory", "context"} <= set(available_benchmarks())


@pytest.mark.timeout(60)
def test_throughput_answers_every_message_and_accounts_for_its_time(tmp_path, redis_url):
    code = bench_throughput.main(
        tmp_path,
        redis_url=redis_url,
        chats=20,
        messages_per_chat=2,
        bursts=2,
        unloaded_messages=5,
        paced_seconds=0.5,
        round_trip_messages=5,
        profile_chats=5,
        settle=False,
        variants=(("aiohttp", True), ("httpx", False)),
    )
    assert code == 0
    result = json.loads((tmp_path / "bench_throughput.json").read_text())
    phases = {phase["phase"]: phase for phase in result["phases"]}
    assert set(phases) == {"unloaded", "burst 1", "burst 2", "paced"}
    assert phases["unloaded"]["messages"] == 5
    assert phases["burst 1"]["messages"] == phases["burst 2"]["messages"] == 20 * 2
    slower = min(phases["burst 1"], phases["burst 2"], key=lambda phase: phase["messages_per_second"])
    assert result["median_burst"] == slower["phase"]  # of two runs, the verdict takes the slower
    assert phases["paced"]["messages"] >= 1 and phases["paced"]["offered_per_second"] > 0
    for phase in phases.values():
        assert phase["messages_per_second"] > 0
        added, total = phase["added_ms"], phase["intake_to_reply_ms"]
        assert 0 <= added["p50"] <= added["p99"] <= added["max"]
        assert added["p50"] <= total["p50"]  # the model server's time is taken out, never added
        assert phase["model_server_ms"]["p50"] <= phase["model_call_ms"]["p50"]
    trips = result["redis_round_trips"]
    assert trips["messages"] == 5
    assert trips["by_command"]["EVALSHA append"] == pytest.approx(1.0)  # one commit per message
    assert trips["per_message"] == pytest.approx(sum(trips["by_command"].values()), abs=0.1)
    assert sum(result["profile"]["by_component"].values()) == pytest.approx(100, abs=1)
    assert set(result["verdict"]) == {"throughput_goal_met", "p99_goal_met_paced", "p99_goal_met_unloaded"}
    assert "| burst 2 |" in (tmp_path / "bench_throughput.md").read_text()
    assert result["provider_client"] == {"transport": "aiohttp", "stream": True, "budgets": False}
    assert [(row["transport"], row["stream"]) for row in result["comparison"]] == [("aiohttp", True), ("httpx", False)]
    assert all(row["messages_per_second"] > 0 for row in result["comparison"])


@pytest.mark.timeout(60)
def test_memory_measures_the_transcript_and_what_a_compaction_archived(tmp_path, redis_url):
    assert bench_memory.main(tmp_path, redis_url=redis_url, sizes=(15_000,), context_length=32_000) == 0
    result = json.loads((tmp_path / "bench_memory.json").read_text())
    (row,) = result["rows"]
    before, after = row["before"], row["after"]
    assert row["tokens"] >= 14_000 and row["messages"] > 10
    # Redis holds at least the JSON it was given, and a few bytes per token, not kilobytes.
    assert before["json_bytes_per_token"] <= before["transcript_bytes_per_token"] < 20
    assert after["active_tokens"] < row["tokens"]  # the live transcript shrank
    assert after["archived_tokens"] > 0 and after["archived_messages"] > 0  # and what left it was kept
    assert 0 < after["archive_bytes_per_token"] < 20
    assert after["bytes"]["archive"] > 0 and after["compaction_added_bytes"] > 0
    assert "night-15k-s7" in (tmp_path / "bench_memory.md").read_text()


def test_memory_refuses_to_report_a_compaction_that_did_not_happen(tmp_path, redis_url):
    with pytest.raises(ValueError, match="kept the session whole"):
        bench_memory.main(tmp_path, redis_url=redis_url, sizes=(3_000,), context_length=1_000_000)


@pytest.mark.timeout(90)
def test_context_plot_shows_both_layers_keeping_conversations_inside_the_window(tmp_path, redis_url):
    assert bench_context.main(tmp_path, redis_url=redis_url, generated_tokens=20_000, generated_window=24_000) == 0
    assert (tmp_path / "context_over_time.png").read_bytes()[:8] == PNG_SIGNATURE
    result = json.loads((tmp_path / "bench_context.json").read_text())
    fixture, generated = result["conversations"]
    assert fixture["name"] == "overnight_ops"
    assert fixture["hygiene_compactions"] == 1 and fixture["in_loop_compactions"] >= 1
    assert generated["hygiene_compactions"] >= 1  # the inserted overnight backlog is caught before the turn
    for conversation in (fixture, generated):
        prompts = conversation["prompt_tokens"]
        assert len(prompts) == conversation["requests"] == len(conversation["uncompacted_prompt_tokens"])
        assert conversation["requests_over_window"] == 0 and max(prompts) < conversation["window"]
        assert conversation["uncompacted_peak_tokens"] > conversation["window"]  # it would not have fit
        triggers = {point["trigger"] for point in conversation["compaction_points"]}
        assert "hygiene" in triggers
        for point in conversation["compaction_points"]:
            assert 1 <= point["before_request"] <= len(prompts) + 1


def test_a_generated_session_becomes_replay_records_with_turns_and_playback():
    session = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "fyi the backup ran", "_ts": "2026-11-29T21:00:00+01:00"},
        {"role": "user", "content": "check the deploy"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_a", "type": "function", "function": {"name": "terminal", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "ok"},
        {"role": "assistant", "content": "deploy is green"},
    ]
    records = bench_context.records_from_session(session, "night")
    assert [record["kind"] for record in records] == ["message", "message", "model", "tool", "model"]
    assert [record.get("respond") for record in records[:2]] == [False, True]  # only the last one before a reply asks
    assert records[0]["ts"] == pytest.approx(1_795_982_400.0)
    assert records[1]["ts"] == pytest.approx(1_795_982_401.0)  # no stamp: a second after the last one
    assert records[2]["tool_calls"][0]["id"] == "call_a" and records[2]["text"] == ""
    assert records[4]["text"] == "deploy is green"


def test_compactions_in_the_loop_are_placed_where_the_prompt_dropped():
    prompts = [100, 200, 300, 120, 150, 900, 400]
    events = [
        {"after_request": 5, "tokens_after": 150, "trigger": "in_loop"},
        {"after_request": 6, "tokens_after": 380, "trigger": "hygiene"},
    ]
    points = bench_context.compaction_points(prompts, events)
    assert points == [
        {"before_request": 4, "tokens": 120, "trigger": "in_loop"},  # between requests 3 and 4
        {"before_request": 7, "tokens": 380, "trigger": "hygiene"},  # before the next turn's first request
    ]


def test_quantiles_are_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert bench_throughput.quantile(values, 0.5) == 50.0
    assert bench_throughput.quantile(values, 0.99) == 99.0
    assert bench_throughput.quantile([], 0.99) == 0.0


@pytest.mark.timeout(120)
def test_hygiene_times_the_decision_and_a_turns_transcript_read_with_the_cache_off_and_on(tmp_path, redis_url):
    from evals import bench_hygiene

    result = asyncio.run(bench_hygiene.measure(redis_url, iterations=20))
    assert [row["iterations"] for row in result["rows"]] == [20, 20]
    reads = result["turn_reads"]
    assert [row["session_tokens"] for row in reads] == [row["session_tokens"] for row in result["rows"]]
    assert all(row["cache_off_p50_ms"] > 0 and row["cache_on_p50_ms"] > 0 for row in reads)


@pytest.mark.timeout(60)
def test_streaming_latency_is_measured_from_the_servers_first_byte(tmp_path):
    from evals import bench_streaming

    assert bench_streaming.main(tmp_path, concurrent=10, seconds=0.5, paces=(0.02, 0.01), settle=False) == 0
    result = json.loads((tmp_path / "bench_streaming.json").read_text())
    loads = [(row["transport"], row["pace_seconds"]) for row in result["rows"]]
    assert loads == [("aiohttp", 0.02), ("aiohttp", 0.01), ("aiohttp", None), ("httpx", 0.01), ("httpx", None)]
    pieces = bench_streaming.PIECES
    for row in result["rows"]:  # how many turns fit the half second depends on the machine's load: at least one
        assert row["turns"] >= 1 and row["deltas"] == pieces * row["turns"]
        first = row["first_delta_ms"]
        assert 0 < first["p50"] <= first["p99"] <= first["max"]
    assert set(result["verdict"]) == {"50 deltas/s per stream", "100 deltas/s per stream"}
    assert "first delta p99" in (tmp_path / "bench_streaming.md").read_text()


@pytest.mark.timeout(120)
def test_delivery_measures_the_first_preview_and_the_calls_a_reply_costs(tmp_path, redis_url):
    from evals import bench_delivery

    assert bench_delivery.main(tmp_path, concurrent=6, long_deltas=60, long_rate=40, redis_url=redis_url) == 0
    result = json.loads((tmp_path / "bench_delivery.json").read_text())
    assert [row["chats"] for row in result["first_preview"]] == [6, 6]
    for row in result["first_preview"]:
        assert 0 < row["first_shown_ms"]["p50"] <= row["first_shown_ms"]["p99"] < 10_000
    assert result["long_reply"]["platform_calls"] >= 1
    assert "first preview" in (tmp_path / "bench_delivery.md").read_text()


@pytest.mark.timeout(180)
def test_hygiene_runs_an_older_commits_code_beside_this_checkouts(tmp_path):
    import subprocess

    from evals import bench_hygiene
    from evals.baseline import ROOT, run_at

    if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "HEAD"], capture_output=True).returncode:
        pytest.skip("not a git checkout: no commit to run beside this one")
    old = run_at("HEAD", "bench_hygiene")  # the committed tree, in its own worktree and process
    assert [row["iterations"] for row in old["rows"]] == [3000, 3000]
    table = bench_hygiene.baseline_table([old], [old, old], "HEAD")
    assert table.count("| 1.00 |") == 6  # two decisions and four transcript reads, each against itself
    worktrees = subprocess.run(["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True).stdout
    assert "fg-baseline-" not in worktrees  # the temporary worktree is removed again


def test_the_operator_benchmark_lists_every_chat_it_filled(tmp_path, redis_url):
    from evals import bench_operator

    assert bench_operator.main(tmp_path, redis_url=redis_url, chats=60) == 0
    result = json.loads((tmp_path / "bench_operator.json").read_text())
    assert [page["path"] for page in result["pages"]][:2] == ["/admin", "/admin?sort=cost&order=desc"]
    assert all(page["median_s"] > 0 and page["bytes"] > 1000 for page in result["pages"])
    assert result["recording"]["gateway_us_per_turn"] > 0
    assert "| `/admin?page=2` |" in (tmp_path / "bench_operator.md").read_text()  # 60 chats: two pages


@pytest.mark.timeout(120)
def test_tools_times_each_transport_beside_an_in_process_tool_and_a_turn_with_many_tools(tmp_path):
    from evals import bench_tools

    assert bench_tools.main(tmp_path, calls=5, turns=2, listed=5) == 0
    result = json.loads((tmp_path / "bench_tools.json").read_text())
    assert set(result["latency"]) == {"in-process", "stdio", "http"}
    assert all(row["p50_ms"] > 0 for row in result["latency"].values())
    rows = result["turn_cpu"]
    assert rows["5 tools"]["request_bytes"] > rows["none"]["request_bytes"]  # the schemas went with the request


@pytest.mark.timeout(60)
def test_bots_measures_memory_and_cpu_for_each_fleet_size(tmp_path, redis_url, monkeypatch):
    from evals import bench_bots

    monkeypatch.setenv("FOLDGATE_BENCH_BOTS_SIZES", "1,2")
    assert (
        bench_bots.main(
            tmp_path, redis_url=redis_url, repeats=1, idle_seconds=0.5, settle_seconds=0.2, messages_per_bot=2
        )
        == 0
    )
    result = json.loads((tmp_path / "bench_bots.json").read_text())
    assert [row["bots"] for row in result["rows"]] == [1, 2]
    for row in result["rows"]:
        assert row["runs"] == 1 and row["idle_rss_mb"] > 0 and row["loaded_rss_mb"] > 0
        assert row["cpu_ms_per_message"] > 0 and row["start_s"] > 0 and row["idle_redis_commands_per_s"] > 0
    for run in result["runs"]:  # every message answered, by every bot: the warm-up's and the load's
        assert run["messages"] == 2 * run["bots"] and run["bot_api_sends"] >= run["messages"] + run["bots"]
    assert result["rows"][1]["per_added_bot"]["idle_rss_mb"] is not None
    assert "| 2 |" in (tmp_path / "bench_bots.md").read_text()
