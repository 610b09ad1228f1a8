"""S4 numbers: thresholds, tail budgets and the summary budget, exactly as the spec computes them."""

import pytest

from agent.compaction.budgets import (
    lean_tail_budget,
    legacy_tail_budget,
    max_summary_tokens,
    resolve_model_threshold,
    summary_budget,
    threshold_tokens,
)
from agent.context_compressor import ContextCompressor
from agent.context_compressor import resolve_model_threshold as exported
from agent.settings import CompressionSettings


def test_s4_1_computed_values_for_a_200k_model_at_defaults():
    compressor = ContextCompressor("claude-sonnet-4", 200_000)
    assert compressor.threshold == 0.50
    assert compressor.threshold_tokens == 100_000
    assert compressor.tail_token_budget == 20_000
    assert compressor.max_summary_tokens == 10_000


def test_threshold_derives_from_the_main_window_not_the_summarizers():
    compressor = ContextCompressor("some-model", 262_144, summarizer_context_length=128_000)
    assert compressor.threshold_tokens == 131_072


def test_resolve_model_threshold_is_importable_from_the_compressor_module():
    assert exported is resolve_model_threshold


THRESHOLDS = {"glm-5.2": 0.40, "glm-5.2-1M": 0.25, "claude-sonnet": 0.35, "gpt-5.5": 0.80}


@pytest.mark.parametrize(
    ("model", "context_length", "expected"),
    [
        ("glm-5.2-1M", 1_000_000, 0.25),  # longest key wins, large window: no floor
        ("glm-5.2", 1_000_000, 0.40),
        ("glm-5.2", 200_000, 0.75),  # override below the floor on a small window is raised
        ("claude-sonnet-4-20250514", 200_000, 0.75),
        ("openrouter/claude-sonnet-4", 1_000_000, 0.35),
        ("gpt-5.5", 272_000, 0.80),  # above the floor: stays
        ("gpt-4o", 128_000, 0.50),  # no matching key: global default, not floored
        ("gpt-4o", 1_000_000, 0.50),
    ],
)
def test_resolve_model_threshold(model, context_length, expected):
    assert resolve_model_threshold(model, THRESHOLDS, 0.50, context_length) == expected


def test_empty_map_and_missing_model_give_the_default():
    assert resolve_model_threshold("glm-5.2", {}, 0.6, 100_000) == 0.6
    assert resolve_model_threshold(None, THRESHOLDS, 0.6, 100_000) == 0.6


def test_model_switch_re_resolves_and_returns_to_the_global_value():
    settings = CompressionSettings(model_thresholds={"glm-5.2": 0.40})
    compressor = ContextCompressor("glm-5.2", 1_000_000, settings)
    assert compressor.threshold == 0.40
    compressor.update_model("gpt-4.1", 1_047_576)
    assert compressor.threshold == 0.50
    assert compressor.threshold_tokens == 523_788
    compressor.update_model("glm-5.2", 200_000)
    assert compressor.threshold == 0.75


def test_summary_budget_ratio_floor_and_cap():
    assert summary_budget(30_000, 200_000) == 6_000  # 20% of the content
    assert summary_budget(1_000, 200_000) == 2_000  # at least 2,000
    assert summary_budget(500_000, 200_000) == 10_000  # at most 5% of the window
    assert summary_budget(500_000, 1_000_000) == 12_000  # and never over 12,000
    assert max_summary_tokens(1_000_000) == 12_000


def test_lean_tail_is_2_5_percent_within_10k_and_25k():
    assert lean_tail_budget(128_000) == 10_000
    assert lean_tail_budget(600_000) == 15_000
    assert lean_tail_budget(1_000_000) == 25_000
    assert lean_tail_budget(2_000_000) == 25_000


def test_legacy_tail_and_threshold_tokens():
    assert threshold_tokens(1_000_000, 0.5) == 500_000
    assert legacy_tail_budget(500_000, 0.2) == 100_000
