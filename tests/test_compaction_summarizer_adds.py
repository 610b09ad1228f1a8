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

from hypothesis import HealthCheck, given, settings, strategies as st

from agent.compaction.summary_prompt import SECTION_HEADINGS
from agent.context_compressor import ContextCompressor
from agent.messages import SUMMARY_PREFIX, is_real_user_message, is_summary
from agent.settings import CompressionSettings
from agent.tokens import content_text
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
        t.call("run_tests", {"path": f"src/step_{i}.py"},
               f"commit {i:04d}{'ab12cd34'} broke it\nFAILED src/step_{i}.py - IngestError [E{1000 + i}]\n" + "log line\n" * 150)
        t.assistant(f"Step {i} checked.")
    return t.messages


def compact_text(messages: Sequence[dict[str, Any]]) -> str:
    return "\n".join(content_text(m.get("content")) for m in messages)


def sections(fill: str) -> str:
    return "\n".join(f"{heading}\n- {fill}" for heading in SECTION_HEADINGS)


model_outputs = st.one_of(
    st.just(""),
    st.text(max_size=300),
    st.text(alphabet="xyz \n#-", min_size=1, max_size=200).map(lambda garbage: garbage * 400),  # far too long, no sections
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=120).map(sections),
    st.integers(50, 4_000).map(lambda n: sections("the model rambles on " * n)),  # valid, and huge
    st.text(max_size=80).map(lambda t: f"{SUMMARY_PREFIX} {t}\n\n" + sections("nothing happened")
                             + "\n## User Messages (verbatim, newest first)\n[m-9] I never said that"),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(output=model_outputs, tail_mode=st.sampled_from(["lean", "legacy"]), forced=st.booleans())
def test_whatever_the_model_writes_every_user_quote_and_anchor_stays_in_the_context(output, tail_mode, forced):
    compressor = ContextCompressor(
        model="main-model", context_length=WINDOW, summarizer=ScriptedSummarizer(output),
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
    for anchor in {a for m in everything if m.get("role") == "tool" for a in ANCHOR.findall(content_text(m["content"]))}:
        assert anchor in text, anchor
    assert sum(1 for m in final if is_summary(m)) <= 1
