"""SOCKS proxies for the model provider, against a real SOCKS server (pproxy) and the fake provider on loopback.

``model.proxy`` or ``ALL_PROXY`` / ``HTTPS_PROXY`` (either case) with ``socks5://``, ``socks5h://``
or ``socks4://`` carries each request through the proxy, TLS included, and ``NO_PROXY`` still
bypasses it. A proxy that is down, or that refuses the credentials, is a provider error that
names what to check, with nothing sent to the provider directly; an unknown scheme is refused by
``config check`` (naming ``model.proxy``) and, from the environment, when the client is built.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pproxy
import pytest

from agent.http_options import HttpOptions
from agent.llm import ChatClient
from agent.llm import http as http_module
from agent.llm.errors import ProviderUnreachable
from agent.llm.retry import RetryPolicy
from gateway.agents import AgentBuilder
from gateway.cli import main
from gateway.config import Settings
from tests.fakes.llm_server import FakeLLMServer
from tests.fakes.network import PROXY_VARIABLES

HI = [{"role": "user", "content": "hi"}]
ONCE = RetryPolicy(max_retries=0)


class SocksProxy:
    """pproxy's SOCKS4 and SOCKS5 server on one loopback port; :attr:`seen` gets ``(user, host)`` for
    each connection it opened on a client's behalf (``host`` as the client sent it: a name only
    when the proxy is asked to resolve it). ``users="name:password"`` makes SOCKS5 clients log in."""

    def __init__(self, users: str = "") -> None:
        self.users = users
        self.seen: list[tuple[str | None, str]] = []
        self.port = 0
        self._server = None

    def url(self, scheme: str = "socks5", credentials: str = "") -> str:
        return f"{scheme}://{credentials + '@' if credentials else ''}127.0.0.1:{self.port}"

    def _opened(self, user: bytes | None, client: str, host: str) -> Callable[[int], Callable[[int], None]]:
        self.seen.append((user.decode() if user else None, host))
        return lambda direction: lambda count: None  # pproxy's byte counters, unused

    async def __aenter__(self) -> SocksProxy:
        server = pproxy.Server(f"socks4+socks5://127.0.0.1:0{'#' + self.users if self.users else ''}")
        # authtime 0: pproxy otherwise lets an address that logged in once skip the login for 30 days
        self._server = await server.start_server({"rserver": [], "authtime": 0, "modstat": self._opened})
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._server.close()
        await self._server.wait_closed()


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy or trust setting from the machine leaks in; each test sees the start-up line afresh."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(http_module, "_announced", set())


@pytest.fixture
async def provider() -> AsyncIterator[FakeLLMServer]:
    async with FakeLLMServer(server_name="localhost") as server:
        yield server


@pytest.fixture
async def socks() -> AsyncIterator[SocksProxy]:
    async with SocksProxy() as proxy:
        yield proxy


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def ask(base_url: str, options: HttpOptions = HttpOptions()) -> str:
    async with ChatClient(base_url, retry=ONCE, options=options) as client:
        return (await client.complete(HI, model="gpt-4o", max_tokens=5)).text


# --------------------------------------------------------------------------- model.proxy


async def test_model_proxy_socks5_carries_the_chat_request(tmp_path, provider, socks):
    settings = Settings(
        model={
            "provider": "custom",
            "name": "gpt-4o",
            "base_url": provider.openai_base_url,
            "proxy": socks.url("socks5"),
        },
        gateway={"home": str(tmp_path)},
    )
    builder = AgentBuilder(settings)
    try:
        assert (await builder.chat_model.complete(HI, model="gpt-4o", max_tokens=5)).text == "ok"
    finally:
        await builder.aclose()
    assert socks.seen == [(None, "127.0.0.1")]  # socks5: the name was resolved here, the proxy got the address
    assert len(provider.requests) == 1


@pytest.mark.parametrize(("scheme", "host_seen"), [("socks5h", "localhost"), ("socks4", "127.0.0.1")])
async def test_socks5h_lets_the_proxy_resolve_and_socks4_works_too(provider, socks, scheme, host_seen):
    assert await ask(provider.openai_base_url, HttpOptions(proxy=socks.url(scheme))) == "ok"
    assert socks.seen == [(None, host_seen)]
    assert len(provider.requests) == 1


async def test_credentials_in_the_url_log_in_and_a_refused_login_says_what_to_check(provider):
    async with SocksProxy(users="fg:s3cret") as proxy:
        assert await ask(provider.openai_base_url, HttpOptions(proxy=proxy.url(credentials="fg:s3cret"))) == "ok"
        with pytest.raises(ProviderUnreachable) as caught:
            await ask(provider.openai_base_url, HttpOptions(proxy=proxy.url(credentials="fg:wrong")))
    assert proxy.seen == [("fg:s3cret", "127.0.0.1")]
    assert "SOCKS proxy" in str(caught.value) and "refused" in str(caught.value)
    assert "model.proxy" in str(caught.value)
    assert len(provider.requests) == 1


# --------------------------------------------------------------------------- the environment


@pytest.mark.parametrize("variable", ["ALL_PROXY", "all_proxy"])
async def test_all_proxy_carries_the_request(provider, socks, monkeypatch, variable):
    monkeypatch.setenv(variable, socks.url("socks5h"))
    assert await ask(provider.openai_base_url) == "ok"
    assert socks.seen == [(None, "localhost")]
    assert len(provider.requests) == 1


@pytest.mark.parametrize("variable", ["HTTPS_PROXY", "https_proxy"])
async def test_https_proxy_carries_a_tls_request_end_to_end(pki, socks, monkeypatch, variable):
    monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca_file))
    monkeypatch.setenv(variable, socks.url("socks5"))
    async with FakeLLMServer(ssl=pki.server_context, server_name="localhost") as server:
        assert server.openai_base_url.startswith("https://localhost:")
        assert await ask(server.openai_base_url) == "ok"
    assert socks.seen == [(None, "127.0.0.1")]
    assert len(server.requests) == 1


async def test_no_proxy_bypasses_a_socks_proxy(provider, socks, monkeypatch):
    monkeypatch.setenv("ALL_PROXY", socks.url("socks5"))
    monkeypatch.setenv("NO_PROXY", "localhost")
    assert await ask(provider.openai_base_url) == "ok"
    assert socks.seen == []
    assert len(provider.requests) == 1


async def test_the_start_says_once_where_model_requests_go_and_that_the_platforms_go_direct(
    provider, socks, monkeypatch, caplog
):
    monkeypatch.setenv("ALL_PROXY", socks.url("socks5", credentials="fg:s3cret"))
    with caplog.at_level(logging.WARNING, logger="agent.llm.http"):
        for _ in range(2):  # the chat client and the summarizer's: one line
            async with ChatClient(provider.openai_base_url, retry=ONCE):
                pass
    lines = [record.getMessage() for record in caplog.records if record.name == "agent.llm.http"]
    assert len(lines) == 1
    assert f"all:// through socks5://127.0.0.1:{socks.port} (ALL_PROXY)" in lines[0]
    assert "Telegram and Discord" in lines[0] and "directly" in lines[0]
    assert "s3cret" not in lines[0]


# --------------------------------------------------------------------------- failures


@pytest.mark.parametrize("where", ["model.proxy", "ALL_PROXY"])
async def test_a_socks_proxy_that_is_down_is_a_readable_provider_error_not_a_direct_connection(
    provider, closed_port, monkeypatch, where
):
    down = f"socks5://127.0.0.1:{closed_port}"
    options = HttpOptions(proxy=down) if where == "model.proxy" else HttpOptions()
    if where == "ALL_PROXY":
        monkeypatch.setenv("ALL_PROXY", down)
    with pytest.raises(ProviderUnreachable) as caught:
        await ask(provider.openai_base_url, options)
    message = str(caught.value)
    assert "SOCKS proxy" in message and f"127.0.0.1:{closed_port}" in message
    assert "model.proxy" in message and "ALL_PROXY" in message and len(message.splitlines()) == 1
    assert provider.requests == []


async def test_an_environment_proxy_of_an_unknown_scheme_stops_the_client_from_being_built(provider, monkeypatch):
    monkeypatch.setenv("ALL_PROXY", "ftp://user:pw@127.0.0.1:2121")
    with pytest.raises(ProviderUnreachable) as caught:
        await ask(provider.openai_base_url)
    assert "ALL_PROXY is 'ftp://127.0.0.1:2121'" in str(caught.value) and "socks5://" in str(caught.value)
    assert provider.requests == []


@pytest.fixture
def config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory and no FOLDGATE_* variable: only the file written there counts."""
    for name in list(os.environ):
        if name.upper().startswith("FOLDGATE_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    ("proxy", "accepted"),
    [
        ("socks5://127.0.0.1:1080", True),
        ("socks5h://proxy.internal", True),
        ("socks4a://proxy.internal:1080", True),
        ("ftp://127.0.0.1:2121", False),
        ("socks6://127.0.0.1:1080", False),
    ],
)
def test_config_check_accepts_socks_and_refuses_an_unknown_scheme_by_its_key(config_dir, capsys, proxy, accepted):
    path = config_dir / "config.yaml"
    path.write_text(f"model:\n  proxy: {proxy}\n")
    assert main(["--config", str(path), "config", "check"]) == (0 if accepted else 1)
    if not accepted:
        assert f"  model.proxy = '{proxy}': must be a proxy URL starting with http://" in capsys.readouterr().err
