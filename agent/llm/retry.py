"""When and how long to retry a provider request, the way the official SDKs do.

Retried: 408 (timeout), 409 (lock conflict), 429, every 5xx (and Anthropic's 529
"overloaded"), timeouts, dropped connections, streams cut short, and an answer that
cannot be used (malformed, or empty for no stated reason). Never retried: 400, 401, 403,
404, 422, an answer cut off by its token budget or a filter, and failures of
configuration (a name that does not exist, an untrusted certificate, a proxy that
refuses us) — the same request would fail the same way. A server's
``x-should-retry: true|false`` overrides the status either way. (Which status is which
error is :func:`agent.llm.errors.classify_failure`.)

The wait is exponential with full jitter (a uniform draw between 0 and the exponential
step), so many chats that failed together do not retry together; the numbers are
:data:`agent.retrying.PROVIDER_REQUEST`'s. A ``Retry-After`` /
``retry-after-ms`` the server sends is honoured exactly; one longer than
:attr:`RetryPolicy.max_retry_after` fails the call at once with a clear message instead
of retrying before the server is ready.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from agent.llm.errors import ProviderError
from agent.retrying import PROVIDER_REQUEST, Policy


def _seconds(text: str, scale: float = 1.0) -> float | None:
    """A finite, non-negative number of seconds, or None (``inf`` or ``nan`` from a server is no wait time)."""
    try:
        seconds = float(text) * scale
    except ValueError:
        return None
    return max(0.0, seconds) if math.isfinite(seconds) else None


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` / ``retry-after`` (seconds or an HTTP date)."""
    millis = headers.get("retry-after-ms")
    if millis:
        seconds = _seconds(millis, 0.001)
        if seconds is not None:
            return seconds
    value = headers.get("retry-after")
    if not value:
        return None
    seconds = _seconds(value)
    if seconds is not None:
        return seconds
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, moment.timestamp() - (time.time() if now is None else now))


def should_retry_header(headers: Mapping[str, str]) -> bool | None:
    """The server's own verdict from ``x-should-retry``, or None when it gave none."""
    value = headers.get("x-should-retry", "").strip().lower()
    if value == "true":
        return True
    if value == "false":
        return False
    return None


@dataclass
class RetryPolicy:
    """How one client retries its provider requests: :data:`~agent.retrying.PROVIDER_REQUEST` with this
    model's count (``model.max_retries``) and, for tests, shorter waits, a recording ``sleep`` or a fixed
    ``jitter`` draw. The loop is :func:`agent.retrying.retried`, run by :class:`agent.llm.endpoint.Endpoint`.

    ``max_retries`` counts the tries after the first. The n-th wait (n from 0) is drawn
    from ``[0, min(max_backoff, initial_backoff * 2**n)]`` unless the server named one.
    """

    max_retries: int = PROVIDER_REQUEST.attempts - 1
    initial_backoff: float = PROVIDER_REQUEST.base
    max_backoff: float = PROVIDER_REQUEST.cap
    #: The longest server-requested wait honoured; a longer one fails the call.
    max_retry_after: float = PROVIDER_REQUEST.max_server_wait
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    jitter: Callable[[float, float], float] = field(default=random.uniform)

    @property
    def policy(self) -> Policy:
        """:data:`~agent.retrying.PROVIDER_REQUEST` with this client's numbers."""
        return PROVIDER_REQUEST.adjusted(
            attempts=self.max_retries + 1,
            base=self.initial_backoff,
            cap=self.max_backoff,
            max_server_wait=self.max_retry_after,
        )


def worth_retrying(error: BaseException) -> bool:
    """The ``retryable`` hook of a provider request: the server's ``x-should-retry`` when it sent one, else
    whether the failure is of a retried kind (see the module docstring)."""
    if not isinstance(error, ProviderError):
        return False
    return error.should_retry if error.should_retry is not None else error.retryable


def server_wait(error: BaseException) -> float | None:
    """The ``server_wait`` hook of a provider request: its ``Retry-After`` / ``retry-after-ms``, in seconds."""
    return error.retry_after if isinstance(error, ProviderError) else None
