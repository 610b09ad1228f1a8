"""Typed provider failures, so callers decide by kind (retry, shrink, give up) instead of by message text."""

from __future__ import annotations

from agent.llm.window_refusals import WindowRefusal, read_window_refusal


class ProviderError(Exception):
    """Any failure to get a usable completion from a provider."""

    #: Whether trying the same request again later can succeed.
    retryable: bool = False

    def __init__(
        self, message: str, *, status: int | None = None, body: str | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = body
        #: Seconds the provider asked to wait before another try (``Retry-After``), when it said.
        self.retry_after = retry_after
        #: The provider's own verdict (``x-should-retry``), which overrides :attr:`retryable` when set.
        self.should_retry: bool | None = None


class ProviderTimeout(ProviderError):
    """No complete answer within the client's timeout."""

    retryable = True


class ProviderUnavailable(ProviderError):
    """Connection refused or dropped, or a 5xx / overloaded answer."""

    retryable = True


class StreamInterrupted(ProviderUnavailable):
    """A streamed answer ended before the provider said it was complete; what arrived is not an answer."""


class ProviderUnreachable(ProviderError):
    """The provider cannot be reached as configured (unknown host, untrusted certificate, proxy refused).

    Trying again does not help: the message says which setting to fix.
    """


class RateLimited(ProviderError):
    """HTTP 429; ``retry_after`` is the provider's requested wait in seconds when it sent one."""

    retryable = True

    def __init__(
        self, message: str, *, retry_after: float | None = None, status: int | None = 429, body: str | None = None
    ) -> None:
        super().__init__(message, status=status, body=body, retry_after=retry_after)


class RetryWaitTooLong(ProviderError):
    """The provider asked for a wait longer than the client's cap: failing now beats retrying early."""


class ContextTooLong(ProviderError):
    """The request does not fit the model's window (a 400/413 that says so).

    ``window``, ``prompt_tokens`` and ``input_limit`` are what the refusal itself says (see
    :class:`agent.llm.window_refusals.WindowRefusal`), None where it names no number: the provider's
    figure for its window is worth more than any catalog's, so it travels with the error.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        body: str | None = None,
        retry_after: float | None = None,
        window: int | None = None,
        prompt_tokens: int | None = None,
        input_limit: int | None = None,
    ) -> None:
        super().__init__(message, status=status, body=body, retry_after=retry_after)
        self.window = window
        self.prompt_tokens = prompt_tokens
        self.input_limit = input_limit

    @classmethod
    def from_refusal(
        cls, message: str, refusal: WindowRefusal, *, status: int | None = None, body: str | None = None
    ) -> ContextTooLong:
        """The error for a refusal whose numbers were already read."""
        return cls(
            message,
            status=status,
            body=body,
            window=refusal.window,
            prompt_tokens=refusal.prompt_tokens,
            input_limit=refusal.input_limit,
        )


class WindowExceeded(ContextTooLong):
    """A request that would not fit the model's window even after compaction: refused here, never sent."""


class BadResponse(ProviderError):
    """A 2xx answer that cannot be used: malformed JSON, an unexpected shape, or no content at all.

    Retried like a 5xx (a model's empty answer is often a one-off), except where the answer says
    why it is empty: an answer cut off by its token budget or a content filter is final.
    """

    retryable = True

    def __init__(
        self, message: str, *, status: int | None = None, body: str | None = None, final: bool = False
    ) -> None:
        super().__init__(message, status=status, body=body)
        if final:
            self.retryable = False


class ProviderRejected(ProviderError):
    """Any other 4xx: bad credentials, unknown model, invalid request."""


def plain_reason(error: ProviderError) -> str:
    """What went wrong, in words a chat user may read: never the provider's own text, which can echo a
    key or name an internal address (the operator's log has the details)."""
    if isinstance(error, ProviderTimeout):
        return "did not answer in time"
    if isinstance(error, (ProviderUnavailable, ProviderUnreachable)):
        return "could not be reached"
    if isinstance(error, (RateLimited, RetryWaitTooLong)):
        return "is limiting how often it may be asked"
    if isinstance(error, WindowExceeded):
        return "was not asked: the conversation would not fit its window even compacted"
    if isinstance(error, ContextTooLong):
        return "found the conversation too long"
    if isinstance(error, BadResponse):
        return "sent an answer that could not be used"
    return "refused the request"


class InvalidRequest(ValueError):
    """The messages would be refused by any provider (broken tool pairs, bad shapes); never sent."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid messages: " + "; ".join(problems[:5]) + (" …" if len(problems) > 5 else ""))
        self.problems = problems


#: Phrases providers use when a prompt does not fit the window (lower case). Each is specific to a refusal
#: over the window: an output cap ("max_tokens is too large: 8192. This model supports at most 4096 completion
#: tokens") names no context, and compacting the conversation would not cure it.
CONTEXT_LENGTH_MARKERS = (
    "context_length_exceeded",
    "context length",
    "context window",
    "maximum context",
    "prompt is too long",
    "too many tokens",
    "input is too long",
    "reduce the length",
    "request too large",
    "exceeds the maximum",
    # Anthropic, when the prompt and max_tokens together overrun the window.
    "exceed context limit",
    # llama.cpp's server: its error type, and its sentence (which Ollama and LM Studio relay).
    "exceed_context_size_error",
    "available context size",
    "exceeds context size",
    # LM Studio: its MLX engine, and its llama.cpp engine before it named the context length.
    "context size has been exceeded",
    "cannot truncate prompt with n_keep",
    # vLLM, for a prompt over --max-model-len.
    "maximum model length",
    # OpenAI, for models whose input has a cap of its own (the GPT-5 family).
    "input tokens exceed the configured limit",
)
#: Markers no other failure uses, trusted even on an HTTP 500: llama.cpp answered an over-long prompt with
#: a 500 before it had an error type for it, and retrying such a request can never succeed.
_UNMISTAKABLE_MARKERS = ("context_length_exceeded", "exceed_context_size_error", "available context size")
#: Error types and codes providers use for a failure that another try may cure (lower case).
_TRANSIENT_KINDS = frozenset(
    {
        "overloaded_error",
        "api_error",
        "server_error",
        "timeout_error",
        "internal_error",
        "service_unavailable",
        "rate_limit_error",
        "rate_limit_exceeded",
    }
)


def classify_failure(
    message: str, *, status: int | None, detail: str, kind: str = "", body: str | None = None
) -> ProviderError:
    """The typed error for a provider's refusal: from an HTTP status, or from an error reported mid-stream.

    ``detail`` is the provider's own text (searched for context-length phrases); ``kind`` its
    error type or code, which decides when there is no status (a stream's ``error`` event).
    ``body`` is the whole error body when ``detail`` is a digest of it: fields the digest drops
    (llama.cpp's ``n_ctx``, a router's relayed upstream error) are read from it.
    """
    kind = kind.lower()
    if _is_context_refusal(status, f"{kind} {detail} {body or ''}".lower()):
        refusal = read_window_refusal(detail)
        if body:
            refusal = refusal.or_else(read_window_refusal(body))
        return ContextTooLong.from_refusal(message, refusal, status=status, body=detail)
    failure = _status_failure(status) if status is not None else _stream_failure(kind)
    return failure(message, status=status, body=detail)


def _status_failure(status: int) -> type[ProviderError]:
    """The kind of a refusal that came as an HTTP status (and is not over the window)."""
    if status == 429:
        return RateLimited
    if status == 408:
        return ProviderTimeout
    if status == 409 or status >= 500:
        return ProviderUnavailable
    return ProviderRejected


def _stream_failure(kind: str) -> type[ProviderError]:
    """The kind of a refusal reported without a status, mid-stream: its error type decides, and a failure that
    names no type is taken as passing."""
    if kind in ("rate_limit_error", "rate_limit_exceeded"):
        return RateLimited
    if kind == "timeout_error":
        return ProviderTimeout
    if kind in _TRANSIENT_KINDS or not kind:
        return ProviderUnavailable
    return ProviderRejected


def _is_context_refusal(status: int | None, lowered: str) -> bool:
    """Whether a failure with ``status`` and this (lower-cased) text says the request is over the window."""
    if status in (None, 400, 413, 422):
        return any(marker in lowered for marker in CONTEXT_LENGTH_MARKERS)
    return status == 500 and any(marker in lowered for marker in _UNMISTAKABLE_MARKERS)


def empty_answer(finish_reason: str) -> BadResponse:
    """The error for an answer with neither text nor tool calls; final when the answer says why it is empty."""
    if finish_reason == "length":
        return BadResponse(
            "the answer is empty: the model spent its whole token budget before writing (a reasoning "
            "model thinks first); raise model.max_output_tokens",
            final=True,
        )
    if finish_reason == "content_filter":
        return BadResponse("the provider's content filter withheld the answer", final=True)
    return BadResponse("the answer has no text and no tool calls")
