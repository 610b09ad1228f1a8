"""Phase 3's model call: the ``Summarizer`` protocol, the LLM-backed one, and piecewise summarizing.

Any failure — timeout, dropped connection, 429, 5xx, a context-length 400, an empty,
truncated or malformed answer, notes missing a section — surfaces as one
:class:`SummarizerFailure`, never as ``None``: the caller then keeps the transcript or
falls back to the deterministic summary, so the middle is never dropped silently.
When the transcript does not fit the summarizer's window it is summarized in pieces,
each piece updating the notes of the one before. A context-length refusal is not such a failure
when it teaches a smaller window: it raises :class:`WindowRefused`, and the caller plans the pieces
again within the window it taught.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from agent.compaction.summary_prompt import TranscriptEntry, build_request, clean_summary, missing_sections
from agent.llm.client import ChatClient
from agent.llm.errors import ContextTooLong, ProviderError
from agent.llm.retry import RetryPolicy
from agent.metering import BudgetExceeded
from agent.models import route_of_url
from agent.settings import AuxiliaryModelSettings
from agent.tokens import count_messages
from agent.usage import Usage
from agent.windows import ModelWindow, WindowTeacher, WindowUnknown, resolve_window

#: Tokens kept free in the summarizer's window besides the answer (tokenizer differences).
WINDOW_MARGIN_RATIO = 0.08
#: The answer may run this much over the requested budget before it is cut off.
ANSWER_SLACK = 1.35
#: Retries of one summarizer request: one quick one; past it the compactor backs off or falls back.
SUMMARIZER_RETRIES = 1


class SummarizerFailure(Exception):
    """The summarizer produced no usable notes; ``retry_after`` is the provider's wait hint, if any."""

    def __init__(self, reason: str, *, retry_after: float | None = None, calls: int = 1) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after
        #: Summarizer calls made before giving up (0 when none could be attempted).
        self.calls = calls


class WindowRefused(SummarizerFailure):
    """The summarizer refused a request as too long and taught a smaller window: plan again within ``window``."""

    def __init__(self, reason: str, *, window: int, calls: int = 1) -> None:
        super().__init__(reason, calls=calls)
        self.window = window


@runtime_checkable
class Summarizer(Protocol):
    """Something that answers a summarizing request with text, or raises :class:`SummarizerFailure`."""

    #: Name recorded in compaction stats (usually the model).
    name: str
    #: The summarizer's own window in tokens (decides how many pieces are needed).
    context_length: int

    async def call_llm(self, *, task: str, messages: list[dict[str, Any]], max_tokens: int) -> str: ...


class LLMSummarizer:
    """A :class:`Summarizer` over a :class:`ChatClient` and an auxiliary model.

    With a ``teacher`` its window is the one refusals taught anywhere (read on every use), and a
    context-length refusal becomes :class:`WindowRefused` once the smaller window is learned.
    """

    def __init__(
        self,
        client: ChatClient,
        model: str,
        context_length: int,
        *,
        temperature: float | None = 0.2,
        teacher: WindowTeacher | None = None,
    ) -> None:
        self.client = client
        self.model = model
        self.name = model
        self._context_length = context_length
        self.temperature = temperature
        self.teacher = teacher
        self.calls = 0
        self.usage = Usage()

    @property
    def context_length(self) -> int:
        """The window to plan requests for: the teacher's when there is one, else the one it was built with."""
        return self.teacher.window.tokens if self.teacher is not None else self._context_length

    def on_client(self, client: ChatClient) -> LLMSummarizer:
        """The same summarizer calling through ``client`` (a metered one), learning into the same book."""
        return LLMSummarizer(
            client, self.model, self._context_length, temperature=self.temperature, teacher=self.teacher
        )

    async def _learn(self, refusal: ContextTooLong, task: str) -> WindowRefused:
        """The failure to raise for a context-length refusal, once its lesson is kept."""
        assert self.teacher is not None
        assumed = self.context_length
        try:
            window = await self.teacher.refused(refusal, assumed)
        except WindowUnknown as unknown:
            return WindowRefused(f"{task}: {unknown}", window=assumed)
        return WindowRefused(f"{task}: the summarizer's window is {window:,} tokens, not {assumed:,}", window=window)

    async def call_llm(self, *, task: str = "compression", messages: list[dict[str, Any]], max_tokens: int) -> str:
        """One completion for ``task``; truncated, empty or failed answers raise :class:`SummarizerFailure`."""
        self.calls += 1
        try:
            completion = await self.client.complete(
                messages, model=self.model, max_tokens=max_tokens, temperature=self.temperature
            )
        except BudgetExceeded:
            raise  # not the summarizer failing: the person's budget is spent (no cooldown for the chat's summarizer)
        except ContextTooLong as error:
            if self.teacher is None:
                raise SummarizerFailure(f"{task}: {type(error).__name__}: {error}") from error
            raise await self._learn(error, task) from error
        except ProviderError as error:
            raise SummarizerFailure(
                f"{task}: {type(error).__name__}: {error}", retry_after=error.retry_after
            ) from error
        self.usage = self.usage + completion.usage
        if completion.truncated:
            raise SummarizerFailure(f"{task}: answer truncated at max_tokens={max_tokens}")
        if not completion.text.strip():
            raise SummarizerFailure(f"{task}: empty answer")
        return completion.text


