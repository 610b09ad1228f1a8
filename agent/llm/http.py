"""The one HTTP stack every provider call uses: httpx over aiohttp's connection handling.

httpx is the API foldgate's provider clients are written against; under it runs
``httpx-aiohttp``'s transport (the one the official OpenAI SDK offers for speed), which
the throughput benchmark measured at about 0.6× the CPU per request of httpx's own
transport (``foldgate bench throughput`` prints both). What a real network needs comes
from these libraries, not from foldgate:

- proxies: ``HTTPS_PROXY`` / ``HTTP_PROXY`` / ``ALL_PROXY`` / ``NO_PROXY`` from the
  environment (httpx routes each URL), or one explicit ``proxy``; HTTP(S) proxies only;
- trust: ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` when set, certifi's bundle otherwise;
- Happy Eyeballs across a host's addresses (aiohttp tries the next address 0.25 s after
  the first, so a broken IPv6 route costs a quarter second, not the connect timeout);
- gzip and brotli answers (httpx decodes them), pooled keep-alive connections;
- ``User-Agent: foldgate/<version>``.

:func:`transport_failure` turns a failed connection into the typed error that says what
to fix: an unknown host, an untrusted certificate or a refusing proxy never get better by
retrying, a refused or dropped connection may.
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass
from importlib import metadata
from typing import Literal
from urllib.parse import urlsplit

import aiohttp
import httpx
from httpx_aiohttp import HttpxAiohttpClient

from agent.llm.errors import ProviderError, ProviderTimeout, ProviderUnavailable, ProviderUnreachable

#: Which transport runs under httpx: aiohttp's (the default) or httpx's own (httpcore), for comparison.
TransportName = Literal["aiohttp", "httpx"]


def _version() -> str:
    try:
        return metadata.version("foldgate")
    except metadata.PackageNotFoundError:
        return "0"


USER_AGENT = f"foldgate/{_version()}"

#: Connections per client: enough for every concurrent turn of a busy process; idle ones are kept 30 s.
LIMITS = httpx.Limits(max_connections=1000, max_keepalive_connections=200, keepalive_expiry=30.0)


@dataclass(frozen=True)
class HttpOptions:
    """How one provider client reaches its endpoint (``model.*`` / ``auxiliary.compression.*``).

    ``timeout_seconds`` bounds each wait for data: for a streamed answer the gap between two
    events, for a whole answer the wait for it. ``proxy`` overrides the environment's proxies.
    """

    timeout_seconds: float = 120.0
    connect_timeout_seconds: float = 10.0
    proxy: str | None = None

    def timeout(self) -> httpx.Timeout:
        # No limit on waiting for a pooled connection: a busy process queues, it does not fail.
        return httpx.Timeout(self.timeout_seconds, connect=self.connect_timeout_seconds, pool=None)


def open_http_client(options: HttpOptions = HttpOptions(), *, transport: TransportName = "aiohttp") -> httpx.AsyncClient:
    """A pooled client for provider calls; close it with ``aclose()``."""
    kind = HttpxAiohttpClient if transport == "aiohttp" else httpx.AsyncClient
    return kind(
        timeout=options.timeout(),
        proxy=options.proxy or None,
        trust_env=True,
        limits=LIMITS,
        headers={"user-agent": USER_AGENT},
        follow_redirects=False,
    )


#: What a failed exchange may raise below the provider client (httpx-aiohttp lets some aiohttp errors through).
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (httpx.TransportError, aiohttp.ClientError, OSError)

#: Resolver answers that mean the name does not exist (others, like EAI_AGAIN, are passing).
_NO_SUCH_NAME = frozenset(code for code in (getattr(socket, "EAI_NONAME", None), getattr(socket, "EAI_NODATA", None))
                          if code is not None)
#: Proxy answers that are the proxy's own refusal (others, like 502, are the target's trouble).
_PROXY_REFUSALS = frozenset({403, 407})


def _causes(error: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _host(url: str) -> str:
    parts = urlsplit(url)
    return parts.hostname or url


def _proxy_status(cause: BaseException) -> int | None:
    if isinstance(cause, aiohttp.ClientHttpProxyError):
        return cause.status
    text = str(cause).strip()
    return int(text[:3]) if isinstance(cause, httpx.ProxyError) and text[:3].isdigit() else None


def transport_failure(error: BaseException, url: str, *, config_key: str = "model") -> ProviderError:
    """The typed error for a request to ``url`` that got no usable HTTP answer.

    The transports wrap the cause differently (and httpx-aiohttp maps a refused connection
    to a timeout), so the decision reads the whole chain of causes, not the outer type. Only
    what no retry can cure is :class:`ProviderUnreachable`: a name that does not exist, a
    certificate that is not trusted or a TLS handshake that fails, a proxy that refuses us.
    """
    host = _host(url)
    chain = _causes(error)
    root = next((cause for cause in reversed(chain) if str(cause)), chain[-1])
    detail = f"{type(root).__name__}: {root}"
    connecting = any(isinstance(cause, (aiohttp.ClientConnectorError, httpx.ConnectError)) for cause in chain)
    for cause in chain:
        if isinstance(cause, httpx.UnsupportedProtocol):
            return ProviderUnreachable(f"cannot send to {url} ({detail}): check {config_key}.base_url")
        if isinstance(cause, socket.gaierror):
            if cause.errno in _NO_SUCH_NAME:
                return ProviderUnreachable(
                    f"cannot resolve {host}: check {config_key}.base_url, your DNS, or set HTTPS_PROXY if this "
                    f"network needs a proxy ({detail})")
            return ProviderUnavailable(f"looking up {host} failed for now ({detail})")
        if isinstance(cause, ssl.SSLCertVerificationError):
            reason = getattr(cause, "verify_message", "") or str(cause)
            return ProviderUnreachable(
                f"the TLS certificate of {host} is not trusted ({reason}): if a proxy or a private CA signs it, "
                f"set SSL_CERT_FILE to that CA bundle")
        status = _proxy_status(cause)
        if status is not None or isinstance(cause, aiohttp.ClientProxyConnectionError):
            if status is None or status in _PROXY_REFUSALS:
                return ProviderUnreachable(
                    f"the proxy for {host} refused the connection ({detail}): check {config_key}.proxy, "
                    f"HTTPS_PROXY and NO_PROXY")
            return ProviderUnavailable(f"the proxy could not reach {host} ({detail})")
        if isinstance(cause, ssl.SSLError) and connecting:
            return ProviderUnreachable(f"the TLS handshake with {host} failed ({detail}): check {config_key}.base_url "
                                       f"(https:// to a plain-HTTP port?)")
    if any(isinstance(cause, (aiohttp.ServerTimeoutError, TimeoutError)) for cause in chain) or (
        isinstance(chain[-1], httpx.TimeoutException)
    ):
        return ProviderTimeout(f"no answer from {url} in time ({detail})")
    return ProviderUnavailable(f"connection to {url} failed: {detail}")
