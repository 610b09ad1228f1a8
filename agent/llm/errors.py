"""Typed provider failures, so callers decide by kind (retry, shrink, give up) instead of by message text."""

from __future__ import annotations


class ProviderError(Exception):
    """Any failure to get a usable completion from a provider."""

    #: Whether trying the same request again later can succeed.
    retryable: bool = False

    def __init__(self, message: str, *, status: int | None = None, body: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body
        #: Seconds the provider asked to wait before another try (``Retry-After``), when it said.
        self.retry_after: float | None = None
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
        super().__init__(message, status=status, body=body)
        self.retry_after = retry_after


class RetryWaitTooLong(RateLimited):
    """The provider asked for a wait longer than the client's cap: failing now beats retrying early."""

    retryable = False


class ContextTooLong(ProviderError):
    """The request does not fit the model's window (a 400/413 that says so)."""


class BadResponse(ProviderError):
    """A 2xx answer that cannot be used: malformed JSON, an unexpected shape, or no content at all."""

    retryable = True


class ProviderRejected(ProviderError):
    """Any other 4xx: bad credentials, unknown model, invalid request."""


class InvalidRequest(ValueError):
    """The messages would be refused by any provider (broken tool pairs, bad shapes); never sent."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid messages: " + "; ".join(problems[:5]) + (" …" if len(problems) > 5 else ""))
        self.problems = problems