def build_summarizer(
    settings: AuxiliaryModelSettings,
    *,
    main_model: str,
    main_base_url: str | None = None,
    main_api_key: str | None = None,
    main_dialect: str = "openai",
    main_route: str = "custom",
    stream: bool = False,
    window: ModelWindow | None = None,
    teacher: WindowTeacher | None = None,
) -> LLMSummarizer | None:
    """The summarizer ``auxiliary.compression`` describes, or None when no endpoint is known.

    A null model means the main model; a null base_url means the main route (and its request rules).
    ``window`` is where its window starts; ``teacher`` keeps what refusals teach about it.
    """
    model = settings.model or main_model
    base_url = settings.base_url or main_base_url
    if not base_url:
        return None
    dialect: Literal["anthropic", "openai"] = (
        "anthropic"
        if "anthropic.com" in base_url or (not settings.base_url and main_dialect == "anthropic")
        else "openai"
    )
    route = route_of_url(settings.base_url) if settings.base_url else main_route
    client = ChatClient(
        base_url,
        api_key=settings.api_key or main_api_key,
        dialect=dialect,
        route=route,
        stream=stream,
        options=settings.http_options(),
        retry=RetryPolicy(max_retries=SUMMARIZER_RETRIES),
        config_key="auxiliary.compression",
    )
    if window is None:
        window = resolve_window(
            model, configured=settings.context_length, configured_key="auxiliary.compression.context_length"
        )
    return LLMSummarizer(client, model, window.tokens, teacher=teacher)


@dataclass(frozen=True)
class SummaryOutcome:
    """Validated notes and how many summarizer calls they took."""

    text: str
    calls: int


def split_entries(entries: Sequence[TranscriptEntry], capacity: int) -> list[list[TranscriptEntry]]:
    """Consecutive pieces of the transcript whose estimated tokens each fit ``capacity``."""
    pieces: list[list[TranscriptEntry]] = []
    current: list[TranscriptEntry] = []
    used = 0
    for entry in entries:
        if current and used + entry.tokens > capacity:
            pieces.append(current)
            current, used = [], 0
        current.append(entry)
        used += entry.tokens
    if current or not pieces:
        pieces.append(current)
    return pieces


def piece_capacity(summarizer_context: int, budget_tokens: int, previous_summary_tokens: int) -> int:
    """Transcript tokens one request can carry: the window minus prompt, previous notes, answer and margin."""
    answer = int(budget_tokens * ANSWER_SLACK)
    fixed = count_messages(build_request([], budget_tokens=budget_tokens, previous_summary=None, focus_topic=None))
    margin = int(summarizer_context * WINDOW_MARGIN_RATIO)
    return summarizer_context - answer - fixed - margin - previous_summary_tokens * 2


async def summarize_transcript(
    summarizer: Summarizer,
    entries: Sequence[TranscriptEntry],
    *,
    budget_tokens: int,
    previous_summary: str | None,
    previous_summary_tokens: int,
    focus_topic: str | None,
    summarizer_context: int,
) -> SummaryOutcome:
    """Notes for the transcript: one call when it fits, otherwise piece by piece, each updating the last.

    Raises :class:`SummarizerFailure` when any call fails or a result lacks a required section.
    """
    capacity = piece_capacity(summarizer_context, budget_tokens, max(previous_summary_tokens, budget_tokens))
    if capacity < 1_000:
        raise SummarizerFailure(
            f"summarizer window {summarizer_context:,} leaves no room for a transcript piece "
            f"with a {budget_tokens:,}-token answer",
            calls=0,
        )
    notes = previous_summary
    calls = 0
    for piece in split_entries(entries, capacity):
        request = build_request(piece, budget_tokens=budget_tokens, previous_summary=notes, focus_topic=focus_topic)
        answer_tokens = int(budget_tokens * ANSWER_SLACK)
        prompt_tokens = count_messages(request)
        if prompt_tokens + answer_tokens > summarizer_context:  # planned from estimates: the exact count decides
            raise SummarizerFailure(
                f"a summary request of {prompt_tokens:,} tokens and a {answer_tokens:,}-token answer would not fit "
                f"the summarizer's window of {summarizer_context:,}; it was not sent",
                calls=calls,
            )
        calls += 1
        try:
            answer = await summarizer.call_llm(task="compression", messages=request, max_tokens=answer_tokens)
        except SummarizerFailure as failure:
            failure.calls = calls
            raise
        notes = clean_summary(answer)
        missing = missing_sections(notes)
        if missing:
            raise SummarizerFailure(f"summary lacks sections: {', '.join(missing)}", calls=calls)
    return SummaryOutcome(notes or "", calls)
