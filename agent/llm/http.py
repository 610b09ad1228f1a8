"""The one HTTP stack every provider call uses: httpx over aiohttp's connection handling.

httpx is the API foldgate's provider clients are written against; under it runs
``httpx-aiohttp``'s transport (the one the official OpenAI SDK offers for speed), which
the throughput benchmark measured at about 0.6× the CPU per request of httpx's own
transport (``foldgate bench throughput`` prints both). What a real network needs comes
from these libraries, not from foldgate:

- proxies: ``HTTPS_PROXY`` / ``HTTP_PROXY`` / ``ALL_PROXY`` / ``NO_PROXY`` from the
  environment (httpx's matching picks each URL's route), or one explicit ``proxy``. aiohttp
  speaks HTTP(S) proxies itself; a SOCKS route (``socks5``, ``socks5h``, ``socks4``,
  ``socks4a``) gets an aiohttp-socks connector under the same transport. A proxy URL of any
  other scheme stops the client from being built: a request never goes direct instead;
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

import asyncio
import logging
import os
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, partial
from importlib import metadata
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

import aiohttp
import aiohttp_socks
import httpx
import python_socks
from httpx._utils import get_environment_proxies  # httpx's own reading of *_PROXY and NO_PROXY
from httpx_aiohttp import AiohttpTransport

from agent.http_options import SOCKS_SCHEMES, HttpOptions, proxy_problem
from agent.llm.errors import ProviderError, ProviderTimeout, ProviderUnavailable, ProviderUnreachable

log = logging.getLogger(__name__)

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


#: Per SOCKS scheme: the protocol aiohttp-socks speaks and whether the proxy resolves the host name (the h / a forms).
_SOCKS: dict[str, tuple[aiohttp_socks.ProxyType, bool]] = {
    scheme: (
        aiohttp_socks.ProxyType.SOCKS5 if scheme.startswith("socks5") else aiohttp_socks.ProxyType.SOCKS4,
        scheme.endswith(("h", "a")),
    )
    for scheme in SOCKS_SCHEMES
}
#: The port a SOCKS URL without one means (curl's default too).
SOCKS_PORT = 1080
#: Which variable each of httpx's environment routes comes from, to name it in a message.
_ROUTE_VARIABLES = {"http://": "HTTP_PROXY", "https://": "HTTPS_PROXY", "all://": "ALL_PROXY"}


def proxy_routes(explicit: str | None) -> dict[str, str | None]:
    """URL pattern → proxy URL (None: straight to the host): ``explicit`` for every URL, else the
    environment's, with NO_PROXY's exceptions, matched as httpx matches them."""
    return {"all://": explicit} if explicit else get_environment_proxies()


def _shown(url: str) -> str:
    """A proxy URL fit for a log line: its credentials left out."""
    parts = urlsplit(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def _check_routes(routes: Mapping[str, str | None], explicit: bool) -> None:
    """Refuse a route that no transport here can take: failing at start beats connecting directly."""
    for pattern, url in routes.items():
        problem = None if url is None else proxy_problem(url)
        if url is not None and problem is not None:
            where = "the proxy" if explicit else _ROUTE_VARIABLES.get(pattern, "a *_PROXY variable")
            raise ProviderUnreachable(
                f"{where} is {_shown(url)!r}: it {problem}; check model.proxy, HTTPS_PROXY, HTTP_PROXY and ALL_PROXY"
            )


_announced: set[str] = set()


def _announce(routes: Mapping[str, str | None]) -> None:
    """Once a process, for proxies from the environment: which provider requests they carry, and that the chat
    platforms' clients (aiogram, discord.py) read no proxy variable and connect directly."""
    proxied = [
        f"{pattern} through {_shown(url)} ({_ROUTE_VARIABLES.get(pattern, pattern)})"
        for pattern, url in routes.items()
        if url is not None
    ]
    if not proxied:
        return
    bypassed = [pattern.removeprefix("all://") for pattern, url in routes.items() if url is None]
    line = (
        f"model requests go through proxies from the environment: {', '.join(proxied)}"
        + (f"; NO_PROXY skips {', '.join(bypassed)}" if bypassed else "")
        + "; Telegram and Discord read no proxy variable and connect directly"
    )
    if line not in _announced:
        _announced.add(line)
        log.warning(line)


