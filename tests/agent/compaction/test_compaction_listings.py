"""Listing lines: the commit, search hit, issue row or setting that matters, kept whole with what says what it is."""

import json

from agent.compaction.listings import (
    query_fragments,
    rank,
    records_in,
    render_listings,
    search_queries,
)
from agent.tokens import count_text

ONELINE_LOG = """3b7dc54 fix(catalog): cursor pagination skips the last page
a1b2c3d (HEAD -> main, origin/main) chore: bump ruff
* 0f9e8d7 docs: typo"""

FULL_LOG = """commit 97a5a704f3230b5775b832c839a32b8ac93f486d
Author: Yuki Novak <yuki@example.com>
Date:   Sun Mar 23 22:00:00 2025 +0100

    fix(webhook): round refunds half-even

    Long body that is not the subject.
"""

DOCKER_PS = """CONTAINER ID   IMAGE            STATUS         PORTS                    NAMES
df010f99c157   shop-api:29.4    Up 18 minutes  0.0.0.0:8676->8676/tcp   shop-api-2"""

CONFIG = """service: shop
payout_fan_out:
  enabled: true
  rate_limit_per_minute: 4519
  environment: staging
report: 55
reports:
  export_timeout: 3618ms
[database]
pool_size = 20
"""


def texts(records, kind=None):
    return [record.text for record in records if kind is None or record.kind == kind]


def test_commits_keep_their_subject_in_both_log_forms():
    assert texts(records_in(ONELINE_LOG), "commit") == [
        "3b7dc54 fix(catalog): cursor pagination skips the last page",
        "a1b2c3d (HEAD -> main, origin/main) chore: bump ruff",
        "0f9e8d7 docs: typo",
    ]
    assert texts(records_in(FULL_LOG), "commit") == [
        "97a5a704f3230b5775b832c839a32b8ac93f486d fix(webhook): round refunds half-even"
    ]


def test_container_ids_in_a_table_are_not_commits():
    assert texts(records_in(DOCKER_PS), "commit") == []


def test_settings_carry_their_section_and_only_keys_that_name_a_setting():
    settings = texts(records_in(CONFIG), "setting")
    assert "payout_fan_out.rate_limit_per_minute: 4519" in settings
    assert "reports.export_timeout: 3618ms" in settings
    assert "database.pool_size: 20" in settings
    assert not [line for line in settings if "report:" in line or "enabled" in line or "service" in line]
    assert texts(records_in("MAX_RETRIES=5\nLISTEN_PORT=8080\nNAME=shop-1"), "setting") == [
        "MAX_RETRIES: 5",
        "LISTEN_PORT: 8080",
    ]


def test_issue_and_pull_request_rows_keep_number_and_title():
    rows = texts(
        records_in("#646\tOPEN\tcatalog totals are wrong\tbug, p1\tabout 5 days ago\nPROJ-12  Fix the login"), "ref"
    )
    assert rows == ["#646 | OPEN | catalog totals are wrong | bug, p1 | about 5 days ago", "PROJ-12 | Fix the login"]


def test_search_hits_that_match_the_searched_pattern_are_marked():
    output = (
        "src/shop/loyalty/rounding.py:113:def handle_loyalty_rounding(batch):\n"
        "src/shop/reports/service.py:257:    total += 20 * len(report)"
    )
    hits = [r for r in records_in(output, "def .*rounding") if r.kind == "hit"]
    assert [(hit.text.split(":")[0], hit.matched) for hit in hits] == [
        ("src/shop/loyalty/rounding.py", True),
        ("src/shop/reports/service.py", False),
    ]


def test_patterns_are_split_into_literals_never_run_as_regexes():
    assert query_fragments("def .*rate_limiter") == (("def ", "rate_limiter"),)
    assert query_fragments("[Tt]imeout|retries") == (("imeout",), ("retries",))
    assert query_fragments("((((") == ()
    records_in("a.py:1:x", "(unbalanced[")  # no error


def test_search_queries_come_from_pattern_arguments_and_grep_commands():
    def call(call_id, arguments):
        return {"id": call_id, "type": "function", "function": {"name": "t", "arguments": json.dumps(arguments)}}

    message = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            call("a", {"pattern": "fan_out", "path": "src"}),
            call("b", {"command": "grep -rn 'listen_port' config/ | head"}),
            call("c", {"command": "git log --oneline -n 5"}),
        ],
    }
    assert search_queries([message]) == {"a": "fan_out", "b": "listen_port"}


def odd_one_out_log(odd_sha, filler_start):
    lines = [f"{filler_start + i:07x} chore(core): tidy the worker module" for i in range(20)]
    lines.insert(7, f"{odd_sha} fix(billing): refunds double counted on retries")
    return "\n".join(lines)


def test_the_distinctive_line_of_a_templated_listing_ranks_first():
    first = records_in(odd_one_out_log("abc1234", 0xA000000))
    second = records_in(odd_one_out_log("def5678", 0xB000000))
    ranked = rank([(1, "m1", first), (2, "m2", second)])
    assert {item.record.text.split()[0] for item in ranked[:2]} == {"abc1234", "def5678"}


def test_a_matched_hit_beats_context_lines_and_each_listing_gets_its_best_line_in_first():
    search = records_in("a/x.py:1:def target():\na/y.py:2:    pass\na/z.py:3:    return 1", "def target")
    log = records_in(odd_one_out_log("abc1234", 0xA000000))
    ranked = rank([(1, "m1", search), (2, "m2", log)])
    assert ranked[0].record.text == "a/x.py:1:def target():"
    best_of_log = next(index for index, item in enumerate(ranked) if item.message_id == "m2")
    second_of_search = [index for index, item in enumerate(ranked) if item.message_id == "m1"][1]
    assert ranked[best_of_log].record.text.startswith("abc1234")
    assert best_of_log < second_of_search


def test_render_takes_every_kind_in_turn_within_the_budget():
    found = [
        (1, "m1", records_in("\n".join(f"{0xA000000 + i:07x} feat: change number {i} of many" for i in range(60)))),
        (2, "m2", records_in(CONFIG)),
        (3, "m3", records_in("#646\tcatalog totals are wrong")),
    ]
    lines = [item.record for item in rank(found)]
    text, used = render_listings(lines, 150)
    assert used <= 150 and count_text(text) <= 150 + 10
    assert "- Settings:" in text and "- Issues and PRs:" in text and "- Commits:" in text
    assert "#646 | catalog totals are wrong" in text
