"""Facts that live only in tool output keep what they are about, however much the night repeats itself.

A worker log prints a hundred generic errors for every one that names what crashed
(``SettlementLagError``, ``[E4711]``); a config file says whose cost a number is only in the
section it stands under. The compressor must keep the telling line, with its subject, through
twenty compactions of floods that look just like the rest of the log.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from agent.compaction.anchor_context import context_words
from agent.compaction.anchor_index import AnchorIndex, error_ranking, render_index
from agent.compaction.anchors import anchors_in
from agent.compaction.error_lines import error_signature
from agent.context_compressor import ContextCompressor
from agent.settings import CompressionSettings
from agent.tokens import content_text, count_messages
from tests.fakes.histories import Transcript, attributed

GENERIC = ("ValueError", "TimeoutError", "KeyError", "RuntimeError", "ConnectionResetError")


def traceback(rng: random.Random, job: str, module: str, function: str, error: str) -> list[str]:
    """A job's crash as a worker log prints it: the log record, the frames, the exception line."""
    return [
        f"2025-03-24T21:{rng.randrange(60):02d}:00.000Z ERROR   [app.worker] {job} job crashed",
        "Traceback (most recent call last):",
        f'  File "/app/src/shop/{module}/tasks.py", line {rng.randrange(10, 900)}, in {function}',
        "    result = step(batch)",
        error,
    ]


def noisy_log(rng: random.Random, planted: list[str] | None = None) -> str:
    """Routine log lines around one generic crash (and the planted lines, when given)."""
    lines = [
        f"2025-03-24T21:00:{k:02d}.000Z INFO    [app.http] GET /v1/rows/{rng.randrange(99_999)} 200" for k in range(30)
    ]
    kind = rng.choice(GENERIC)
    lines[12:12] = traceback(rng, "row sweep", "rows", "sweep_rows", f"{kind}: row {rng.randrange(10**6)} was rejected")
    if planted:
        lines[20:20] = planted
    return "\n".join(lines)


def replay(tail_mode: str, tool: str = "terminal") -> str:
    """Two app-specific crashes in the first hour, then log after log of generic ones, compacted twenty times; the
    logs come from ``tool`` (a built-in tool's name, or an MCP server's ``<server>__<tool>``)."""
    rng = random.Random(8)
    engine = ContextCompressor("test-model", 60_000, CompressionSettings(tail_mode=tail_mode, protect_last_n=6))
    t = Transcript(system="You are a coding assistant.")
    t.exchange("Let's look at the shop workers tonight.", "Sure.")
    planted = traceback(
        rng,
        "settlement lag",
        "settlement",
        "run_settlement_lag",
        "SettlementLagError: settlement lag gave up for batch_91x",
    ) + traceback(rng, "ledger export", "ledger", "export_ledger", "KeyError: 'ledger_ref' [E4711]")
    t.user("check the worker log")
    t.call(tool, {"command": "tail -n 200 worker.log"}, noisy_log(rng, planted))
    t.assistant("The log has a few crashes; looking further.")
    working = list(t.messages)
    compactions = 0
    while compactions < 20:
        start = len(t.messages)
        t.user("and the next log?")
        for _ in range(6):
            t.call(tool, {"command": "tail -n 200 worker.log"}, noisy_log(rng))
        t.assistant("More of the same.")
        working += t.messages[start:]
        if engine.should_compress(count_messages(working)):
            working = asyncio.run(engine.compress(working))
            assert engine.last_compaction.outcome == "compacted"
            compactions += 1
    return "\n".join(content_text(m.get("content")) for m in working)


@pytest.mark.parametrize("tail_mode", ["lean", "legacy"])
def test_an_apps_own_crash_outlasts_a_flood_of_generic_ones(tail_mode):
    context = replay(tail_mode)
    assert attributed(context, "SettlementLagError: settlement lag gave up for batch_91x", "settlement/tasks.py")
    assert attributed(context, "KeyError: 'ledger_ref' [E4711]", "ledger export")


def test_an_mcp_tools_output_keeps_its_anchors_as_a_built_in_tools_does():
    context = replay("lean", tool="logs__tail")
    assert attributed(context, "SettlementLagError: settlement lag gave up for batch_91x", "settlement/tasks.py")
    assert attributed(context, "KeyError: 'ledger_ref' [E4711]", "ledger export")


def test_errors_are_grouped_by_the_failure_they_report():
    assert error_signature("KeyError: 'ledger_ref' [E4711]") == "E4711"
    assert error_signature("upstream rejected the request code=EPAY-4135 status=409") == "EPAY-4135"
    assert error_signature("E       AssertionError: assert 1 == 2") == "AssertionError"
    assert error_signature("FAILED tests/test_x.py::test_y - KeyError: 'a'") == "KeyError"
    # A ticket key or a name in the message is not an error code.
    assert error_signature("KeyError: ticket PAY-342 has no assignee") == "KeyError"
    assert error_signature("ValueError: date is not ISO-8601") == "ValueError"
    # Else the error keyword: a type checker's lines are one flood, whatever their timestamps or paths say.
    assert error_signature("fatal: not a git repository") == "fatal"
    assert error_signature('src/shop/a.py:64: error: Argument 3 to "f" has incompatible type') == "error"
    assert error_signature("2025-03-24T21:06:09Z FATAL [ledger] checksum mismatch") == "fatal"
    assert error_signature("2025-03-24T21:06:09Z panic: runtime error") != error_signature("FAILED tests/a.py::t")