def _socks_session(url: str, ssl_context: ssl.SSLContext) -> aiohttp.ClientSession:
    """An aiohttp session whose every connection is opened by the SOCKS proxy at ``url``."""
    parts = urlsplit(url)
    kind, remote_dns = _SOCKS[parts.scheme.lower()]
    connector = aiohttp_socks.ProxyConnector(
        proxy_type=kind,
        host=parts.hostname or "",
        port=parts.port or SOCKS_PORT,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
        rdns=remote_dns,
        ssl=ssl_context,
        limit=LIMITS.max_connections or 0,
        keepalive_timeout=LIMITS.keepalive_expiry,
    )
    return aiohttp.ClientSession(connector=connector)


def _transport(proxy: str | None, ssl_context: ssl.SSLContext) -> AiohttpTransport:
    """The aiohttp transport for one route: direct, through an HTTP(S) proxy, or through a SOCKS proxy."""
    if proxy is None:
        return AiohttpTransport(verify=ssl_context, limits=LIMITS)
    if urlsplit(proxy).scheme.lower() in _SOCKS:
        return AiohttpTransport(verify=ssl_context, limits=LIMITS, client=partial(_socks_session, proxy, ssl_context))
    return AiohttpTransport(verify=ssl_context, limits=LIMITS, proxy=httpx.Proxy(proxy))


def trusted_ssl_context() -> ssl.SSLContext:
    """The TLS trust of provider clients: ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` when set, else certifi's bundle.
    Loading it costs about 0.7 MB and 16 ms; every client of every bot verifies the same way, so they share one
    per trust store named."""
    return _ssl_context_for(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))


@cache
def _ssl_context_for(cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext:
    """One context per trust store: the arguments key the cache, httpx reads the same two variables."""
    return httpx.create_ssl_context(trust_env=True)


def open_http_client(
    options: HttpOptions = HttpOptions(), *, transport: TransportName = "aiohttp"
) -> httpx.AsyncClient:
    """A pooled client for provider calls; close it with ``aclose()``.

    On aiohttp the routes are built here, not by httpx, whose proxy setup gives this transport no
    SOCKS (and knows no socks4 at all). ``transport="httpx"`` is the benchmark's baseline.
    """
    if transport == "httpx":
        return _client(options, proxy=options.proxy or None, limits=LIMITS)
    routes = proxy_routes(options.proxy)
    _check_routes(routes, explicit=bool(options.proxy))
    if not options.proxy:
        _announce(routes)
    ssl_context = trusted_ssl_context()
    mounts = {pattern: None if url is None else _transport(url, ssl_context) for pattern, url in routes.items()}
    return _client(options, transport=_transport(None, ssl_context), mounts=mounts)


def _client(options: HttpOptions, **routing: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        timeout=options.timeout(), trust_env=True, headers={"user-agent": USER_AGENT}, follow_redirects=False, **routing
    )


#: What a failed exchange may raise below the provider client (httpx-aiohttp lets some aiohttp errors through).
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    httpx.TransportError,
    aiohttp.ClientError,
    OSError,
    asyncio.IncompleteReadError,  # a SOCKS proxy that hangs up mid-handshake
    aiohttp_socks.ProxyError,
    aiohttp_socks.ProxyConnectionError,
    aiohttp_socks.ProxyTimeoutError,
)

#: Resolver answers that mean the name does not exist (others, like EAI_AGAIN, are passing).
_NO_SUCH_NAME = frozenset(
    code for code in (getattr(socket, "EAI_NONAME", None), getattr(socket, "EAI_NODATA", None)) if code is not None
)
#: Proxy answers that are the proxy's own refusal (others, like 502, are the target's trouble).
_PROXY_REFUSALS = frozenset({403, 407})
#: SOCKS replies that refuse us (SOCKS5: ruleset, command, address type; SOCKS4: identd); the others are passing.
_SOCKS_REFUSALS = frozenset({2, 7, 8, 0x5C, 0x5D})


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


@dataclass(frozen=True)
class _FailedRequest:
    """The request that got no answer, as the messages about it name it."""

    url: str
    host: str
    #: The innermost cause that says anything, with its type: what actually went wrong.
    detail: str
    #: The settings' section the messages point to (``model``, or a side model's).
    config_key: str
    #: Whether the failure came while connecting: a TLS error then is the handshake's, not a dropped stream's.
    connecting: bool


def _socks_failure(cause: BaseException, failed: _FailedRequest) -> ProviderError | None:
    """A SOCKS proxy that cannot be reached or refuses us (to be fixed), or that cannot reach the host (may pass)."""
    host, detail = failed.host, failed.detail
    check = f"check {failed.config_key}.proxy, ALL_PROXY, HTTPS_PROXY and NO_PROXY"
    if isinstance(cause, python_socks.ProxyConnectionError):
        return ProviderUnreachable(f"the SOCKS proxy for {host} cannot be reached ({cause}): {check}")
    if isinstance(cause, asyncio.IncompleteReadError):  # some proxies hang up on a wrong login instead of answering
        return ProviderUnreachable(
            f"the SOCKS proxy for {host} refused the connection: it hung up during the "
            f"handshake (are the credentials right?): {check}"
        )
    if isinstance(cause, python_socks.ProxyError):
        if cause.error_code is None or cause.error_code in _SOCKS_REFUSALS:  # no code: a failed login, not SOCKS
            return ProviderUnreachable(f"the SOCKS proxy for {host} refused the connection ({detail}): {check}")
        return ProviderUnavailable(f"the proxy could not reach {host} ({detail})")
    return None


