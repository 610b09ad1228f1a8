"""A fake Discord CDN: a real aiohttp server on 127.0.0.1 serving attachment bytes, as cdn.discordapp.com does.

    async with FakeDiscordCDN() as cdn:
        attachment = cdn.attachment("chart.png", png_bytes, content_type="image/png", width=640, height=480)
        payload = message_payload(ALICE, "", attachments=(attachment,))   # a MESSAGE_CREATE's attachment
        ...
        assert cdn.requests == [...]

``attachment`` registers bytes (or ``size=N`` zeros made as they are sent, for a big file never held
in memory) at ``/attachments/<channel>/<id>/<filename>`` and returns the attachment object Discord's
gateway sends, with ``url`` pointing here; ``voice=True`` gives it a voice message's
``duration_secs`` and ``waveform``. A download answers with a Content-Length, in chunks;
``break_download(url)`` makes one send half its bytes and drop the connection, and
``without_length(url)`` sends it chunked with no Content-Length (a server that does not say the size).
Every GET is logged in ``requests`` (paths).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from aiohttp import web

_CHUNK = 64 * 1024
_ids = itertools.count(1_300_000_000_000_000_000)


@dataclass
class Served:
    data: bytes | None
    size: int
    broken: bool = False
    chunked: bool = False

    def chunks(self, upto: int) -> Any:
        for start in range(0, upto, _CHUNK):
            end = min(start + _CHUNK, upto)
            yield self.data[start:end] if self.data is not None else bytes(end - start)


class FakeDiscordCDN:
    """Serves registered attachments over HTTP on loopback."""

    def __init__(self, channel_id: int = 1) -> None:
        self.channel_id = channel_id
        self.files: dict[str, Served] = {}
        self.requests: list[str] = []
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def __aenter__(self) -> FakeDiscordCDN:
        app = web.Application()
        app.router.add_get("/attachments/{channel}/{id}/{filename}", self._serve)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def __aexit__(self, *_exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def attachment(
        self,
        filename: str,
        data: bytes | None = None,
        *,
        size: int | None = None,
        content_type: str | None = None,
        width: int | None = None,
        height: int | None = None,
        voice: bool = False,
        duration: float = 4.2,
    ) -> dict[str, Any]:
        """Register a file and return its attachment object as Discord's gateway sends it."""
        attachment_id = next(_ids)
        path = f"/attachments/{self.channel_id}/{attachment_id}/{filename}"
        length = len(data) if data is not None else int(size or 0)
        self.files[path] = Served(data, length)
        found: dict[str, Any] = {
            "id": str(attachment_id),
            "filename": filename,
            "size": length,
            "url": f"{self.base_url}{path}?ex=6800&is=67ff&hm=abc",
            "proxy_url": f"{self.base_url}{path}",
        }
        if content_type is not None:
            found["content_type"] = content_type
        if width is not None and height is not None:
            found.update(width=width, height=height)
        if voice:
            found.update(duration_secs=duration, waveform="AAAAAAAAAAAA")
        return found

    def _served(self, url: str) -> Served:
        return self.files[url.removeprefix(self.base_url).split("?", 1)[0]]

    def break_download(self, url: str) -> None:
        """Make the download of ``url`` send half its bytes, then drop the connection."""
        self._served(url).broken = True

    def without_length(self, url: str) -> None:
        """Serve ``url`` chunked, with no Content-Length."""
        self._served(url).chunked = True

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(request.path)
        served = self.files.get(request.path)
        if served is None:
            return web.Response(status=404, text="Not Found")
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        if served.chunked:
            response.enable_chunked_encoding()
        else:
            response.content_length = served.size
        await response.prepare(request)
        for chunk in served.chunks(served.size // 2 if served.broken else served.size):
            await response.write(chunk)
        if served.broken:
            assert request.transport is not None
            request.transport.close()
            return response
        await response.write_eof()
        return response
