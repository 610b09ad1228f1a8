"""The httpx client every provider client is built on, and who closes it.

:class:`agent.llm.client.ChatClient` and :class:`agent.llm.responses.ResponsesClient` share
this lifecycle; it lives apart from either so one route's client need not import the other's.
"""

from __future__ import annotations

from typing import Self

import httpx

from agent.http_options import HttpOptions
from agent.llm.http import open_http_client


class PooledClient:
    """What every provider client shares: a pooled httpx client, its own unless one is handed in (then the
    caller closes that one)."""

    def __init__(self, options: HttpOptions | None, http: httpx.AsyncClient | None) -> None:
        self.options = options or HttpOptions()
        self._owns_http = http is None
        self._http = http or open_http_client(self.options)

    @property
    def http(self) -> httpx.AsyncClient:
        """The pooled httpx client this provider client sends on (its endpoints share it)."""
        return self._http

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
