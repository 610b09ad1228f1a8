"""An httpx transport on aiohttp's connection pool: the httpx client API, a cheaper HTTP stack underneath.

foldgate talks to providers through httpx, but on the gateway's hot path httpcore's
per-request work costs several times what the same POST costs through aiohttp (which the
Telegram adapter already brings in). This transport keeps httpx's requests, responses,
timeouts and exception types — so the provider clients and their error handling are
unchanged — and moves the bytes with an ``aiohttp.ClientSession``. Responses are read
whole: it serves the request/response chat endpoints, not streaming.
"""

from __future__ import annotations

import asyncio

import aiohttp
import httpx


def _timeout(request: httpx.Request) -> aiohttp.ClientTimeout:
    """httpx's per-request timeouts as aiohttp's (``None`` = no limit, as in httpx)."""
    limits = request.extensions.get("timeout") or {}
    return aiohttp.ClientTimeout(
        total=None,
        connect=limits.get("connect"),
        sock_connect=limits.get("connect"),
        sock_read=limits.get("read"),
    )


class AiohttpTransport(httpx.AsyncBaseTransport):
    """``httpx.AsyncClient(transport=AiohttpTransport())``; one pooled aiohttp session per transport."""

    def __init__(self, *, limit_per_host: int = 100) -> None:
        self.limit_per_host = limit_per_host
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit_per_host=self.limit_per_host)
            # httpx already set every header (including the content length); send them as they are.
            self._session = aiohttp.ClientSession(connector=connector, auto_decompress=True, skip_auto_headers=("User-Agent",))
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        headers = [(k, v) for k, v in request.headers.multi_items() if k.lower() not in ("host", "content-length")]
        try:
            async with self._client().request(
                request.method,
                str(request.url),
                headers=headers,
                data=body or None,
                timeout=_timeout(request),
                allow_redirects=False,
            ) as response:
                content = await response.read()
                return httpx.Response(
                    response.status,
                    headers=[(k, v) for k, v in response.headers.items() if k.lower() != "content-encoding"],
                    content=content,
                    request=request,
                )
        except (asyncio.TimeoutError, aiohttp.ServerTimeoutError) as error:
            raise httpx.ReadTimeout(f"no answer within the timeout: {error}", request=request) from error
        except aiohttp.ClientConnectorError as error:
            raise httpx.ConnectError(str(error), request=request) from error
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError) as error:
            raise httpx.RemoteProtocolError(str(error) or type(error).__name__, request=request) from error
        except aiohttp.ClientError as error:
            raise httpx.NetworkError(str(error) or type(error).__name__, request=request) from error

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
