"""Retries like the official SDKs, each row against a real HTTP server on loopback, with the waits recorded.

Retried: 408, 409, 429, 5xx and 529, timeouts, refused or dropped connections. Not retried:
400, 401, 403, 404, 422, an unknown host, an untrusted certificate. ``x-should-retry``
overrides the status both ways; ``Retry-After`` / ``retry-after-ms`` set the wait; a wait
longer than the cap fails at once with a message that says so.

The policies here sleep no time: they record the waits the client asked for, and how many requests
the server had by then. That a retry waited is the sleep it asked for between two requests; that a
call failed at once is a call that asked for none. No test reads a clock.
"""

from __future__ import annotations

import socket
from typing import Any

import pytest

from agent.http_options import HttpOptions
from agent.llm import ChatClient
from agent.llm.errors import (
    ProviderError,
    ProviderRejected,
    ProviderTimeout,
    ProviderUnavailable,
    ProviderUnreachable,
    RateLimited,
    RetryWaitTooLong,
)
from agent.llm.retry import RetryPolicy
from tests.fakes.llm_server import FakeLLMServer, Reply

HI = [{"role": "user", "content": "hi"}]


class RecordingPolicy(RetryPolicy):
    """A real policy whose sleeps are recorded, not slept.

    ``slept`` are the waits the retry loop asked for, ``after`` how many requests ``server`` had received at
    each of them.
    """

    def __init__(self, server: FakeLLMServer | None = None, **kwargs: Any) -> None:
        super().__init__(sleep=self._record_sleep, **kwargs)
        self.server = server
        self.slept: list[float] = []
        self.after: list[int] = []

    async def _record_sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        if self.server is not None:
            self.after.append(len(self.server.requests))


@pytest.fixture
async def server():
    async with FakeLLMServer(default=Reply.answer("recovered")) as fake:
        yield fake


def with_header(reply: Reply, name: str, value: str) -> Reply:
    reply.headers[name] = value
    return reply


RETRIED = [
    ("408 request timeout", Reply.error(408, "Request timed out", "timeout")),
    ("409 lock conflict", Reply.error(409, "conflict", "conflict")),
    ("429 without a wait", Reply.rate_limited(retry_after=None)),
    ("500", Reply.server_error(500)),
    ("502", Reply.server_error(502)),
    ("503", Reply.server_error(503)),
    ("529 overloaded", Reply.error(529, "Overloaded", "overloaded_error")),
    (
        "400 with x-should-retry: true",
        with_header(Reply.error(400, "try again", "invalid_request_error"), "x-should-retry", "true"),
    ),
]


@pytest.mark.parametrize(("case", "fault"), RETRIED, ids=[case for case, _ in RETRIED])
async def test_transient_statuses_are_retried_with_jittered_backoff(server, case, fault):
    server.enqueue(fault)
    policy = RecordingPolicy(server, max_retries=2, initial_backoff=0.2, max_backoff=1.0)
    async with ChatClient(server.openai_base_url, retry=policy) as client:
        completion = await client.complete(HI, model="m", max_tokens=5)
    assert completion.text == "recovered"
    assert len(server.requests) == 2
    assert len(policy.slept) == 1 and 0.0 <= policy.slept[0] <= 0.2
    assert policy.after == [1]  # the backoff, between the two requests


NOT_RETRIED = [
    ("400", Reply.error(400, "bad field", "invalid_request_error"), ProviderRejected),
    ("401", Reply.error(401, "invalid api key", "authentication_error"), ProviderRejected),
    ("403", Reply.error(403, "forbidden", "permission_error"), ProviderRejected),
    ("404", Reply.error(404, "no such model", "not_found_error"), ProviderRejected),
    ("422", Reply.error(422, "unprocessable", "invalid_request_error"), ProviderRejected),
    (
        "500 with x-should-retry: false",
        with_header(Reply.server_error(500), "x-should-retry", "false"),
        ProviderUnavailable,
    ),
]


