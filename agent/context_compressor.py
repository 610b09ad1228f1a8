"""``ContextCompressor``: the built-in context engine.

One compaction, in order:

1. count every message (cached ``_tok``; never the whole transcript re-tokenized);
2. boundaries — head, middle, tail (lean or legacy budget), never splitting a tool pair;
3. lean mode: old tool results in the tail, and those of the head's first exchange, become
   stubs with recovery hints;
4. the digest of the ORIGINAL middle and of the stubbed results — anchors, verbatim user
   messages, tool calls, decisions, the telling lines of long tool listings — before
   anything is pruned, merged with what earlier compactions carried;
5. the notes (a stand-in line per folded photo, document or voice message among them, and the newest
   folded photos' refs on a user-role summary, so a request can still show them), within a budget on
   everything the summary stands for (this middle and what the carried digest covered, so a compaction
   that folds little does not shrink the notes it carries): the deterministic notes and the verbatim
   appendix of the digest, always; with a summarizer, its notes on the pruned middle (updating its
   previous notes from the second compaction on) are added in front, within their share — a model
   adds, never replaces; a summarizer that fails while the context is critical leaves just the
   deterministic notes;
6. assembly — head (system note on the first compaction only), summary, tail — and
   tool-pair sanitizing.

A summarizer failure below the critical level leaves the transcript untouched and starts
a cooldown; nothing is ever dropped without a summary, and every original stays retrievable.
Effectiveness is judged from the provider's reported usage, with a backoff after two
ineffective compactions, so a compaction that cannot help is not repeated every turn.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agent.codex import route_threshold
from agent.compaction import framing
from agent.compaction.assemble import assemble, summary_message
from agent.compaction.boundaries import Boundaries, head_end, plan_boundaries, planning_counts
from agent.compaction.budgets import (
    CRITICAL_RATIO,
    lean_tail_budget,
    legacy_tail_budget,
    max_summary_tokens,
    resolve_model_threshold,
    summary_budget,
    threshold_tokens,
)
from agent.compaction.cut import Cut, cut_at, fresh_tokens
from agent.compaction.digest import Digest, build_digest, call_labels
from agent.compaction.guard import CompactionGuard
from agent.compaction.lean import old_tool_result_cutoff, stub_old_tool_results
from agent.compaction.listings import search_queries
from agent.compaction.notes import (
    DETERMINISTIC_BODY_SHARE,
    LISTING_SHARE,
    MODEL_NOTES_SHARE,
    QUOTE_SHARE,
    ModelNotes,
    NoteTaker,
    Previous,
    notes_of,
    summary_text,
)
from agent.compaction.summarizer import Summarizer
from agent.context_engine import CompactionStats, ContextEngine
from agent.messages import Message
from agent.settings import CompressionSettings
from agent.tokens import ITEMS_KEY, REQUEST_OVERHEAD, content_text, count_message, count_messages, count_text
from agent.usage import Usage

# The summary's shares are set where the summary's text is composed (agent.compaction.notes); they are
# named here too, beside the engine they shape.
__all__ = [
    "DETERMINISTIC_BODY_SHARE",
    "LISTING_SHARE",
    "MODEL_NOTES_SHARE",
    "QUOTE_SHARE",
    "ContextCompressor",
    "resolve_model_threshold",
]

#: How far a rough token estimate may be off (either way) before it must not decide anything.
ROUGH_ERROR = 1.4
#: Version of :meth:`ContextCompressor.export_state`'s layout.
STATE_VERSION = 1


class ContextCompressor(ContextEngine):
    """Lossy-but-recoverable summarizing compaction; see the module docstring for the phases."""

    name = "compressor"

    def __init__(
        self,
        model: str,
        context_length: int,
        settings: CompressionSettings | None = None,
        summarizer: Summarizer | None = None,
        summarizer_context_length: int | None = None,
        *,
        clock: Callable[[], float] = time.time,
        provider: str | None = None,
    ) -> None:
        super().__init__(model, context_length)
        self.settings = settings or CompressionSettings()
        #: The route the model is reached through; the threshold can depend on it (the Codex autoraise).
        self.provider = provider
        self.summarizer = summarizer
        self.summarizer_context_length = summarizer_context_length
        self.clock = clock
        self.guard = CompactionGuard()
        self._previous_summary: str | None = None
        self._previous_summary_source: str | None = None
        self._digest: Digest | None = None
        self._conversation: str | None = None
        self.threshold = self._resolve_threshold()

    # -- thresholds and budgets --------------------------------------------------------

    def _resolve_threshold(self) -> float:
        return route_threshold(self.model, self.provider, self.settings, self.context_length)

    @property
    def threshold_tokens(self) -> int:
        return threshold_tokens(self.context_length, self.threshold)

    @property
    def tail_token_budget(self) -> int:
        """Legacy tail budget, ``threshold_tokens × target_ratio``."""
        return legacy_tail_budget(self.threshold_tokens, self.settings.target_ratio)

    @property
    def lean_tail_tokens(self) -> int:
        """Lean tail budget, 2.5% of the window within 10K–25K."""
        return lean_tail_budget(self.context_length)

    @property
    def effective_tail_budget(self) -> int:
        """The tail budget of the configured mode; lean never keeps more than legacy would.

        (On small windows lean's 10K floor could exceed the whole threshold, and a compaction
        that cannot get under the threshold only loops.)
        """
        if self.settings.tail_mode == "lean":
            return min(self.lean_tail_tokens, self.tail_token_budget)
        return self.tail_token_budget

    @property
    def max_summary_tokens(self) -> int:
        return max_summary_tokens(self.context_length)

    @property
    def summarizer_window(self) -> int:
        """The summarizer's window: the smaller of the one given and the summarizer's own (which a refusal may
        have lowered since), else the main model's."""
        own = getattr(self.summarizer, "context_length", None) if self.summarizer is not None else None
        windows = [int(w) for w in (self.summarizer_context_length, own) if w]
        return min(windows) if windows else self.context_length

    # -- decisions ---------------------------------------------------------------------

    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        if not self.settings.enabled:
            return False
        tokens = prompt_tokens if prompt_tokens is not None else self.last_prompt_tokens
        if tokens is None or tokens < self.threshold_tokens:
            return False
        return self.guard.allows(self.clock())

    def should_idle_compact(self, idle_seconds: float, prompt_tokens: int | None = None) -> bool:
        """Compact before a turn that resumes after ``idle_compact_after_seconds`` of silence."""
        limit = self.settings.idle_compact_after_seconds
        tokens = prompt_tokens if prompt_tokens is not None else self.last_prompt_tokens
        if not self.settings.enabled or limit <= 0 or idle_seconds < limit or tokens is None:
            return False
        if tokens <= self.threshold_tokens * self.settings.target_ratio:
            return False
        return self.guard.allows(self.clock())

    def update_from_response(self, usage: Mapping[str, Any] | Usage) -> Usage:
        normalised = super().update_from_response(usage)
        if normalised.prompt_tokens:
            self.guard.on_reported_usage(normalised.prompt_tokens, self.threshold_tokens, self.clock())
        return normalised

    # -- compaction --------------------------------------------------------------------

    async def compress(
        self,
        messages: list[Message],
        current_tokens: int | None = None,
        focus_topic: str | None = None,
        force: bool = False,
    ) -> list[Message]:
        messages = list(messages)
        self._follow_conversation(messages)
        counts, tokens_before = self._measure(messages, current_tokens, force)
        pressure = current_tokens if current_tokens is not None else tokens_before
        base: dict[str, Any] = dict(
            tokens_before=tokens_before, messages_before=len(messages), tail_mode=self.settings.tail_mode, forced=force
        )
        if not self.settings.enabled and not force:
            return self._unchanged(messages, "skipped", "compression disabled", base)
        plan = plan_boundaries(
            messages,
            counts,
            protect_first_n=self.settings.protect_first_n,
            tail_budget=self.effective_tail_budget,
            protect_last_n=self.settings.protect_last_n,
            min_tail_user_messages=self.settings.min_tail_user_messages,
            max_tail_tokens=self.threshold_tokens,
        )
        if plan is None:
            if force and pressure >= min(self.threshold_tokens, CRITICAL_RATIO * self.context_length):
                return self._stub_only(messages, base)  # nothing to summarize, yet the request must fit
            return self._unchanged(messages, "skipped", "nothing between the protected head and tail", base)
        critical = force or pressure >= CRITICAL_RATIO * self.context_length
        return await self._fold(messages, counts, plan, focus_topic=focus_topic, critical=critical, base=base)

    async def _fold(
        self,
        messages: list[Message],
        counts: list[int],
        plan: Boundaries,
        *,
        focus_topic: str | None,
        critical: bool,
        base: dict[str, Any],
    ) -> list[Message]:
        """The middle ``plan`` marks, folded into one summary between the kept head and tail (phases 3–6); the
        messages as they were when the summarizer calls the compaction off."""
        cut = cut_at(
            messages,
            counts,
            plan,
            seq_start=self._digest.seq if self._digest else 0,
            lean_budget=self.effective_tail_budget if self.settings.tail_mode == "lean" else None,
        )
        digest, earlier_summary = build_digest(
            cut.middle,
            cut.middle_counts,
            seq_start=cut.seq_start,
            stubbed=cut.stubbed,
            queries=search_queries(messages),
            calls=call_labels(messages),
        )
        previous = Previous(
            self._previous_summary or notes_of(earlier_summary),
            self._previous_summary_source or ("model" if earlier_summary else None),
        )
        digest = digest.merge(self._digest)
        room = max(summary_budget(digest.tokens, self.context_length) - count_text(framing.header(digest)), 500)
        asked = framing.model_notes_request(digest, room, MODEL_NOTES_SHARE)
        taker = NoteTaker(self.summarizer, self.guard, lambda: self.summarizer_window)
        model = await taker.notes(self.clock(), cut, asked, previous.notes, focus_topic, critical)
        if model.abort is not None:
            return self._unchanged(messages, "aborted", model.abort, base, error=model.error, calls=model.calls)
        text = summary_text(digest, room, cut, model.body, previous, focus_topic)
        summary = summary_message(text, plan.summary_role)
        if digest.images and plan.summary_role == "user":
            summary[ITEMS_KEY] = [dict(ref) for ref in digest.images]  # the newest folded photos stay in sight
        compacted = assemble(cut.head, summary, cut.tail, first_compaction=self.compression_count == 0)
        self._remember(digest, model.body if model.body is not None else text.partition("\n\n")[2], model.source)
        self._compacted(messages, compacted, summary, cut, model, base)
        return compacted

    def _compacted(
        self,
        messages: list[Message],
        compacted: list[Message],
        summary: Message,
        cut: Cut,
        model: ModelNotes,
        base: dict[str, Any],
    ) -> None:
        """The stats of a compaction that folded ``messages`` into ``compacted``, and the size it left."""
        tokens_after = count_messages(compacted)
        self.last_prompt_tokens = tokens_after  # the last report described the context before this rewrite
        kept_ids = {m.get("_id") for m in compacted if m.get("_id") is not None}
        self.last_compaction = CompactionStats(
            outcome="compacted",
            reason="forced" if base["forced"] else "threshold",
            tokens_after=tokens_after,
            messages_after=len(compacted),
            summary_tokens=count_message(summary),
            summarizer=model.source,
            calls=model.calls,
            compacted_messages=len(cut.middle),
            stubbed_messages=len(cut.stubbed),
            replaced_ids=tuple(
                str(m["_id"]) for m in messages if m.get("_id") is not None and m["_id"] not in kept_ids
            ),
            error=model.error,
            **base,
        )

    def _measure(self, messages: Sequence[Message], current_tokens: int | None, force: bool) -> tuple[list[int], int]:
        """Per-message tokens for planning and the transcript's total (exact when the total decides)."""
        counts = self._planning_counts(messages)
        tokens = REQUEST_OVERHEAD + sum(counts)
        critical_level = CRITICAL_RATIO * self.context_length
        if (
            current_tokens is None
            and not force
            and critical_level / ROUGH_ERROR <= tokens <= critical_level * ROUGH_ERROR
        ):
            counts = [
                count_message(m) for m in messages
            ]  # an estimate this near the critical level could be on either side
            tokens = REQUEST_OVERHEAD + sum(counts)
        return counts, tokens

    def _remember(self, digest: Digest, notes: str, source: str) -> None:
        """What the next compaction builds on (it updates these notes), and the guard's count."""
        self._previous_summary = notes
        self._previous_summary_source = "model" if source not in ("deterministic", "fallback") else source
        self._digest = digest
        self.compression_count += 1
        self.guard.on_compacted()

    def _planning_counts(self, messages: Sequence[Message]) -> list[int]:
        """Per-message tokens for this compaction: exact near the cuts, estimated in the middle.

        A summarizer gets the middle in pieces that must fit its window, so then every
        message is counted exactly.
        """
        if self.summarizer is not None:
            return [count_message(m) for m in messages]
        return planning_counts(
            messages, tail_budget=self.effective_tail_budget, protect_last_n=self.settings.protect_last_n
        )

    def _follow_conversation(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Forget carried state when asked to compact a different conversation than the one it carries.

        The head (system prompt and first exchange) survives every compaction, so its first
        user message identifies the conversation. Carrying one chat's digest into another
        chat's summary would leak it; a mismatch means the engine was reused, so it starts over.
        """
        key = _conversation_key(messages)
        if key is None:
            return
        if self._conversation is not None and key != self._conversation:
            self.on_session_reset()
        self._conversation = key

    def _stub_only(self, messages: list[Message], base: dict[str, Any]) -> list[Message]:
        """A forced compaction with no middle (one turn's own tool results fill the window): the tool results
        the model has already answered, but the newest share, become one-line stubs with their recovery
        hint; the originals go to the archive with the commit. Nothing is summarized."""
        head = head_end(messages, self.settings.protect_first_n)
        rest = messages[head:]
        fresh = fresh_tokens(self.effective_tail_budget)
        stubbed_rest, stubbed = stub_old_tool_results(rest, old_tool_result_cutoff(rest, 0, fresh))
        if not stubbed:
            return self._unchanged(messages, "skipped", "nothing between the protected head and tail", base)
        compacted = messages[:head] + stubbed_rest
        tokens_after = count_messages(compacted)
        self.last_prompt_tokens = tokens_after
        self.last_compaction = CompactionStats(
            outcome="stubbed",
            reason="forced",
            tokens_after=tokens_after,
            messages_after=len(compacted),
            stubbed_messages=len(stubbed),
            summarizer="none",
            replaced_ids=tuple(str(m["_id"]) for _, m in stubbed if m.get("_id") is not None),
            **base,
        )
        return compacted

    def _unchanged(
        self,
        messages: list[Message],
        outcome: str,
        reason: str,
        base: dict[str, Any],
        *,
        error: str | None = None,
        calls: int = 0,
    ) -> list[Message]:
        self.last_compaction = CompactionStats(
            outcome=outcome,
            reason=reason,
            tokens_after=base["tokens_before"],
            messages_after=len(messages),
            error=error,
            calls=calls,
            **base,
        )
        return messages

    # -- lifecycle and state -----------------------------------------------------------

    def on_session_reset(self) -> None:
        super().on_session_reset()
        self._previous_summary = None
        self._previous_summary_source = None
        self._digest = None
        self._conversation = None
        self.guard.reset()

    def update_model(self, model: str, context_length: int) -> None:
        """``/model``: the threshold is re-resolved from ``model_thresholds`` for the new model."""
        super().update_model(model, context_length)
        self.threshold = self._resolve_threshold()

    def export_state(self) -> dict[str, Any]:
        state = super().export_state()
        state.update(
            version=STATE_VERSION,
            engine=self.name,
            previous_summary=self._previous_summary,
            previous_summary_source=self._previous_summary_source,
            digest=self._digest.to_state() if self._digest else None,
            guard=self.guard.to_state(),
            conversation=self._conversation,
        )
        return state

    def load_state(self, state: Mapping[str, Any] | None) -> None:
        super().load_state(state)
        state = state or {}
        self._previous_summary = state.get("previous_summary")
        self._previous_summary_source = state.get("previous_summary_source")
        self._digest = Digest.from_state(state.get("digest"))
        self.guard = CompactionGuard.from_state(state.get("guard"))
        self._conversation = state.get("conversation")


def _conversation_key(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """Identity of a conversation: a digest of its first user message's text.

    Not its id: the first message of a session has none until its turn is committed, and a key
    that changed then would reset the guard state and the previous summary.
    """
    for message in messages:
        if message.get("role") == "user":
            seed = content_text(message.get("content"))
            return hashlib.sha256(seed.encode("utf-8", "replace")).hexdigest()[:20]
    return None
