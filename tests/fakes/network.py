"""Network conditions for connect-path tests: an address whose connects hang, and names with chosen addresses.

:class:`BlackHole` — a TCP address (default ``127.0.0.2``, a free port) where a connect
neither succeeds nor is refused: it just hangs, as with a provider behind a firewall that
drops packets. It is a real listening socket whose accept queue is full: it listens with
a backlog of 0 and is never accepted from, and a few connections made at start fill the
queue. Linux then drops every further SYN (``tcp_abort_on_overflow`` is 0 by default), so
the client retransmits until its own timeout. :meth:`BlackHole.start` checks that a probe
connect really hangs and refuses to run otherwise.

:func:`resolve` — make host names resolve to several addresses in a given order, e.g.
``resolve({"fake-provider.test": ["127.0.0.2", "127.0.0.1"]})`` for a first address that
hangs and a second that answers. It patches :func:`socket.getaddrinfo`, which is the
resolver under

- asyncio's default loop: ``loop.getaddrinfo`` runs ``socket.getaddrinfo`` in a thread,
  and ``loop.create_connection`` / ``asyncio.open_connection`` call ``loop.getaddrinfo``;
- aiohttp's ``ThreadedResolver`` (its default when ``aiodns`` is absent), via ``loop.getaddrinfo``;
- anyio's ``getaddrinfo`` and so httpcore/httpx on the anyio backend, via ``loop.getaddrinfo``
  (anyio passes the host IDNA-encoded as bytes; both forms are matched);
- blocking code (``socket.create_connection``, ``http.client``, ``requests``).

It does not reach resolvers that bypass the module function: uvloop (its ``getaddrinfo``
and ``create_connection`` resolve in libuv), aiohttp's ``AsyncResolver`` (c-ares via
aiodns), or a process other than this one.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

Address = tuple[str, int]


class BlackHole:
    """See the module docstring. ``with BlackHole() as hole: hole.address`` (or ``async with``)."""

    def __init__(self, host: str = "127.0.0.2", port: int = 0, *, fillers: int = 3) -> None:
        self.host = host
        self.port = port
        self.fillers = fillers
        self._listener: socket.socket | None = None
        self._filling: list[socket.socket] = []

    @property
    def address(self) -> Address:
        return self.host, self.port

    @property
    def url(self) -> str:
        """An ``http://`` URL on the address (nothing will ever answer it)."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> BlackHole:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.bind((self.host, self.port))
        listener.listen(0)
        self._listener = listener
        self.port = listener.getsockname()[1]
        for _ in range(self.fillers):
            self._filling.append(self._connect_nonblocking(family))
        if not self._probe_hangs(family):
            self.stop()
            raise RuntimeError(
                f"a connect to {self.host}:{self.port} does not hang on this machine (is "
                "net.ipv4.tcp_abort_on_overflow set?)"
            )
        return self

    def _connect_nonblocking(self, family: int) -> socket.socket:
        client = socket.socket(family, socket.SOCK_STREAM)
        client.setblocking(False)
        client.connect_ex(self.address)  # EINPROGRESS; it completes (or not) in the kernel
        return client

    def _probe_hangs(self, family: int, wait: float = 0.05) -> bool:
        """True when a fresh connect gets no answer within ``wait`` seconds."""
        probe = socket.socket(family, socket.SOCK_STREAM)
        probe.settimeout(wait)
        try:
            probe.connect(self.address)
        except TimeoutError:
            return True
        except OSError:
            return False  # refused: not a black hole
        else:
            return False
        finally:
            probe.close()

    def stop(self) -> None:
        for client in self._filling:
            client.close()
        self._filling.clear()
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def __enter__(self) -> BlackHole:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def __aenter__(self) -> BlackHole:
        return self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        self.stop()


def _family_of(address: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ipaddress.ip_address(address).version == 6 else socket.AF_INET


def _answers(addresses: Sequence[str], port: Any, family: int, kind: int, proto: int) -> list[tuple[Any, ...]]:
    """getaddrinfo's tuples for ``addresses`` in order, filtered as the real call filters by family and type."""
    if isinstance(port, bytes):
        port = port.decode()
    if port in (None, ""):
        number = 0
    elif isinstance(port, str) and not port.isdigit():
        number = socket.getservbyname(port)
    else:
        number = int(port)
    kinds = [kind] if kind else [socket.SOCK_STREAM, socket.SOCK_DGRAM]
    found: list[tuple[Any, ...]] = []
    for address in addresses:
        address_family = _family_of(address)
        if family not in (0, socket.AF_UNSPEC) and family != address_family:
            continue
        for sock_kind in kinds:
            protocol = proto or (socket.IPPROTO_TCP if sock_kind == socket.SOCK_STREAM else socket.IPPROTO_UDP)
            sockaddr: tuple[Any, ...] = (
                (address, number) if address_family == socket.AF_INET else (address, number, 0, 0)
            )
            found.append((address_family, socket.SocketKind(sock_kind), protocol, "", sockaddr))
    if not found:
        raise socket.gaierror(socket.EAI_ADDRFAMILY, "Address family for hostname not supported")
    return found


@contextlib.contextmanager
def resolve(names: Mapping[str, Sequence[str]]) -> Iterator[list[str]]:
    """Within the block, each name in ``names`` resolves to its addresses, in that order (see the module docstring).

    Yields the list of names looked up through the patch, in order, so a test can see
    that resolution happened.
    """
    wanted = {name.lower().rstrip("."): list(addresses) for name, addresses in names.items()}
    original = socket.getaddrinfo
    looked_up: list[str] = []

    def patched(
        host: Any, port: Any, family: int = 0, type: int = 0, proto: int = 0, flags: int = 0
    ) -> list[tuple[Any, ...]]:
        name = host.decode("idna") if isinstance(host, (bytes, bytearray)) else host
        key = name.lower().rstrip(".") if isinstance(name, str) else None
        if key in wanted:
            looked_up.append(key)
            return _answers(wanted[key], port, family, type, proto)
        return original(host, port, family, type, proto, flags)

    socket.getaddrinfo = patched  # type: ignore[assignment]
    try:
        yield looked_up
    finally:
        socket.getaddrinfo = original  # type: ignore[assignment]


async def connect_hangs(address: Address, timeout: float = 0.2) -> bool:
    """Whether a plain ``asyncio.open_connection`` to ``address`` is still pending after ``timeout`` seconds."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(*address), timeout)
    except TimeoutError:
        return True
    writer.close()
    return False


#: The environment variables that route or trust a client's connections, cleared by the network tests.
PROXY_VARIABLES = (
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "https_proxy",
    "http_proxy",
    "all_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
)
