"""The evals' listing load: the share of folded listing lines a summary could hold, and the recall that allows."""

import pytest

from agent.compaction.budgets import max_summary_tokens
from evals.listing_load import ListingLoad, expected_recall, is_listed, listing_load, load_cells


def git_log(count: int) -> str:
    return "\n".join(f"a{k:06x} fix(ledger): rework the ledger retry path number {k}" for k in range(count))


def test_it_counts_the_listing_lines_of_tool_output_only():
    messages = [
        {"role": "user", "content": git_log(5)},
        {"role": "tool", "tool_call_id": "c1", "content": git_log(40)},
        {
            "role": "tool",
            "tool_call_id": "c2",
            "content": "#4821\tfix the ledger\tana:fix-1\tOPEN\n#4822\tdocs\tbo:doc-2\tOPEN",
        },
        {"role": "tool", "tool_call_id": "c3", "content": "all tests passed"},
    ]
    load = listing_load(messages)
    assert load.lines == 42
    assert 0 < load.tokens < 42 * 30


def test_the_share_is_the_summary_cap_over_the_lines_tokens():
    cap = max_summary_tokens(200_000)
    assert ListingLoad(10, cap // 2).share(200_000) == 1.0
    assert ListingLoad(1_000, cap * 4).share(200_000) == pytest.approx(0.25)


def test_expected_recall_keeps_every_fact_off_a_listing_and_the_listed_at_the_share():
    facts = [("sha", "tool"), ("pr", "tool"), ("sha", "assistant"), ("decision", "user")]
    assert is_listed("sha", "tool") and not is_listed("sha", "assistant") and not is_listed("error", "tool")
    assert expected_recall(facts, 0.5) == pytest.approx((2 + 2 * 0.5) / 4)
    assert expected_recall([], 0.1) == 1.0


def test_both_evals_show_the_same_cells():
    cells = load_cells(ListingLoad(3_913, 83_740), 200_000, [("sha", "tool"), ("decision", "user")])
    assert cells == "3,913 | 83,740 | 12% | 56%"
