"""The bounded download against a real HTTP server on loopback: refused by its declared size, stopped as soon as
it passes the limit (no length, a compressed body that grows), a body cut short or stalled, an error status."""

from __future__ import annotations

import asyncio
import gzip
import os
from collections import defaultdict
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio
from aiohttp import web

from gateway.media.download import download
from gateway.media.errors import MediaError

MB = 1024 * 1024
BODY = os.urandom(3 * MB)
#: Seconds before a wait for the server to end a response is given up as a hang.
PATIENCE = 30.0


class FileServer:
    """Serves files in the ways servers really do, and records how much of each body it managed to write;
    ``ended`` is set for a body once its handler is done writing, whether whole or cut off by the client."""

    def __init__(self) -> None:
        self.written: dict[str, int] = {}
        self.ended: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.release = asyncio.Event()  # a stalled body waits for it (set when the server stops)
        self.app = web.Application()
        self.app.add_routes(
            [
                web.get("/whole", self.whole),
                web.get("/big", self.big),
                web.get("/unsized", self.unsized),
                web.get("/cut", self.cut),
                web.get("/bomb", self.bomb),
                web.get("/stall", self.stall),
            ]
        )
        self.runner = web.AppRunner(self.app)
        self.url = ""

    async def __aenter__(self) -> FileServer:
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        host, port = self.runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release.set()
        await self.runner.cleanup()

    async def _send(
        self,
        request: web.Request,
        name: str,
        total: int,
        *,
        declared: int | None,
        stop_after: int | None = None,
        stall: bool = False,
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        if declared is not None:
            response.content_length = declared
        else:
            response.enable_chunked_encoding()
        self.written[name] = 0
        try:
            return await self._write(request, response, name, total, stop_after=stop_after, stall=stall)
        finally:
            self.ended[name].set()

    async def _write(
        self,
        request: web.Request,
        response: web.StreamResponse,
        name: str,
        total: int,
        *,
        stop_after: int | None,
        stall: bool,
    ) -> web.StreamResponse:
        await response.prepare(request)
        chunk = b"\x00" * (64 * 1024)
        try:
            while self.written[name] < total:
                if stop_after is not None and self.written[name] >= stop_after:
                    if stall:
                        await self.release.wait()
                    assert request.transport is not None
                    request.transport.close()  # the connection drops mid-body
                    return response
                await response.write(chunk)
                self.written[name] += len(chunk)
        except (ConnectionResetError, ConnectionError):
            return response
        await response.write_eof()
        return response

    async def whole(self, request: web.Request) -> web.Response:
        return web.Response(body=BODY, content_type="image/jpeg")

    async def big(self, request: web.Request) -> web.StreamResponse:
        return await self._send(request, "big", 64 * MB, declared=64 * MB)

    async def unsized(self, request: web.Request) -> web.StreamResponse:
        return await self._send(request, "unsized", 64 * MB, declared=None)

    async def cut(self, request: web.Request) -> web.StreamResponse:
        return await self._send(request, "cut", 2 * MB, declared=2 * MB, stop_after=MB)

    async def stall(self, request: web.Request) -> web.StreamResponse:
        return await self._send(request, "stall", 2 * MB, declared=2 * MB, stop_after=MB, stall=True)

    async def bomb(self, request: web.Request) -> web.Response:
        """A few KB on the wire that decode to 8 MB: the declared length says nothing of the real size."""
        packed = gzip.compress(b"\x00" * (8 * MB))
        return web.Response(body=packed, headers={"Content-Encoding": "gzip", "Content-Type": "text/plain"})


@pytest_asyncio.fixture
async def server() -> AsyncIterator[FileServer]:
    async with FileServer() as running:
        yield running


async def test_a_body_within_the_limit_arrives_whole(server: FileServer) -> None:
    assert await download(f"{server.url}/whole", limit=len(BODY)) == BODY


async def test_a_declared_size_over_the_limit_is_refused_before_the_body(server: FileServer) -> None:
    with pytest.raises(MediaError, match=r"^the file is 64 MB, over the 2 MB limit$"):
        await download(f"{server.url}/big", limit=2 * MB)
    await asyncio.wait_for(server.ended["big"].wait(), PATIENCE)  # the server found the client gone
    assert server.written["big"] < 16 * MB  # what the socket buffers took before the client hung up


async def test_a_body_without_a_length_stops_as_soon_as_it_passes_the_limit(server: FileServer) -> None:
    with pytest.raises(MediaError, match=r"^the file is more than 2 MB, over the 2 MB limit$"):
        await download(f"{server.url}/unsized", limit=2 * MB)
    await asyncio.wait_for(server.ended["unsized"].wait(), PATIENCE)
    assert server.written["unsized"] < 16 * MB


async def test_a_compressed_body_is_measured_as_it_decodes(server: FileServer) -> None:
    with pytest.raises(MediaError, match=r"over the 1 MB limit"):
        await download(f"{server.url}/bomb", limit=MB)
    assert len(await download(f"{server.url}/bomb", limit=8 * MB)) == 8 * MB


async def test_a_body_cut_halfway_says_how_far_it_got(server: FileServer) -> None:
    with pytest.raises(
        MediaError, match=r"^the download of the file stopped after 1 MB: the connection closed before the whole"
    ):
        await download(f"{server.url}/cut", limit=4 * MB)


async def test_a_stalled_body_times_out_with_what_arrived(server: FileServer) -> None:
    with pytest.raises(MediaError, match=r"^the download of the file stopped after 1 MB: the server stopped sending"):
        await download(f"{server.url}/stall", limit=4 * MB, timeout=0.5)


async def test_an_error_status_and_an_unreachable_server_are_clear(server: FileServer) -> None:
    with pytest.raises(MediaError, match=r"^the download of the file was refused: the server answered 404 Not Found$"):
        await download(f"{server.url}/missing", limit=MB)
    with pytest.raises(
        MediaError, match=r"^the download of the file stopped after 0 bytes: could not connect"
    ) as caught:
        await download("http://127.0.0.1:9/file/bot123:SECRET/photo.jpg", limit=MB)
    assert "SECRET" not in str(caught.value)


async def test_the_callers_client_is_used_and_left_open(server: FileServer) -> None:
    async with httpx.AsyncClient() as client:
        assert await download(f"{server.url}/whole", limit=len(BODY), client=client) == BODY
        assert not client.is_closed