@pytest.mark.parametrize(("case", "fault", "error"), NOT_RETRIED, ids=[case for case, _, _ in NOT_RETRIED])
async def test_refusals_are_not_retried(server, case, fault, error):
    server.enqueue(fault)
    policy = RecordingPolicy(max_retries=2, initial_backoff=0.2)
    async with ChatClient(server.openai_base_url, retry=policy) as client:
        with pytest.raises(error):
            await client.complete(HI, model="m", max_tokens=5)
    assert len(server.requests) == 1 and policy.slept == []


@pytest.mark.parametrize(("status", "hint"), [(401, "api_key"), (403, "api_key"), (404, ".name and model.base_url")])
async def test_a_refusal_says_what_to_fix(server, status, hint):
    server.enqueue(Reply.error(status, "nope", "error"))
    async with ChatClient(server.openai_base_url) as client:
        with pytest.raises(ProviderRejected) as caught:
            await client.complete(HI, model="m", max_tokens=5)
    assert hint in str(caught.value) and len(str(caught.value).splitlines()) == 1


@pytest.mark.parametrize(("header", "value", "seconds"), [("retry-after", "0.4", 0.4), ("retry-after-ms", "300", 0.3)])
async def test_the_servers_wait_is_honoured(server, header, value, seconds):
    server.enqueue(with_header(Reply.rate_limited(retry_after=None), header, value))
    policy = RecordingPolicy(server, max_retries=1, initial_backoff=5.0)
    async with ChatClient(server.openai_base_url, retry=policy) as client:
        assert (await client.complete(HI, model="m", max_tokens=5)).text == "recovered"
    assert policy.slept == [pytest.approx(seconds)] and policy.after == [1]  # the server's wait, not the backoff's


async def test_a_wait_longer_than_the_cap_fails_at_once_instead_of_retrying_early(server):
    server.enqueue(Reply.rate_limited(retry_after=90))
    policy = RecordingPolicy(max_retries=2, max_retry_after=60.0)
    async with ChatClient(server.openai_base_url, retry=policy) as client:
        with pytest.raises(RetryWaitTooLong) as caught:
            await client.complete(HI, model="m", max_tokens=5)
    assert len(server.requests) == 1
    assert policy.slept == []  # at once: not a second of the 90 s, nor a backoff, was waited
    assert caught.value.retry_after == 90 and "90s" in str(caught.value) and "60s" in str(caught.value)
    assert not caught.value.retryable


async def test_retries_stop_after_max_retries_with_growing_waits(server):
    server.enqueue(*(Reply.server_error(503) for _ in range(4)))
    policy = RecordingPolicy(server, max_retries=3, initial_backoff=0.1, max_backoff=1.0, jitter=lambda low, high: high)
    async with ChatClient(server.openai_base_url, retry=policy) as client:
        with pytest.raises(ProviderUnavailable):
            await client.complete(HI, model="m", max_tokens=5)
    assert len(server.requests) == 4
    assert policy.slept == pytest.approx([0.1, 0.2, 0.4])
    assert policy.after == [1, 2, 3]  # each wait between two tries, none after


def test_backoff_is_full_jitter():
    policy = RetryPolicy(initial_backoff=0.5, max_backoff=8.0)
    for attempt, ceiling in [(0, 0.5), (1, 1.0), (3, 4.0), (6, 8.0)]:
        draws = [policy.policy.delay(attempt + 1) for _ in range(300)]
        assert all(0.0 <= d <= ceiling for d in draws)
        assert min(draws) < ceiling * 0.2 and max(draws) > ceiling * 0.8  # spread over the whole range


