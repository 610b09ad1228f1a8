"""A kept fact is usable only next to what it is about: error lines, identifiers and decisions in a compacted context.

A fact counts as attributed here when a word of its subject stands on the answer's line or
the line next to it — the way a reader (or a model) takes it in. Each session buries its
facts among filler turns, is compacted (deterministic notes), and compacted again after a
restart (the digest carried through ``export_state`` / ``load_state`` as JSON), so the
earliest facts must stay attributed across compactions too.
"""

from __future__ import annotations

import asyncio
import json

from agent.context_compressor import ContextCompressor
from agent.messages import is_summary
from agent.settings import CompressionSettings
from agent.tokens import content_text
from tests.fakes.histories import Transcript

CRASH = (
    "2025-03-24T23:10:01.000Z INFO    [app.http] GET /healthz 200 3ms\n"
    "2025-03-24T23:10:02.000Z ERROR   [celery.task] billing settle job settle_nightly crashed (attempt 3/3)\n"
    "Traceback (most recent call last):\n"
    '  File "/app/src/billing/tasks.py", line 40, in run\n'
    "    settle(batch)\n"
    '  File "/app/src/billing/worker.py", line 88, in settle\n'
    '    ref = row.meta["customer_ref"]\n'
    "KeyError: 'customer_ref' [E7139]\n"
)
PYTEST = (
    "____ test_refund ____\n\nE       AssertionError: assert 4 == 3\n\ntests/billing/test_refund.py:12: AssertionError"
)
REJECTED = (
    "2025-03-24T22:20:53.403Z WARNING [app.http] upstream rejected dunning throttling request code=EDUN-5169 status=422"
)


def filler(t: Transcript, start: int, turns: int) -> None:
    for i in range(start, start + turns):
        t.user(f"Step {i}: look at worker {i} please.")
        t.call("read_file", {"path": f"svc/worker_{i}.py"}, "code line\n" * 200)
        t.assistant(f"Worker {i} looks fine.")


def first_part() -> Transcript:
    t = Transcript(system="You are a release assistant.")
    t.exchange("Help me ship the billing service.", "Sure.")  # the protected head
    t.user("Why does the nightly settle keep failing?")
    t.call(
        "terminal",
        {"command": "kubectl logs deploy/billing-worker --since=2h"},
        "\n".join([REJECTED] * 1 + ["ok"] * 50) + "\n" + CRASH,
    )
    t.call("run_tests", {"command": "pytest tests/billing -x"}, PYTEST)
    t.assistant("We keep ENABLE_FAST_SETTLE off for the billing retry rollout until the backfill is done.")
    t.user("Decision: for billing we use exponential backoff capped at 55 seconds.")
    t.user("I prefer Decimal for money, never float.")
    filler(t, 0, 30)
    return t


def attributed(text: str, answer: str, subject: str) -> bool:
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if answer in line:
            near = "\n".join(lines[max(0, number - 1) : number + 2]).replace(answer, "\0")
            if subject in near:
                return True
    return False


def summary_text(messages: list[dict]) -> str:
    return next(content_text(m["content"]) for m in messages if is_summary(m))


def compactor() -> ContextCompressor:
    return ContextCompressor("test-model", 60_000, CompressionSettings(tail_mode="lean", protect_last_n=4))


def compacted_twice() -> tuple[str, str]:
    engine = compactor()
    first = asyncio.run(engine.compress(first_part().messages, force=True))
    restarted = compactor()
    restarted.load_state(json.loads(json.dumps(engine.export_state())))
    more = Transcript(system=None)
    more._ids.n, more._calls = 1_000, 1_000
    filler(more, 30, 30)
    second = asyncio.run(restarted.compress(first + more.messages, force=True))
    return summary_text(first), summary_text(second)


def line_of(text: str, answer: str) -> str:
    return next(line for line in text.splitlines() if answer in line)


def test_error_lines_stand_with_their_frame_job_or_command_after_every_compaction():
    for text in compacted_twice():
        crash = line_of(text, "KeyError: 'customer_ref' [E7139]")
        assert "from billing/worker.py:88 in settle" in crash and "billing settle job" in crash
        failure = line_of(text, "E       AssertionError: assert 4 == 3")
        assert 'from tests/billing/test_refund.py:12 in test_refund (run_tests "pytest tests/billing -x")' in failure


def test_codes_and_flags_stand_with_their_subject_after_every_compaction():
    for text in compacted_twice():
        assert attributed(text, "EDUN-5169", "dunning throttling")
        assert attributed(text, "ENABLE_FAST_SETTLE", "billing retry")


def test_the_headings_list_the_decisions_and_preferences_the_quotes_hold():
    first, second = compacted_twice()
    for text in (first, second):
        decisions = text.split("## Key Decisions")[1].split("\n## ")[0]
        preferences = text.split("## Constraints & Preferences")[1].split("\n## ")[0]
        assert "exponential backoff capped at 55 seconds" in decisions
        assert "Decimal for money, never float" in preferences
        assert "(none recorded)" not in decisions and "(none recorded)" not in preferences
