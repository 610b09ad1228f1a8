"""Anti-thrash guard: cooldowns after summarizer failures, strikes from reported usage, backoff, persistence."""

import json

from agent.compaction.guard import BACKOFF_START, COOLDOWN_MAX, COOLDOWN_START, CompactionGuard


def test_cooldown_starts_at_60s_and_doubles_to_30_minutes():
    guard = CompactionGuard()
    waits = [guard.on_summarizer_failure(1000.0, "timeout") for _ in range(8)]
    assert waits[:4] == [60.0, 120.0, 240.0, 480.0]
    assert waits[-1] == COOLDOWN_MAX
    assert not guard.allows(1000.0 + COOLDOWN_MAX - 1)
    assert guard.allows(1000.0 + COOLDOWN_MAX)


def test_retry_after_is_honoured_when_longer():
    guard = CompactionGuard()
    assert guard.on_summarizer_failure(0.0, "429", retry_after=300) == 300
    assert not guard.summarizer_allowed(299.0) and guard.summarizer_allowed(300.0)


def test_success_resets_the_cooldown_step():
    guard = CompactionGuard()
    guard.on_summarizer_failure(0.0, "500")
    guard.on_summarizer_failure(0.0, "500")
    guard.on_summarizer_success()
    assert guard.on_summarizer_failure(0.0, "500") == COOLDOWN_START


def test_two_ineffective_compactions_in_a_row_back_off_then_a_probe_is_allowed():
    guard = CompactionGuard()
    guard.on_compacted()
    guard.on_reported_usage(120_000, 100_000, now=0.0)
    assert guard.strikes == 1 and guard.allows(0.0)
    guard.on_compacted()
    guard.on_reported_usage(110_000, 100_000, now=10.0)
    assert guard.strikes == 2 and not guard.allows(10.0)
    assert guard.allows(10.0 + BACKOFF_START)
    guard.on_compacted()  # the probe, ineffective again: a longer backoff
    guard.on_reported_usage(105_000, 100_000, now=1000.0)
    assert not guard.allows(1000.0 + BACKOFF_START) and guard.allows(1000.0 + 2 * BACKOFF_START)


def test_an_effective_compaction_resets_strikes_and_usage_without_a_compaction_is_not_judged():
    guard = CompactionGuard()
    guard.on_compacted()
    guard.on_reported_usage(120_000, 100_000, now=0.0)
    guard.on_compacted()
    guard.on_reported_usage(40_000, 100_000, now=1.0)
    assert guard.strikes == 0
    guard.on_reported_usage(150_000, 100_000, now=2.0)  # growth between compactions is not a strike
    assert guard.strikes == 0


def test_state_survives_a_restart_as_json():
    guard = CompactionGuard()
    guard.on_summarizer_failure(500.0, "timeout")
    guard.on_compacted()
    restored = CompactionGuard.from_state(json.loads(json.dumps(guard.to_state())))
    assert restored == guard
    assert not restored.allows(501.0)


def test_unreadable_state_starts_from_the_defaults_instead_of_failing_every_turn():
    restored = CompactionGuard.from_state({"cooldown_until": None, "strikes": "many", "failures": 2})
    assert restored.cooldown_until == CompactionGuard().cooldown_until and restored.strikes == 0
    assert restored.failures == 2


def test_a_servers_retry_after_is_honoured_up_to_the_longest_cooldown():
    guard = CompactionGuard()
    assert guard.on_summarizer_failure(1_000.0, "rate limited", retry_after=120.0) == 120.0
    assert guard.on_summarizer_failure(2_000.0, "rate limited", retry_after=1e300) == COOLDOWN_MAX
    assert guard.cooldown_until == 2_000.0 + COOLDOWN_MAX
