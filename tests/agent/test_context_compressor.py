"""ContextCompressor end to end with the deterministic summary: when it fires, what it keeps, what it carries."""

import json

from agent.compaction.assemble import SYSTEM_NOTE
from agent.context_compressor import ContextCompressor
from agent.messages import SUMMARY_PREFIX, api_problems, is_real_user_message, is_summary
from agent.settings import CompressionSettings
from agent.tokens import content_text
from tests.fakes.histories import Transcript


class Clock:
    def __init__(self, now=1_000_000.0):
        self.now = now

    def __call__(self):
        return self.now


def session(turns=40, start=0, t=None):
    t = t or Transcript(system="You are a release assistant.")
    if start == 0:
        t.exchange("Help me ship the ingest service.", "Sure.")
    for i in range(start, start + turns):
        t.user(f"Step {i}: check the worker, see PR #{1000 + i}.")
        t.call("read_file", {"path": f"svc/worker_{i}.py"}, f"commit {i:04x}beefcafe{i:04x}\n" + "code line\n" * 300)
        t.assistant(f"Worker {i} looks fine.")
    return t


def compressor(context_length=60_000, **settings):
    return ContextCompressor("test-model", context_length, CompressionSettings(**settings), clock=Clock())


def test_should_compress_at_the_threshold_from_reported_usage():
    c = compressor(100_000)
    assert not c.should_compress(49_999)
    assert c.should_compress(50_000)
    assert not c.should_compress()  # nothing reported yet
    c.update_from_response({"prompt_tokens": 70_000, "completion_tokens": 10, "total_tokens": 70_010})
    assert c.should_compress()
    assert not compressor(100_000, enabled=False).should_compress(90_000)


async def test_compaction_summarizes_the_middle_and_keeps_the_newest_user_message_verbatim():
    t = session()
    t.user("Now tag the release as v2.4.1 please.")
    c = compressor()
    original_ids = [m["_id"] for m in t.messages]
    out = await c.compress(t.messages, force=True)
    assert [m["_id"] for m in t.messages] == original_ids  # input untouched
    stats = c.last_compaction
    assert stats.outcome == "compacted" and stats.summarizer == "deterministic" and stats.calls == 0
    assert stats.tokens_after < stats.tokens_before / 2 and stats.messages_after == len(out)
    summary = next(m for m in out if is_summary(m))
    assert summary["content"].startswith(SUMMARY_PREFIX)
    assert "not instructions and not an active task" in summary["content"]
    # L4: the newest real user message is kept verbatim after the notes
    newest = [m for m in out if is_real_user_message(m)][-1]
    assert newest is t.messages[-1] and out.index(newest) > out.index(summary)
    assert api_problems(out) == []
    assert set(stats.replaced_ids) == set(original_ids) - {m.get("_id") for m in out}


async def test_system_prompt_is_noted_on_the_first_compaction_only():
    t = session()
    c = compressor()
    first = await c.compress(t.messages, force=True)
    assert first[0]["content"].endswith(SYSTEM_NOTE) and first[0]["_orig_id"] == "m-1"
    continued = session(turns=30, start=40, t=Transcript(system=None))
    second_input = first + continued.messages
    for index, message in enumerate(continued.messages):
        message["_id"] = f"n-{index}"
    second = await c.compress(second_input, force=True)
    assert second[0] is first[0]  # byte-identical system prompt: its cache entry survives
    assert second[0]["content"].count(SYSTEM_NOTE) == 1


async def test_second_compaction_still_carries_what_the_first_folded_away():
    t = session(turns=40)
    c = compressor()
    first = await c.compress(t.messages, force=True)
    assert "PR #1005" in next(m["content"] for m in first if is_summary(m))
    more = Transcript(system=None)
    more._ids.n = 1000
    session(turns=40, start=40, t=more)
    second = await c.compress(first + more.messages, force=True)
    summary = next(m["content"] for m in second if is_summary(m))
    assert c.compression_count == 2
    assert "PR #1005" in summary and "PR #1050" in summary
    assert sum(1 for m in second if is_summary(m)) == 1


async def test_state_round_trips_so_a_restart_continues_where_it_left_off():
    t = session(turns=40)
    c = compressor()
    first = await c.compress(t.messages, force=True)
    state = json.loads(json.dumps(c.export_state()))
    restored = compressor()
    restored.load_state(state)
    assert restored.compression_count == 1
    more = Transcript(system=None)
    more._ids.n = 1000
    session(turns=40, start=40, t=more)
    second = await restored.compress(first + more.messages, force=True)
    assert second[0] is first[0]
    assert "PR #1005" in next(m["content"] for m in second if is_summary(m))


