"""Networks as users have them, each against real servers on loopback.

TLS with a CA made in the test (trusted through ``SSL_CERT_FILE``; untrusted or for another
host name, refused before any request is sent), a CONNECT proxy from ``HTTPS_PROXY`` (or
``model.proxy``) that every route goes through and ``NO_PROXY`` bypasses, a host whose first
address drops connections (Happy Eyeballs answers through the second), compressed answers,
the User-Agent, and the idle timeout that applies per streamed event.

None of them reads a stopwatch: "not retried" is the retry waits the policy was asked for, "did
not wait for the connect timeout" is an answer that came while that timeout was an hour away.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from agent.compaction.summarizer import build_summarizer
from agent.http_options import HttpOptions
from agent.llm import ChatClient
from agent.llm.errors import ProviderTimeout, ProviderUnreachable
from agent.llm.responses import ResponsesClient
from agent.llm.retry import RetryPolicy
from agent.llm.stream import StreamEvent, TextDelta
from agent.settings import AuxiliaryModelSettings
from tests.fakes.connect_proxy import ConnectProxy
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.network import PROXY_VARIABLES, BlackHole, connect_hangs, resolve
from tests.fakes.responses_server import FakeResponsesServer
from tests.fakes.tls import TestPKI

HI = [{"role": "user", "content": "hi"}]
ONCE = RetryPolicy(max_retries=0)
#: Seconds before a call that should answer at once is given up as hung (never reached by a slow machine).
PATIENCE = 60.0


class RecordedWaits(list[float]):
    """The waits a :class:`RetryPolicy` sleeps before its retries, recorded (and not slept): one per retry."""

    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy or trust setting from the machine leaks into these tests."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def tls_server(pki: TestPKI) -> AsyncIterator[FakeLLMServer]:
    async with FakeLLMServer(ssl=pki.server_context, server_name="localhost") as server:
        yield server


# --------------------------------------------------------------------------- TLS


async def test_a_ca_trusted_through_ssl_cert_file_connects(pki, tls_server, monkeypatch):
    monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca_file))
    assert tls_server.openai_base_url.startswith("https://localhost:")
    async with ChatClient(tls_server.openai_base_url, retry=ONCE) as client:
        assert (await client.complete(HI, model="m", max_tokens=5)).text == "ok"
    assert len(tls_server.requests) == 1


async def test_without_the_ca_the_default_trust_store_refuses_the_certificate(tls_server):
    async with ChatClient(tls_server.openai_base_url, retry=RetryPolicy(max_retries=3)) as client:
        with pytest.raises(ProviderUnreachable) as caught:
            await client.complete(HI, model="m", max_tokens=5)
    assert "not trusted" in str(caught.value) and "SSL_CERT_FILE" in str(caught.value)
    assert tls_server.requests == []


@pytest.mark.parametrize("certificate", ["untrusted_context", "wrong_host_context"])
async def test_an_untrusted_or_misnamed_certificate_fails_before_any_request(pki, monkeypatch, certificate):
    monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca_file))
    waits = RecordedWaits()
    async with FakeLLMServer(ssl=getattr(pki, certificate), server_name="localhost") as server:
        async with ChatClient(server.openai_base_url, retry=RetryPolicy(max_retries=3, sleep=waits)) as client:
            with pytest.raises(ProviderUnreachable) as caught:
                await client.complete(HI, model="m", max_tokens=5)
        assert server.requests == []  # the handshake failed: nothing reached the server
    assert waits == []  # and it was not retried
    assert "certificate" in str(caught.value) and len(str(caught.value).splitlines()) == 1


# --------------------------------------------------------------------------- proxies


async def _every_route(base: str, responses_base: str, **options) -> None:
    """One call through each route foldgate has: chat completions, Anthropic, Responses and the summarizer."""
    async with ChatClient(base + "/v1", retry=ONCE, **options) as chat:
        assert (await chat.complete(HI, model="gpt-4o", max_tokens=5)).text == "ok"
    async with ChatClient(base, dialect="anthropic", retry=ONCE, **options) as messages:
        assert (await messages.complete(HI, model="claude-sonnet-4", max_tokens=5)).text == "ok"
    async with ResponsesClient(responses_base + "/v1", retry=ONCE, **options) as responses:
        assert (await responses.complete(HI, model="gpt-5.6", max_tokens=5)).text == "ok"
    summarizer = build_summarizer(
        AuxiliaryModelSettings(proxy=(options.get("options") or HttpOptions()).proxy),
        main_model="gpt-4o",
        main_base_url=base + "/v1",
    )
    assert summarizer is not None
    try:
        assert await summarizer.call_llm(messages=list(HI), max_tokens=5) == "ok"
    finally:
        await summarizer.client.aclose()


@pytest.fixture
async def tls_pair(
    pki: TestPKI, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[FakeLLMServer, FakeResponsesServer]]:
    monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca_file))
    async with (
        FakeLLMServer(ssl=pki.server_context, server_name="localhost") as chat,
        FakeResponsesServer(ssl=pki.server_context, server_name="localhost") as responses,
    ):
        yield chat, responses


async def test_with_https_proxy_set_every_route_goes_through_the_proxy(tls_pair, monkeypatch):
    chat, responses = tls_pair
    async with ConnectProxy() as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        await _every_route(chat.base_url, responses.base_url)
    assert proxy.targets.count(f"localhost:{chat.port}") == 3  # chat, anthropic, summarizer
    assert proxy.targets.count(f"localhost:{responses.port}") == 1
    assert len(chat.requests) == 3 and len(responses.requests) == 1


async def test_no_proxy_bypasses_the_proxy(tls_pair, monkeypatch):
    chat, responses = tls_pair
    async with ConnectProxy() as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        monkeypatch.setenv("NO_PROXY", "localhost")
        await _every_route(chat.base_url, responses.base_url)
    assert proxy.targets == []
    assert len(chat.requests) == 3 and len(responses.requests) == 1


async def test_model_proxy_is_used_without_any_environment(tls_pair):
    chat, responses = tls_pair
    async with ConnectProxy() as proxy:
        await _every_route(chat.base_url, responses.base_url, options=HttpOptions(proxy=proxy.url))
    assert len(proxy.targets) == 4


async def test_http_proxy_forwards_plain_http_requests(monkeypatch):
    async with FakeLLMServer() as server, ConnectProxy() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        async with ChatClient(server.openai_base_url, retry=ONCE) as client:
            assert (await client.complete(HI, model="m", max_tokens=5)).text == "ok"
    assert proxy.targets and str(server.port) in proxy.targets[0]


async def test_a_proxy_that_wants_credentials_says_so_and_takes_them_from_the_url(tls_pair, monkeypatch):
    chat, _ = tls_pair
    async with ConnectProxy(require_auth=("fg", "s3cret")) as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        async with ChatClient(chat.openai_base_url, retry=RetryPolicy(max_retries=2)) as client:
            with pytest.raises(ProviderUnreachable) as caught:
                await client.complete(HI, model="m", max_tokens=5)
        assert "proxy" in str(caught.value) and "HTTPS_PROXY" in str(caught.value)
        monkeypatch.setenv("HTTPS_PROXY", proxy.auth_url)
        async with ChatClient(chat.openai_base_url, retry=ONCE) as client:
            assert (await client.complete(HI, model="m", max_tokens=5)).text == "ok"


# --------------------------------------------------------------------------- Happy Eyeballs


async def test_a_first_address_that_drops_packets_costs_a_fraction_of_the_connect_timeout():
    """Happy Eyeballs tries the next address after 0.25 s, not once the first has timed out: with the connect
    timeout an hour away, an answer within ``PATIENCE`` came through the second address without waiting it out."""
    async with FakeLLMServer() as server:
        with BlackHole("127.0.0.2", server.port) as hole:
            assert await connect_hangs(hole.address)  # a plain connect to the first address would hang
            with resolve({"fake-provider.test": ["127.0.0.2", "127.0.0.1"]}) as looked_up:
                options = HttpOptions(connect_timeout_seconds=3600.0)
                async with ChatClient(
                    f"http://fake-provider.test:{server.port}/v1", options=options, retry=ONCE
                ) as client:
                    async with asyncio.timeout(PATIENCE):
                        completion = await client.complete(HI, model="m", max_tokens=5)
    assert completion.text == "ok" and looked_up
    assert len(server.requests) == 1  # one request, on the one connection the second address gave


# --------------------------------------------------------------------------- the wire


@pytest.mark.parametrize("coding", ["gzip", "br"])
async def test_compressed_answers_are_decoded(coding):
    async with FakeLLMServer(compress=coding, default=Reply.answer("squeezed " * 200)) as server:
        async with ChatClient(server.openai_base_url, retry=ONCE) as client:
            completion = await client.complete(HI, model="m", max_tokens=5)
    assert completion.text == "squeezed " * 200
    assert coding in server.requests[0].headers["accept-encoding"]


async def test_requests_say_they_come_from_foldgate():
    async with FakeLLMServer() as server:
        async with ChatClient(server.openai_base_url, retry=ONCE) as client:
            await client.complete(HI, model="m", max_tokens=5)
    assert server.requests[0].headers["user-agent"].startswith("foldgate/")


async def test_the_timeout_applies_to_each_streamed_event_not_the_whole_answer():
    """The server sleeps ``event_delay`` between two events, and a sleep never ends early: a stream of more than
    ``timeout / event_delay`` events lasts longer than the timeout, yet each gap is a tenth of it."""
    timeout, gap = 1.0, 0.1
    slow_but_steady = Reply(
        text="one two three four five six seven eight nine ten eleven twelve", chunk_size=4, event_delay=gap
    )
    deltas: list[StreamEvent] = []

    async def seen(event: StreamEvent) -> None:
        if isinstance(event, TextDelta):
            deltas.append(event)

    async with FakeLLMServer(default=slow_but_steady) as server:
        async with ChatClient(
            server.openai_base_url, stream=True, retry=ONCE, options=HttpOptions(timeout_seconds=timeout)
        ) as client:
            completion = await client.complete(HI, model="m", max_tokens=50, on_event=seen)
    assert completion.text == slow_but_steady.text
    assert (len(deltas) - 1) * gap > timeout  # the answer as a whole outlasted the timeout, no gap came near it


async def test_a_stream_that_goes_quiet_times_out():
    stalled = Reply(text="one two three four", chunk_size=4, event_delay=1.5)
    async with FakeLLMServer(default=stalled) as server:
        async with ChatClient(
            server.openai_base_url, stream=True, retry=ONCE, options=HttpOptions(timeout_seconds=0.5)
        ) as client:
            with pytest.raises(ProviderTimeout):
                await client.complete(HI, model="m", max_tokens=50)


async def test_streamed_answers_reuse_one_connection_even_when_the_last_bytes_come_late():
    from aiohttp import web

    peers: list[object] = []

    async def stream(request: web.Request) -> web.StreamResponse:
        peers.append(request.transport.get_extra_info("peername") if request.transport else None)
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(
            b'data: {"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]}\n\n'
        )
        await response.write(b"data: [DONE]\n\n")
        await asyncio.sleep(0.1)  # the body's end arrives after the answer is complete
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", stream)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        async with ChatClient(f"http://127.0.0.1:{port}/v1", stream=True, retry=ONCE) as client:
            for _ in range(4):
                assert (await client.complete(HI, model="m", max_tokens=5)).text == "hi"
    finally:
        await runner.cleanup()
    assert len(set(peers)) == 1


async def test_an_answer_the_transport_cannot_read_is_a_provider_error():
    from agent.llm.errors import ProviderError

    async with FakeLLMServer(default=Reply(text="ok", headers={"x-padding": "p" * 9000})) as server:
        async with ChatClient(server.openai_base_url, retry=ONCE) as client:
            with pytest.raises(ProviderError):
                await client.complete(HI, model="m", max_tokens=5)
