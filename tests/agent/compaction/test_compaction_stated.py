"""What the conversation stated survives repeated compaction, beside what it is about (B6: never forget a decision).

The facts a person lays down (decisions, standing rules, where code moved, who owns what, a
port) and the work the assistant reports (a commit with its subject, a PR it opened) are
planted in the first turns; then tool output full of identifiers — commit
listings, paths, error lines — fills the window again and again. Every planted fact must
still stand on one line with its subject after twenty compactions, in both tail modes.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from agent.context_compressor import ContextCompressor
from agent.settings import CompressionSettings
from agent.tokens import content_text, count_message, count_messages
from tests.fakes.histories import Transcript, attributed

#: (what a message says, the answer asked about later, the subject that must stand beside it).
STATED = [
    (
        "user",
        "Decision for the coupon failover: we go with server-sent events, not websockets, "
        "because proxies kill idle sockets.",
        "server-sent events",
        "coupon failover",
    ),
    (
        "user",
        "btw, house rule: keep functions under 35 lines, split anything longer. please remember that",
        "under 35 lines",
        "functions",
    ),
    (
        "user",
        "fyi the refund warmup code moved to src/shop/refund/warmup.py last sprint, ignore the old module",
        "src/shop/refund/warmup.py",
        "refund warmup",
    ),
    (
        "user",
        "Aurelio Lindgren owns the remittance rounding, ping them before you change anything there",
        "Aurelio Lindgren",
        "remittance rounding",
    ),
    (
        "user",
        "fyi the voucher import service in canary listens on port 19077, not the default",
        "19077",
        "voucher import",
    ),
    (
        "assistant",
        'Committed it as `83273e4` on `chore/hydrate`: "build(subscription): rework the subscription nightly export".',
        "83273e4",
        "subscription nightly export",
    ),
    ("assistant", "I opened PR #4692 with the remittance warmup change. CI is running.", "#4692", "remittance warmup"),
    (
        "assistant",
        "Agreed, for the checkout migration we'll use optimistic locking rather than SELECT FOR UPDATE, "
        "since row locks stalled batches.",
        "optimistic locking",
        "checkout migration",
    ),
]


def tool_round(t: Transcript, rng: random.Random, round_: int) -> None:
    """A routine question and a bulky output crowded with anchors: commits, paths, error lines."""
    t.user(f"check the worker logs for round {round_} again")
    lines = []
    for k in range(40):
        sha = "".join(rng.choice("0123456789abcdef") for _ in range(7))
        lines.append(f"{sha} fix(worker): patch src/shop/pkg{round_}/mod{k}.py retry path")
        lines.append(f"ERROR [job-{round_}-{k}] ValueError: bad row {rng.randrange(10_000)} in batch {k}")
    t.call("terminal", {"command": f"git log --oneline -n 40 && tail worker-{round_}.log"}, "\n".join(lines))
    t.assistant(f"Round {round_} looks the same as before.")


def replay(tail_mode: str) -> tuple[str, int]:
    """The planted facts, then tool rounds compacted at the threshold until twenty compactions; the final context."""
    rng = random.Random(5)
    engine = ContextCompressor("test-model", 60_000, CompressionSettings(tail_mode=tail_mode, protect_last_n=6))
    t = Transcript(system="You are a coding assistant.")
    t.exchange("Let's work on the shop backend tonight.", "Sure.")
    for role, text, _, _ in STATED:
        (t.user if role == "user" else t.assistant)(text)
    working = list(t.messages)
    compactions, round_ = 0, 0
    while compactions < 20:
        start = len(t.messages)
        tool_round(t, rng, round_)
        round_ += 1
        working += t.messages[start:]
        if engine.should_compress(count_messages(working)):
            working = asyncio.run(engine.compress(working))
            assert engine.last_compaction.outcome == "compacted"
            compactions += 1
    return "\n".join(content_text(m.get("content")) for m in working), round_


@pytest.mark.parametrize("tail_mode", ["lean", "legacy"])
def test_stated_facts_stay_beside_their_subject_after_twenty_compactions(tail_mode):
    context, rounds = replay(tail_mode)
    assert rounds > 60  # the planted turns were folded long ago, again and again
    lost = [answer for _, _, answer, subject in STATED if not attributed(context, answer, subject)]
    assert lost == []


def word(i: int) -> str:
    """A made-up word per number (sentences that differ only in digits are one sentence to the digest)."""
    return "".join("aeioubdfgk"[int(digit)] for digit in str(i + 100))


def test_a_compaction_that_folds_little_keeps_the_notes_it_carries():
    """The budget counts everything the summary stands for: a huge new output in the tail does not shrink the notes."""
    engine = ContextCompressor("test-model", 200_000, CompressionSettings(tail_mode="legacy"))
    t = Transcript(system="You are a coding assistant.")
    t.exchange("Let's go through the exports.", "Sure.")
    decisions = [
        f"Decision for the {word(i)} export: we go with {word(i)} queues, not cron, because cron lost rows."
        for i in range(120)
    ]
    for i, decision in enumerate(decisions):
        t.user(decision)
        t.call("read_file", {"path": f"src/exports/{word(i)}.py"}, f"def {word(i)}():\n" + "    step()\n" * 300)
    first = asyncio.run(engine.compress(list(t.messages)))
    first_summary = engine.last_compaction.summary_tokens
    start = len(t.messages)
    t.user("now read the whole export log")
    t.call("read_file", {"path": "logs/export.log"}, "\n".join(f"row {k} exported ok" for k in range(10_000)))
    t.assistant("Read it.")
    second = asyncio.run(engine.compress(first + t.messages[start:]))
    stats = engine.last_compaction
    assert stats.outcome == "compacted" and stats.tokens_after > stats.tokens_before / 2  # the tail kept most of it
    assert first_summary * 0.9 <= stats.summary_tokens <= engine.max_summary_tokens
    context = "\n".join(content_text(m.get("content")) for m in second)
    assert [decision for decision in decisions if decision not in context] == []
    summary = next(m for m in second if m.get("_compressed_summary"))
    assert count_message(summary) <= engine.max_summary_tokens + 50


def test_what_the_conversation_stated_takes_room_before_identifiers_from_tool_output():
    """Forty decisions the assistant wrote all stay in a 3K summary beside a flood of tool anchors (the index gives
    way)."""
    rng = random.Random(3)
    engine = ContextCompressor("test-model", 60_000, CompressionSettings(tail_mode="lean", protect_last_n=4))
    t = Transcript(system="You are a coding assistant.")
    t.exchange("Let's go through the exports.", "Sure.")
    decisions = [
        f"Agreed, for the {word(i)} export we'll use {word(i)} queues rather than cron, since cron lost rows."
        for i in range(40)
    ]
    for i, decision in enumerate(decisions):
        t.assistant(decision)
        tool_round(t, rng, i)
    compacted = asyncio.run(engine.compress(list(t.messages)))
    assert engine.last_compaction.outcome == "compacted"
    context = "\n".join(content_text(m.get("content")) for m in compacted)
    assert [decision for decision in decisions if decision not in context] == []
    assert "## Anchor Index" in context