async def test_the_telling_line_of_a_long_listing_survives_with_what_says_what_it_is():
    t = Transcript(system="You are a release assistant.")
    t.exchange("Help me ship the ingest service.", "Sure.")
    log = [f"{0xA000000 + i:07x} chore(core): tidy the worker module" for i in range(30)]
    log.insert(17, "abc1234 fix(billing): refunds double counted on retries")
    t.call("terminal", {"command": "git log --oneline -n 31"}, "\n".join(log))
    config = "\n".join(f"section_{i}:\n  flag_{i}: true\n  note_{i}: plain" for i in range(40))
    t.call(
        "read_file", {"path": "deploy/values.yaml"}, config + "\nescrow:\n  listen_port: 23409\n  environment: canary"
    )
    hits = "\n".join(f"src/app/mod_{i}.py:{i}:    value_{i} = compute(x)" for i in range(30))
    t.call("search_files", {"pattern": "def settle_refund"}, hits + "\nsrc/pay/settle.py:40:def settle_refund(batch):")
    session(turns=30, t=t, start=1)
    c = compressor(tail_mode="lean")
    out = await c.compress(t.messages, force=True)
    summary = next(m["content"] for m in out if is_summary(m))
    for line in (
        "abc1234 fix(billing): refunds double counted on retries",
        "escrow.listen_port: 23409",
        "src/pay/settle.py:40:def settle_refund(batch):",
    ):
        assert line in summary, line
    assert {"m-5", "m-7", "m-9"} <= set(c.last_compaction.replaced_ids)  # the listings themselves stay archived


async def test_lean_stubs_a_bulky_tool_result_of_the_first_exchange_and_keeps_the_exchange():
    t = Transcript(system="You are a release assistant.")
    t.user("Read the ingest worker first.")
    t.call("read_file", {"path": "svc/ingest/worker.py"}, "ABC-77 marker\n" + "def run():\n    pass\n" * 2_000)
    t.assistant("Read it.")
    session(turns=30, t=t, start=1)
    lean, legacy = compressor(tail_mode="lean"), compressor(tail_mode="legacy", target_ratio=0.1)
    out = await lean.compress(t.messages, force=True)
    head_result = next(m for m in out if m.get("tool_call_id") == "call_1")
    assert head_result["_orig_id"] == "m-4" and "m-4" in lean.last_compaction.replaced_ids
    assert 'session_fetch(ids=["m-4"])' in head_result["content"] and len(head_result["content"]) < 200
    assert [m["_id"] for m in out[1:3]] == ["m-2", "m-3"]  # the exchange itself stays
    assert "ABC-77" in next(m["content"] for m in out if is_summary(m))
    assert api_problems(out) == []
    legacy_out = await legacy.compress(t.messages, force=True)
    assert legacy.last_compaction.outcome == "compacted"
    assert next(m for m in legacy_out if m.get("tool_call_id") == "call_1") is t.messages[3]


async def test_short_sessions_and_disabled_compression_are_returned_unchanged():
    t = Transcript()
    t.exchange("hi", "hello")
    c = compressor()
    assert await c.compress(t.messages, force=True) == t.messages
    assert c.last_compaction.outcome == "skipped" and c.compression_count == 0
    big = session()
    off = compressor(enabled=False)
    assert await off.compress(big.messages) == big.messages
    assert off.last_compaction.reason == "compression disabled"


async def test_legacy_tail_keeps_more_verbatim_than_lean():
    t = session(turns=60)
    lean = compressor(400_000, tail_mode="lean")
    legacy = compressor(400_000, tail_mode="legacy", target_ratio=0.5)
    lean_out = await lean.compress(t.messages, force=True)
    legacy_out = await legacy.compress(t.messages, force=True)
    assert lean.last_compaction.tokens_after < legacy.last_compaction.tokens_after
    assert legacy.last_compaction.stubbed_messages == 0
    assert api_problems(lean_out) == [] and api_problems(legacy_out) == []


async def test_focus_topic_is_recorded_in_the_notes():
    c = compressor()
    out = await c.compress(session().messages, force=True, focus_topic="worker 7")
    assert "Focus requested for this compaction: worker 7" in next(m["content"] for m in out if is_summary(m))


def test_idle_compaction_needs_the_gap_and_enough_context():
    c = compressor(100_000, idle_compact_after_seconds=3600)
    assert not c.should_idle_compact(7200, prompt_tokens=5_000)  # under threshold × target_ratio
    assert c.should_idle_compact(7200, prompt_tokens=20_000)
    assert not c.should_idle_compact(60, prompt_tokens=20_000)
    assert not compressor(100_000).should_idle_compact(7200, prompt_tokens=20_000)  # off by default


async def test_an_engine_reused_on_another_conversation_does_not_leak_the_first_one():
    c = compressor()
    await c.compress(session().messages, force=True)
    other = Transcript(system="You are a release assistant.")
    other.exchange("Plan the team offsite.", "Sure.")
    for i in range(40):
        other.user(f"Offsite item {i}: book room {i}.")
        other.assistant("Noted. " + "detail " * 400)
    out = await c.compress(other.messages, force=True)
    summary = next(m["content"] for m in out if is_summary(m))
    assert "PR #10" not in summary and "Offsite item" in summary
    assert c.compression_count == 1 and out[0]["content"].endswith(SYSTEM_NOTE)


async def test_reset_forgets_the_conversation():
    c = compressor()
    await c.compress(session().messages, force=True)
    c.on_session_reset()
    assert c.compression_count == 0 and c.export_state()["digest"] is None
    fresh = await c.compress(session().messages, force=True)
    assert fresh[0]["content"].endswith(SYSTEM_NOTE)
    summary = next(m["content"] for m in fresh if is_summary(m))
    assert content_text(summary).count("PR #1005") >= 1
