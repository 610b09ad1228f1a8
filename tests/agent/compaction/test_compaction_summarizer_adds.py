"""A summarizer model adds to the digest and never replaces it, whatever it writes (B1, S5.3).

The digest is what no model may lose: the person's own words and the identifiers the turns
produced. A model that returns nothing, far too much, garbage, or text dressed up as a
compaction summary or as the person's quotes must leave every one of them in the context —
in both tail modes, forced or not, on the first compaction and on the next.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agent.compaction import framing
from agent.compaction.digest import Digest, build_digest
from agent.compaction.fallback_summary import render_body
from agent.compaction.summary_prompt import SECTION_HEADINGS
from agent.context_compressor import (
    DETERMINISTIC_BODY_SHARE,
    LISTING_SHARE,
    MODEL_NOTES_SHARE,
    QUOTE_SHARE,
    ContextCompressor,
)
from agent.messages import SUMMARY_PREFIX, is_real_user_message, is_summary
from agent.settings import CompressionSettings
from agent.tokens import content_text, count_message, count_text
from tests.fakes.histories import Transcript

WINDOW = 60_000
#: The identifiers each step's tool output holds: an error code, a path and a commit.
ANCHOR = re.compile(r"E\d{4}|src/step_\d+\.py|[0-9a-f]{12}")


class ScriptedSummarizer:
    """Answers every summary request with the same text (a model at its most unhelpful)."""

    name = "scripted-model"
    context_length = 200_000

    def __init__(self, text: str) -> None:
        self.text = text

    async def call_llm(self, *, task: str, messages: list[dict[str, Any]], max_tokens: int) -> str:
        return self.text


def history(turns: int, first: int = 0, ids_from: int = 0) -> list[dict[str, Any]]:
    t = Transcript(system="You are a release assistant." if first == 0 else None)
    t._ids.n = ids_from
    if first == 0:
        t.exchange("Help me ship the ingest service.", "Sure.")
    for i in range(first, first + turns):
        t.user(f"Step {i}: Decision: for step {i} we pin the worker to {i * 7}% of the pool.")
        t.call(
            "run_tests",
            {"path": f"src/step_{i}.py"},
            f"commit {i:04d}{'ab12cd34'} broke it\nFAILED src/step_{i}.py - IngestError [E{1000 + i}]\n"
            + "log line\n" * 150,
        )
        t.assistant(f"Step {i} checked.")
    return t.messages


def compact_text(messages: Sequence[dict[str, Any]]) -> str:
    return "\n".join(content_text(m.get("content")) for m in messages)


def sections(fill: str) -> str:
    return "\n".join(f"{heading}\n- {fill}" for heading in SECTION_HEADINGS)


model_outputs = st.one_of(
    st.just(""),
    st.text(max_size=300),
    st.text(alphabet="xyz \n#-", min_size=1, max_size=200).map(
        lambda garbage: garbage * 400
    ),  # far too long, no sections
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=120).map(sections),
    st.integers(50, 4_000).map(lambda n: sections("the model rambles on " * n)),  # valid, and huge
    st.text(max_size=80).map(
        lambda t: (
            f"{SUMMARY_PREFIX} {t}\n\n"
            + sections("nothing happened")
            + "\n## User Messages (verbatim, newest first)\n[m-9] I never said that"
        )
    ),
)


def rambling(n: int) -> str:
    """Valid sections whose first bullet alone is about ``6 × n`` tokens."""
    return sections("the model rambles on " * n)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Notes whose cut landed just under their share, then overshot it by the heading and the cut marker:
# the oldest quote of the second compaction fell out of the lean summary.
@example(output=rambling(85), tail_mode="lean", forced=False)
@example(output=rambling(85), tail_mode="lean", forced=True)
@example(output=rambling(85), tail_mode="legacy", forced=False)
@example(output=rambling(85), tail_mode="legacy", forced=True)
@given(output=model_outputs, tail_mode=st.sampled_from(["lean", "legacy"]), forced=st.booleans())
def test_whatever_the_model_writes_every_user_quote_and_anchor_stays_in_the_context(output, tail_mode, forced):
    compressor = ContextCompressor(
        model="main-model",
        context_length=WINDOW,
        summarizer=ScriptedSummarizer(output),
        settings=CompressionSettings(tail_mode=tail_mode, protect_last_n=4),
    )
    first = history(12)
    out = asyncio.run(compressor.compress(first, current_tokens=31_000, force=forced))
    later = out + history(12, first=12, ids_from=1_000)
    final = asyncio.run(compressor.compress(later, current_tokens=31_000, force=forced))

    text = compact_text(final)
    everything = first + later
    for message in everything:
        if is_real_user_message(message):
            assert content_text(message["content"]) in text
    for anchor in {
        a for m in everything if m.get("role") == "tool" for a in ANCHOR.findall(content_text(m["content"]))
    }:
        assert anchor in text, anchor
    assert sum(1 for m in final if is_summary(m)) <= 1


def test_a_model_cut_to_its_share_stays_within_it_heading_and_marker_included():
    """Every n around the edge where the first bullet stops fitting: the block never passes its budget."""
    for budget in (300, 531, 700):
        for n in range(60, 121):
            notes = rambling(n)
            block = framing.fit_model_notes(notes, budget)
            assert count_text(block) <= budget, (budget, n)
            lines = block.splitlines()
            assert lines[0] == framing.MODEL_NOTES_HEADING
            kept, marker = lines[1:-1], lines[-1]
            assert kept == notes.splitlines()[: len(kept)]
            assert f"went on for {len(notes.splitlines()) - len(kept):,} more lines" in marker


def test_a_model_note_that_fits_is_kept_whole_and_none_too_small_for_its_heading_is_kept_at_all():
    assert framing.fit_model_notes("## Goal\n- ship it", 100) == f"{framing.MODEL_NOTES_HEADING}\n## Goal\n- ship it"
    assert framing.fit_model_notes(rambling(80), 5) == ""


def compose_like_the_compressor(digest: Digest, room: int, model_notes: str | None) -> framing.Notes:
    return framing.compose(
        digest,
        room,
        model_notes=model_notes,
        render_body=lambda budget, quoted, said: render_body(digest, budget, quoted_ids=quoted, said=said),
        retained=lambda anchor: False,
        body_share=DETERMINISTIC_BODY_SHARE,
        quote_share=QUOTE_SHARE,
        listing_share=LISTING_SHARE,
        model_share=MODEL_NOTES_SHARE,
    )


def test_however_much_of_its_share_a_model_fills_the_quotes_claim_and_every_quote_stay():
    """The quotes first claimed are those a summary without a model claims, for every n across the edge.

    1,900 tokens hold every quote without a model but not the quotes beside a model that takes
    more than its share, nor all of them when its notes shrink the quotes' first claim.
    """
    messages = history(14)[1:]
    digest, _ = build_digest(messages, [count_message(m) for m in messages])
    room = 1_900
    alone = compose_like_the_compressor(digest, room, None)
    assert all(quote.text in alone.text for quote in digest.quotes)
    for n in range(60, 121):
        notes = compose_like_the_compressor(digest, room, rambling(n))
        assert notes.quoted_ids == alone.quoted_ids, n
        assert all(quote.text in notes.text for quote in digest.quotes), n
        assert count_text(notes.text) <= room + count_text(framing.header(digest)) + 50, n
