"""How a provider client is asked to reach its endpoint: timeouts and proxy, as configured.

These are settings, read by ``agent.settings`` and by the clients in ``agent.llm``; they live
below both so the settings need nothing from the code that builds requests.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

#: The SOCKS schemes a proxy URL may use (``agent.llm.http`` says how each is spoken).
SOCKS_SCHEMES = ("socks5", "socks5h", "socks4", "socks4a")
PROXY_SCHEMES = ("http", "https", *SOCKS_SCHEMES)


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


def proxy_problem(url: str) -> str | None:
    """Why ``url`` cannot be a proxy, or None: shared by ``config check`` and the client's start."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in PROXY_SCHEMES:
        *others, last = (f"{scheme}://" for scheme in PROXY_SCHEMES)
        return f"must be a proxy URL starting with {', '.join(others)} or {last}"
    try:
        _ = parts.port  # reading it raises ValueError for a port that is not a number
    except ValueError:
        return "must have a numeric port"
    return None if parts.hostname else "must name the proxy's host"
