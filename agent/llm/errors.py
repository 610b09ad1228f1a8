"""Typed provider failures, so callers decide by kind (retry, shrink, give up) instead of by message text."""

from __future__ import annotations


class ProviderError(Exception):
    """Any failure to get a usable completion from a provider."""

    #: Whether trying the same request again later can succeed.
    retryable: bool = False

    def __init__(self, message: str, *, status: int | None = None, body: str | None = None,
                 retry_after: float | None = None) -> None:
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

    def __init__(self, message: str, *, retry_after: float | None = None, status: int | None = 429, body: str | None = None) -> None:
        super().__init__(message, status=status, body=body, retry_after=retry_after)


class RetryWaitTooLong(ProviderError):
    """The provider asked for a wait longer than the client's cap: failing now beats retrying early."""


class ContextTooLong(ProviderError):
    """The request does not fit the model's window (a 400/413 that says so)."""


class WindowExceeded(ContextTooLong):
    """A request that would not fit the model's window even after compaction: refused here, never sent."""


class BadResponse(ProviderError):
    """A 2xx answer that cannot be used: malformed JSON, an unexpected shape, or no content at all.

    Retried like a 5xx (a model's empty answer is often a one-off), except where the answer says
    why it is empty: an answer cut off by its token budget or a content filter is final.
    """

    retryable = True

    def __init__(self, message: str, *, status: int | None = None, body: str | None = None,
                 final: bool = False) -> None:
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


#: Phrases providers use when a prompt does not fit the window (lower case).
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
)
#: Error types and codes providers use for a failure that another try may cure (lower case).
_TRANSIENT_KINDS = frozenset({"overloaded_error", "api_error", "server_error", "timeout_error", "internal_error",
                              "service_unavailable", "rate_limit_error", "rate_limit_exceeded"})


def classify_failure(message: str, *, status: int | None, detail: str, kind: str = "") -> ProviderError:
    """The typed error for a provider's refusal: from an HTTP status, or from an error reported mid-stream.

    ``detail`` is the provider's own text (searched for context-length phrases); ``kind`` its
    error type or code, which decides when there is no status (a stream's ``error`` event).
    """
    kind = kind.lower()
    lowered = f"{kind} {detail}".lower()
    if status in (None, 400, 413, 422) and any(marker in lowered for marker in CONTEXT_LENGTH_MARKERS):
        return ContextTooLong(message, status=status, body=detail)
    if status == 429 or (status is None and kind in ("rate_limit_error", "rate_limit_exceeded")):
        return RateLimited(message, status=status, body=detail)
    if status == 408 or (status is None and kind == "timeout_error"):
        return ProviderTimeout(message, status=status, body=detail)
    if status is not None and (status == 409 or status >= 500):
        return ProviderUnavailable(message, status=status, body=detail)
    if status is None and (kind in _TRANSIENT_KINDS or not kind):
        return ProviderUnavailable(message, body=detail)
    return ProviderRejected(message, status=status, body=detail)


def empty_answer(finish_reason: str) -> BadResponse:
    """The error for an answer with neither text nor tool calls; final when the answer says why it is empty."""
    if finish_reason == "length":
        return BadResponse("the answer is empty: the model spent its whole token budget before writing (a reasoning "
                           "model thinks first); raise model.max_output_tokens", final=True)
    if finish_reason == "content_filter":
        return BadResponse("the provider's content filter withheld the answer", final=True)
    return BadResponse("the answer has no text and no tool calls")
