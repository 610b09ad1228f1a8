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


class ProviderTimeout(ProviderError):
    """No complete answer within the client's timeout."""

    retryable = True


class ProviderUnavailable(ProviderError):
    """Connection refused or dropped, or a 5xx / overloaded answer."""

    retryable = True


class RateLimited(ProviderError):
    """HTTP 429; ``retry_after`` is the provider's requested wait in seconds when it sent one."""

    retryable = True

    def __init__(self, message: str, *, retry_after: float | None = None, status: int | None = 429, body: str | None = None) -> None:
        super().__init__(message, status=status, body=body)
        self.retry_after = retry_after


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