@pytest.mark.parametrize("ident", ["lease {k}", "job JOB-{k} lease", "ticket PAY-{k} lease"])
def test_a_failure_seen_once_ranks_above_one_seen_a_hundred_times(ident):
    bucket = {f"TimeoutError: {ident.format(k=1000 + k)} closed": [1000, 500 + k] for k in range(100)}
    bucket["SettlementLagError: settlement lag gave up"] = [300, 1]
    bucket["TimeoutError: the one said in conversation"] = [3000, 2]
    ranked = error_ranking(bucket)
    assert ranked[0] == "SettlementLagError: settlement lag gave up"
    timeouts = [anchor for anchor in ranked if anchor.startswith("TimeoutError")]
    assert timeouts[0] == "TimeoutError: the one said in conversation"  # within a kind: score, then recency
    assert timeouts[1:3] == [
        f"TimeoutError: {ident.format(k=1099)} closed",
        f"TimeoutError: {ident.format(k=1098)} closed",
    ]


def test_a_config_value_keeps_the_section_it_stands_under():
    text = (
        "report:\n  stale: false\ncheckout_backoff:\n  enabled: true\n\n"
        "  monthly_cost_usd: 6976  # $6,976 per month\n  environment: qa\n"
    )
    start = text.index("$6,976")
    assert context_words(text, start, start + len("$6,976")) == "checkout_backoff monthly_cost_usd … per month"
    flat = "monthly_cost_usd: 6976  # $6,976 per month"
    start = flat.index("$6,976")
    assert context_words(flat, start, start + len("$6,976")) == "monthly_cost_usd … per month"


def test_a_cache_keys_hex_half_is_not_taken_for_a_commit():
    log = (
        "INFO [app.db] cache miss key=user:f2a1d9bd3404 ttl=300\nmerged 3f8a4b2 into main (see also 9c1d2e3f)\n"
        "pulled registry.io/shop-api:7e6d5c4b"
    )
    commits = [anchor for kind, anchor in anchors_in(log, False) if kind == "commit"]
    assert commits == ["3f8a4b2", "9c1d2e3f", "7e6d5c4b"]  # an image tagged with its commit keeps it


def test_a_warning_that_carries_an_error_code_is_an_error_line():
    log = (
        "2025-03-13T22:14:02.111Z WARNING [app.http] upstream rejected voucher rate limiter request "
        "code=EVOU-5238 status=429\n"
        "2025-03-13T22:14:03.000Z INFO    [app.http] picked up PAY-342 from the queue\n"
        "2025-03-13T22:14:04.000Z ERROR   [app.db] cache evict key=user:f2a1d9bd3404"
    )
    errors = [anchor for kind, anchor in anchors_in(log, False) if kind == "error"]
    assert errors == ["[app.http] upstream rejected voucher rate limiter request code=EVOU-5238 status=429"]
    assert error_signature(errors[0]) == "EVOU-5238"


@pytest.mark.parametrize(
    "line",
    [
        "2025-03-13T22:14:03.000Z INFO    [app.queue] picked up ERR-1042 code=EPAY-4135 from the queue",
        "a1b2c3d PAY-342: log at WARN when the payout is retried",
        '    logger.log(logging.ERROR, "upstream said code=EPAY-4135")',
        '    raise PayoutError("[E4711] payout failed")  # ERROR path',
        "2025-03-13T22:14:03.000Z WARNING [app.http] ticket PAY-342 is waiting for review",
    ],
)
def test_a_line_that_only_mentions_a_code_or_a_level_is_not_an_error(line):
    assert [anchor for kind, anchor in anchors_in(line, False) if kind == "error"] == []


def test_a_long_coded_warning_is_cut_around_its_code_not_dropped():
    line = "2025-03-13T22:14:02.111Z WARNING [app.http] upstream rejected " + "x" * 300 + " code=EPAY-4135 status=409"
    errors = [anchor for kind, anchor in anchors_in(line, False) if kind == "error"]
    assert len(errors) == 1 and "code=EPAY-4135" in errors[0] and len(errors[0]) <= 240


def test_a_tight_index_tells_more_error_lines_than_identifiers_of_other_kinds():
    """An error line answers "what did it crash with?" on its own; a PR number or a path from a listing needs its
    line."""
    index = AnchorIndex()
    for k in range(40):
        index.add("ref", f"#{4000 + k}", k)
        index.add("path", f"src/shop/module_{k}.py", k)
        index.add("error", f"Shop{k}Error: step {k} of the export gave up", k)
    text, _ = render_index(index, 600)
    errors = text.count("Error: step")
    refs = sum(f"#{4000 + k}" in text for k in range(40))
    assert errors >= 1.5 * refs > 0