async def test_a_dropped_connection_and_a_timeout_are_retried(server):
    server.enqueue(Reply.drop_connection(), Reply.hang())  # the second is never answered: only the timeout ends it
    policy = RecordingPolicy(server, max_retries=2, initial_backoff=0.05)
    async with ChatClient(server.openai_base_url, retry=policy, options=HttpOptions(timeout_seconds=0.5)) as client:
        assert (await client.complete(HI, model="m", max_tokens=5)).text == "recovered"
    assert len(server.requests) == 3 and len(policy.slept) == 2
    assert policy.after == [1, 2]


async def test_a_timeout_past_the_retries_is_a_timeout(server):
    server.enqueue(Reply.hang())
    async with ChatClient(
        server.openai_base_url, retry=RetryPolicy(max_retries=0), options=HttpOptions(timeout_seconds=0.3)
    ) as client:
        with pytest.raises(ProviderTimeout):
            await client.complete(HI, model="m", max_tokens=5)


async def test_a_refused_connection_is_retried():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    policy = RecordingPolicy(max_retries=2, initial_backoff=0.05)
    async with ChatClient(f"http://127.0.0.1:{port}/v1", retry=policy) as client:
        with pytest.raises(ProviderUnavailable) as caught:
            await client.complete(HI, model="m", max_tokens=5)
    assert len(policy.slept) == 2
    assert not isinstance(caught.value, ProviderUnreachable)


async def test_an_unknown_host_is_not_retried_and_says_what_to_check():
    policy = RecordingPolicy(max_retries=3, initial_backoff=1.0)
    async with ChatClient("https://provider.invalid/v1", retry=policy) as client:
        with pytest.raises(ProviderUnreachable) as caught:
            await client.complete(HI, model="m", max_tokens=5)
    assert policy.slept == []  # one lookup, no wait for a second
    message = str(caught.value)
    assert "cannot resolve provider.invalid" in message and "model.base_url" in message
    assert len(message.splitlines()) == 1


def test_every_provider_error_says_whether_to_retry():
    assert not ProviderUnreachable("x").retryable and not ProviderRejected("x").retryable
    assert ProviderUnavailable("x").retryable and ProviderTimeout("x").retryable and RateLimited("x").retryable
    assert all(issubclass(kind, ProviderError) for kind in (ProviderUnreachable, RetryWaitTooLong))


@pytest.mark.parametrize("base_url", ["ftp://provider.example/v1", "http://"])
async def test_a_base_url_that_is_not_http_fails_the_call_not_the_construction(base_url):
    client = ChatClient(base_url, retry=RecordingPolicy(max_retries=2))
    try:
        with pytest.raises(ProviderError) as caught:
            await client.complete(HI, model="m", max_tokens=5)
    finally:
        await client.aclose()
    assert not caught.value.retryable and "model.base_url" in str(caught.value)
    assert client.endpoint.retry.slept == []


async def test_a_passing_dns_failure_is_retried(server, monkeypatch):
    original = socket.getaddrinfo
    failures = [socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")]

    def flaky(host, *args, **kwargs):
        if host in ("flaky-dns.test", b"flaky-dns.test") and failures:
            raise failures.pop()
        return original("127.0.0.1" if host in ("flaky-dns.test", b"flaky-dns.test") else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", flaky)
    policy = RecordingPolicy(server, max_retries=2, initial_backoff=0.05)
    async with ChatClient(f"http://flaky-dns.test:{server.port}/v1", retry=policy) as client:
        assert (await client.complete(HI, model="m", max_tokens=5)).text == "recovered"
    assert len(policy.slept) == 1 and len(server.requests) == 1
    assert policy.after == [0]  # the lookup failed before any request


async def test_retry_after_zero_names_no_wait_so_the_backoff_applies(server):
    server.enqueue(with_header(Reply.rate_limited(retry_after=None), "retry-after", "0"))
    policy = RecordingPolicy(max_retries=1, initial_backoff=0.3, jitter=lambda low, high: high)
    async with ChatClient(server.openai_base_url, retry=policy) as client:
        assert (await client.complete(HI, model="m", max_tokens=5)).text == "recovered"
    assert policy.slept == [pytest.approx(0.3)]
