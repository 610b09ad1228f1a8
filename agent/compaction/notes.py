"""The summary's notes: what the summarizer writes about the folded middle, and the text the summary carries.

A model adds to the digest's deterministic notes, never replaces them: its notes come first,
within their share of the summary budget, and the digest's notes, quotes, listing lines and
anchor index share the rest. The summarizer runs behind the guard's cooldowns; below the
critical level a summarizer that cannot run calls the compaction off (nothing is dropped
without its notes), at it the digest's notes go alone. A refusal that teaches a smaller
summarizer window plans the transcript's pieces again within it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agent.compaction import framing
from agent.compaction.anchors import anchors_in
from agent.compaction.cut import Cut
from agent.compaction.digest import Digest, call_arguments_text
from agent.compaction.fallback_summary import render_body
from agent.compaction.guard import CompactionGuard
from agent.compaction.prune import prune_tool_outputs
from agent.compaction.summarizer import (
    Summarizer,
    SummarizerFailure,
    SummaryOutcome,
    WindowRefused,
    piece_capacity,
    summarize_transcript,
)
from agent.compaction.summary_prompt import transcript_entries
from agent.messages import SUMMARY_PREFIX, Message, tool_names_by_call_id
from agent.tokens import content_text, count_text

#: Share of the summary budget (after the header) a model's notes may take; the digest's notes,
#: quotes, listing lines and anchor index share the rest, so a model adds to them, never replaces them.
MODEL_NOTES_SHARE = 0.3
#: Share of the summary budget the deterministic notes may use (the anchor index takes what they leave):
#: what the conversation stated comes before identifiers taken from tool output.
DETERMINISTIC_BODY_SHARE = 0.5
#: Share of the summary budget the verbatim user messages may use before the notes and the index.
QUOTE_SHARE = 0.2
#: Share of the summary budget the telling lines of long tool listings may use before the index.
LISTING_SHARE = 0.2
#: The model's notes use at most 1/N of the summarizer's window (room for the transcript pieces).
SUMMARIZER_WINDOW_SHARE = 6


@dataclass(frozen=True)
class Previous:
    """The notes the previous compaction left, and who wrote them ("model", "deterministic", "fallback")."""

    notes: str | None
    source: str | None


@dataclass(frozen=True)
class ModelNotes:
    """What the summarizer step gave: its notes (None without them), calls made, and whether to abort."""

    source: str
    body: str | None = None
    calls: int = 0
    error: str | None = None
    #: Why the compaction is called off (a summarizer that cannot run below the critical level).
    abort: str | None = None


@dataclass(frozen=True)
class NoteTaker:
    """The summarizer as one compaction asks it for notes: behind the guard's cooldowns, within its window."""

    summarizer: Summarizer | None
    guard: CompactionGuard
    #: The summarizer's window, read again after a refusal (which may have taught a smaller one).
    window: Callable[[], int]

    async def notes(
        self, now: float, cut: Cut, asked: int, previous_summary: str | None, focus_topic: str | None, critical: bool
    ) -> ModelNotes:
        """The summarizer's notes on the middle; below the critical level a summarizer that cannot run
        aborts the compaction (nothing is dropped without its notes), at it the digest's notes go alone."""
        if self.summarizer is None:
            return ModelNotes(source="deterministic")
        if not self.guard.summarizer_allowed(now):
            reason = self.guard.blocked_reason(now) or "summarizer cooling down"
            if not critical:
                return ModelNotes(source="fallback", abort=reason)
            return ModelNotes(source="fallback", error=reason)
        body_budget = min(asked, self.window() // SUMMARIZER_WINDOW_SHARE)
        try:
            outcome = await self._summarize(cut.middle, cut.middle_counts, body_budget, previous_summary, focus_topic)
        except SummarizerFailure as failure:
            self.guard.on_summarizer_failure(now, failure.reason, failure.retry_after)
            abort = None if critical else f"summarizer failed: {failure.reason}"
            return ModelNotes(source="fallback", calls=failure.calls, error=failure.reason, abort=abort)
        self.guard.on_summarizer_success()
        return ModelNotes(source=self.summarizer.name, body=outcome.text, calls=outcome.calls)

    async def _summarize(
        self,
        middle: Sequence[Message],
        counts: Sequence[int],
        budget: int,
        previous_summary: str | None,
        focus_topic: str | None,
    ) -> SummaryOutcome:
        """The summarizer's notes on ``middle``; a refusal that teaches a smaller window plans the pieces again
        within it (a guessed window must never cost the model's notes)."""
        refused_calls = 0
        while True:
            window = self.window()
            try:
                outcome = await self._summarize_within(window, middle, counts, budget, previous_summary, focus_topic)
            except WindowRefused as refused:
                refused_calls += refused.calls
                if refused.window >= window:
                    refused.calls = refused_calls
                    raise
                continue
            return SummaryOutcome(outcome.text, outcome.calls + refused_calls)

    async def _summarize_within(
        self,
        window: int,
        middle: Sequence[Message],
        counts: Sequence[int],
        budget: int,
        previous_summary: str | None,
        focus_topic: str | None,
    ) -> SummaryOutcome:
        assert self.summarizer is not None
        budget = min(budget, window // SUMMARIZER_WINDOW_SHARE)
        previous_tokens = count_text(previous_summary) if previous_summary else 0
        capacity = piece_capacity(window, budget, max(previous_tokens, budget))
        entries = transcript_entries(
            prune_tool_outputs(middle),
            counts,
            tool_names_by_call_id(middle),
            max_entry_tokens=max(capacity // 2, 500),
        )
        return await summarize_transcript(
            self.summarizer,
            entries,
            budget_tokens=budget,
            previous_summary=previous_summary,
            previous_summary_tokens=previous_tokens,
            focus_topic=focus_topic,
            summarizer_context=window,
        )


def summary_text(
    digest: Digest, room: int, cut: Cut, body: str | None, previous: Previous, focus_topic: str | None
) -> str:
    """The summary's text: the model's notes (if any) first, then the digest's, within ``room``."""
    carried = previous.notes if body is None and previous.source == "model" else None
    notes = framing.compose(
        digest,
        room,
        model_notes=body,
        render_body=lambda budget, quoted, said: render_body(
            digest, budget, quoted_ids=quoted, focus_topic=focus_topic, earlier_summary=carried, said=said
        ),
        retained=_retained_anchors([*cut.head, *cut.tail]).__contains__,
        body_share=DETERMINISTIC_BODY_SHARE,
        quote_share=QUOTE_SHARE,
        listing_share=LISTING_SHARE,
        model_share=MODEL_NOTES_SHARE,
    )
    return notes.text


def notes_of(earlier_summary: str | None) -> str | None:
    """The notes part of an earlier summary message (its framing paragraph removed)."""
    if not earlier_summary:
        return None
    text = earlier_summary.strip()
    if text.startswith(SUMMARY_PREFIX):
        _, _, rest = text.partition("\n\n")
        text = rest or text
    return text


def _retained_anchors(messages: Sequence[Message]) -> set[str]:
    """Anchors that survive verbatim in the kept messages (no need to list them in the index)."""
    found: set[str] = set()
    for message in messages:
        if message.get("_compressed_summary"):
            continue
        text = content_text(message.get("content"))
        found.update(anchor for _, anchor in anchors_in(text, message.get("role") != "tool"))
        if message.get("tool_calls"):
            found.update(anchor for _, anchor in anchors_in(call_arguments_text(message), True))
    return found
