"""Lean tail (S5.6): a small verbatim tail, stubs with recovery hints, continuity carried by the summary."""

import re

import pytest

from agent.compaction.lean import old_tool_result_cutoff, stub_old_tool_results, stub_text
from agent.context_compressor import ContextCompressor
from agent.messages import api_problems, is_summary
from agent.settings import CompressionSettings
from agent.tokens import content_text, count_message
from tests.fakes.histories import Transcript, long_session


def test_stub_names_tool_size_id_and_how_to_fetch():
    stub = stub_text("read_file", "line one\n" + "x" * 5000, "m-42")
    assert "\n" not in stub
    assert "read_file" in stub and "5,009 chars" in stub
    assert 'session_fetch(ids=["m-42"])' in stub and '"line one"' in stub


def test_old_results_are_stubbed_and_the_newest_kept_though_a_user_message_followed_them():
    t = Transcript(system=None)
    t.user("first task")
    t.call("read_file", {"path": "a.py"}, "A" * 3000)
    t.call("read_file", {"path": "b.py"}, "tiny")
    t.user("second task")
    t.call("read_file", {"path": "c.py"}, "C" * 3000)
    t.user("thanks, now explain what c.py does")  # the model is still working with c.py
    tail = t.messages
    cutoff = old_tool_result_cutoff(tail, 0, fresh_tokens=count_message(tail[-2]) + 10)
    out, stubbed = stub_old_tool_results(tail, cutoff)
    assert [original["_id"] for _, original in stubbed] == ["m-3"]
    assert out[2]["content"].startswith("[Old read_file output stubbed")
    assert out[2]["_orig_id"] == "m-3" and "_id" not in out[2]
    assert out[4] is tail[4]  # short result stays
    assert out[-2] is tail[-2]  # the file just read stays verbatim for the next turn


def test_results_beyond_the_budget_start_are_old_even_in_the_current_turn():
    t = Transcript(system=None)
    t.user("long task")
    for i in range(6):
        t.call("run", {"i": i}, f"output {i} " + "z" * 2000)
    cutoff = old_tool_result_cutoff(t.messages, 9)
    out, stubbed = stub_old_tool_results(t.messages, cutoff)
    assert len(stubbed) == 4
    assert out[-1] is t.messages[-1]


def test_only_the_newest_tool_output_within_the_fresh_share_stays_verbatim():
    t = Transcript(system=None)
    t.user("long task")
    for i in range(6):
        t.call("run", {"i": i}, f"output {i} " + "word " * 1000)
    per_result = count_message(t.messages[-1])
    cutoff = old_tool_result_cutoff(t.messages, 0, fresh_tokens=per_result * 2 + 10)
    out, stubbed = stub_old_tool_results(t.messages, cutoff)
    assert len(stubbed) == 4
    assert out[-1] is t.messages[-1] and out[-3] is t.messages[-3]
    assert out[-5]["content"].startswith("[Old run output stubbed")


@pytest.fixture(scope="module")
def big_session():
    return long_session(500_000, seed=3)


async def compact(session, mode, context_length=1_000_000):
    compressor = ContextCompressor("gpt-4.1", context_length, CompressionSettings(tail_mode=mode))
    out = await compressor.compress(session.messages, force=True)
    return compressor, out


async def test_on_a_500k_session_lean_retains_fewer_tokens_than_legacy(big_session):
    lean, lean_out = await compact(big_session, "lean")
    legacy, legacy_out = await compact(big_session, "legacy")
    assert big_session.tokens > 480_000
    assert lean.last_compaction.tokens_after < legacy.last_compaction.tokens_after
    assert lean.last_compaction.tokens_after <= 24_000
    assert legacy.last_compaction.tokens_after > 100_000
    assert api_problems(lean_out) == [] and api_problems(legacy_out) == []


async def test_lean_tail_stays_within_its_bounds(big_session):
    compressor, out = await compact(big_session, "lean")
    summary_index = next(i for i, m in enumerate(out) if is_summary(m))
    tail = out[summary_index + 1 :]
    assert sum(count_message(m) for m in tail) <= compressor.lean_tail_tokens
    assert compressor.lean_tail_tokens == 25_000
    originals = {m["_id"]: m for m in big_session.messages}
    kept_verbatim = [m for m in tail if "_id" in m]
    assert all(originals[m["_id"]] is m for m in kept_verbatim)


async def test_lean_summary_keeps_planted_facts_including_tool_only_ones(big_session):
    compressor, out = await compact(big_session, "lean")
    text = "\n".join(content_text(m.get("content")) for m in out)
    recalled = [fact for fact in big_session.facts if fact in text]
    tool_only = [fact for fact in big_session.tool_only_facts if fact in text]
    assert len(recalled) >= 0.85 * len(big_session.facts)
    assert len(tool_only) >= 0.8 * len(big_session.tool_only_facts)


async def test_lean_summary_quotes_user_messages_newest_first_with_ids(big_session):
    _, out = await compact(big_session, "lean")
    summary = next(content_text(m["content"]) for m in out if is_summary(m))
    quoted_ids = [int(i) for i in re.findall(r"^\[m-(\d+)\] ", summary, flags=re.M)]
    assert len(quoted_ids) >= 20
    assert quoted_ids == sorted(quoted_ids, reverse=True)
    originals = {m["_id"]: m for m in big_session.messages}
    for number in quoted_ids[:10]:
        assert originals[f"m-{number}"]["role"] == "user"
        assert f"[m-{number}] {originals[f'm-{number}']['content']}" in summary


async def test_identifiers_only_in_stubbed_tail_outputs_reach_the_anchor_index():
    t = Transcript()
    t.exchange("start", "ok")
    for i in range(30):
        t.exchange(f"question {i} " + "word " * 200, f"answer {i} " + "word " * 200)
    t.user("run the audit")
    t.call("audit", {}, "commit 5e6f7a8b9c0d1e2f\nAuditError: ledger drift of 3 cents\n" + "row\n" * 3000)
    for i in range(5):
        t.call("scan", {"i": i}, "line\n" * 4000)
    compressor = ContextCompressor("m", 128_000, CompressionSettings())
    out = await compressor.compress(t.messages, force=True)
    stubbed_audit = next(m for m in out if m.get("_orig_id") == t.messages[-11]["_id"])
    assert "stubbed" in stubbed_audit["content"]
    summary = next(m["content"] for m in out if is_summary(m))
    assert "5e6f7a8b9c0d1e2f" in summary and "AuditError: ledger drift of 3 cents" in summary


async def test_lean_stubs_in_the_tail_carry_recovery_hints(big_session):
    compressor, out = await compact(big_session, "lean")
    stubs = [m for m in out if m.get("role") == "tool" and "stubbed" in content_text(m["content"])]
    assert compressor.last_compaction.stubbed_messages == len(stubs) > 0
    for stub in stubs:
        assert f'session_fetch(ids=["{stub["_orig_id"]}"])' in stub["content"]
        assert stub["_orig_id"] in compressor.last_compaction.replaced_ids