def _address_failure(cause: BaseException, failed: _FailedRequest) -> ProviderError | None:
    """A URL no transport here can send to, or a host name that does not resolve: for good, or only for now."""
    key, host, detail = failed.config_key, failed.host, failed.detail
    if isinstance(cause, httpx.UnsupportedProtocol):
        return ProviderUnreachable(f"cannot send to {failed.url} ({detail}): check {key}.base_url")
    if not isinstance(cause, socket.gaierror):
        return None
    if cause.errno in _NO_SUCH_NAME:
        return ProviderUnreachable(
            f"cannot resolve {host}: check {key}.base_url, your DNS, or set HTTPS_PROXY if this "
            f"network needs a proxy ({detail})"
        )
    return ProviderUnavailable(f"looking up {host} failed for now ({detail})")


def _certificate_failure(cause: BaseException, failed: _FailedRequest) -> ProviderError | None:
    """A certificate this machine does not trust: retrying meets the same certificate."""
    if not isinstance(cause, ssl.SSLCertVerificationError):
        return None
    reason = getattr(cause, "verify_message", "") or str(cause)
    return ProviderUnreachable(
        f"the TLS certificate of {failed.host} is not trusted ({reason}): if a proxy or a private CA signs it, "
        f"set SSL_CERT_FILE to that CA bundle"
    )


def _proxy_failure(cause: BaseException, failed: _FailedRequest) -> ProviderError | None:
    """An HTTP proxy's own refusal (to be fixed), or its failure to reach the host (may pass)."""
    status = _proxy_status(cause)
    if status is None and not isinstance(cause, aiohttp.ClientProxyConnectionError):
        return None
    if status is None or status in _PROXY_REFUSALS:
        return ProviderUnreachable(
            f"the proxy for {failed.host} refused the connection ({failed.detail}): check {failed.config_key}.proxy, "
            f"HTTPS_PROXY and NO_PROXY"
        )
    return ProviderUnavailable(f"the proxy could not reach {failed.host} ({failed.detail})")


def _handshake_failure(cause: BaseException, failed: _FailedRequest) -> ProviderError | None:
    """A TLS handshake that fails while connecting: most often https:// sent to a port that speaks plain HTTP."""
    if not (isinstance(cause, ssl.SSLError) and failed.connecting):
        return None
    return ProviderUnreachable(
        f"the TLS handshake with {failed.host} failed ({failed.detail}): check {failed.config_key}.base_url "
        f"(https:// to a plain-HTTP port?)"
    )


#: What one cause in a failure's chain may say, asked in this order of each cause: the first answer decides.
_CAUSE_READERS = (_socks_failure, _address_failure, _certificate_failure, _proxy_failure, _handshake_failure)


def transport_failure(error: BaseException, url: str, *, config_key: str = "model") -> ProviderError:
    """The typed error for a request to ``url`` that got no usable HTTP answer.

    The transports wrap the cause differently (and httpx-aiohttp maps a refused connection
    to a timeout), so the decision reads the whole chain of causes, not the outer type. Only
    what no retry can cure is :class:`ProviderUnreachable`: a name that does not exist, a
    certificate that is not trusted or a TLS handshake that fails, a proxy that refuses us.
    """
    chain = _causes(error)
    root = next((cause for cause in reversed(chain) if str(cause)), chain[-1])
    detail = f"{type(root).__name__}: {root}"
    connecting = any(isinstance(cause, (aiohttp.ClientConnectorError, httpx.ConnectError)) for cause in chain)
    failed = _FailedRequest(url, _host(url), detail, config_key, connecting)
    for cause in chain:
        for read in _CAUSE_READERS:
            failure = read(cause, failed)
            if failure is not None:
                return failure
    if any(isinstance(cause, (aiohttp.ServerTimeoutError, TimeoutError)) for cause in chain) or (
        isinstance(chain[-1], httpx.TimeoutException)
    ):
        return ProviderTimeout(f"no answer from {url} in time ({detail})")
    return ProviderUnavailable(f"connection to {url} failed: {detail}")
