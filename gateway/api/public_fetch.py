"""Downloads a request's https image only from a public address, so a key holder cannot make the gateway fetch
what only it can reach (a metadata service, an admin page on localhost, a database on the private network).

The check is made where the connection is opened, not on the URL beforehand: the download's HTTP client gets a
network backend (:class:`PublicOnlyBackend`) whose every TCP connection resolves the host itself, refuses when
any address it resolves to is loopback, private, link-local, multicast, reserved or otherwise not global, and
then connects to one of the very addresses it checked. A name that resolves to a public address when checked
and to an internal one a moment later (DNS rebinding) therefore never reaches the internal one, and every hop
of a redirect is a new connection checked the same way. TLS is still negotiated for the URL's host name (its
certificate checked against that name), since the client only hands the backend the address to dial.

The download connects directly: a proxy in the environment would do the connecting, beyond the check.
``platforms.api.fetch_private_urls: true`` turns all of this off (the plain download, proxies honoured).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable

import httpcore
import httpx

from gateway.media.download import DEFAULT_TIMEOUT, download
from gateway.media.errors import MediaError

#: The setting that lets the gateway fetch images from any address, named in the refusal.
SETTING = "platforms.api.fetch_private_urls: true"


class PrivateAddress(MediaError):
    """The image's host resolves to an address the gateway does not fetch from (the message says what allows it)."""

    def __init__(self) -> None:
        super().__init__(
            "the image's host resolves to a loopback, private, link-local, multicast or reserved address, which"
            f" this gateway does not fetch from ({SETTING} allows it)"
        )


def is_public(address: str) -> bool:
    """Whether ``address`` (an IP, IPv6 possibly with a zone) is one the gateway may fetch from: globally
    routable, and none of loopback, private, link-local, multicast, reserved or unspecified. An IPv4 address
    written as IPv6 (``::ffff:127.0.0.1``) is judged as the IPv4 address it is."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    barred = ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_multicast or ip.is_reserved
    return not (barred or ip.is_unspecified) and ip.is_global


async def public_addresses(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to, when all of them are public; :class:`PrivateAddress` when any is not
    (one internal address among public ones is refused too: which one is dialled is not the client's to say)."""
    try:
        found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as error:
        raise MediaError(f"the image's host could not be resolved ({error})") from None
    addresses = list(dict.fromkeys(str(entry[4][0]) for entry in found))
    if not addresses:
        raise MediaError("the image's host resolves to no address")
    if not all(is_public(address) for address in addresses):
        raise PrivateAddress()
    return addresses


class PublicOnlyBackend(httpcore.AsyncNetworkBackend):
    """httpcore's own backend, dialling only addresses :func:`public_addresses` checked (see the module)."""

    def __init__(self) -> None:
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await public_addresses(host, port)
        failure: Exception | None = None
        for address in addresses:  # each of them checked: the first that answers
            try:
                return await self._inner.connect_tcp(
                    address, port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as error:
                failure = error
        assert failure is not None
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise MediaError("the image cannot be fetched through a local socket")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class PublicOnlyTransport(httpx.AsyncHTTPTransport):
    """httpx's transport over a connection pool that dials through :class:`PublicOnlyBackend`.

    httpx takes no network backend of its own, so the pool it made is replaced by one made the same way with the
    backend (the certificate store as httpx reads it, ``SSL_CERT_FILE`` included); a test downloads from a
    loopback server through it and must be refused, so an httpx that kept its pool elsewhere would be noticed.
    """

    def __init__(self) -> None:
        super().__init__()
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(), network_backend=PublicOnlyBackend()
        )


async def download_public(url: str, limit: int, name: str) -> bytes:
    """The body at ``url`` within ``limit`` bytes (:func:`gateway.media.download.download`), fetched only from a
    public address: :class:`PrivateAddress` otherwise."""
    transport = PublicOnlyTransport()
    async with httpx.AsyncClient(
        transport=transport, timeout=httpx.Timeout(DEFAULT_TIMEOUT), follow_redirects=True
    ) as client:
        return await download(url, limit=limit, name=name, client=client)
