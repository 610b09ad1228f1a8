"""A download that never takes more than it may: refused by its declared size, stopped as soon as it passes
the limit, the body held once.

A platform's file (a Telegram file path, a Discord attachment URL) is fetched with :func:`download`.
The limit is checked twice: against ``Content-Length`` before a byte of the body is read, and
against what has arrived while reading (a server may send no length, or a compressed body that
grows as it is decoded), so memory never holds more than ``limit`` bytes of it. The body is
written into one :class:`LimitedBuffer`, which refuses a write past the limit; a client that writes
a download into a file-like object itself (aiogram's ``download_file``) is handed the same buffer.
"""

from __future__ import annotations

import io
from collections.abc import Mapping

import httpx

from gateway.media.errors import MediaError, MediaTooLarge
from gateway.media.units import size_text

#: Seconds to connect, and the longest pause between two reads of the body.
DEFAULT_TIMEOUT = 60.0
#: Seconds a whole download may take where the client bounds it as one (aiogram's).
DOWNLOAD_SECONDS = 120
#: Bytes read from the network at a time where the client asks.
CHUNK = 64 * 1024


class LimitedBuffer(io.BytesIO):
    """A binary buffer that refuses, with :class:`MediaTooLarge`, a write that would take it past ``limit``."""

    def __init__(self, name: str, limit: int) -> None:
        super().__init__()
        self.name = name
        self.limit = limit

    def write(self, data: bytes | bytearray | memoryview, /) -> int:  # type: ignore[override]
        if self.tell() + len(data) > self.limit:
            raise MediaTooLarge(self.name, self.tell() + len(data), self.limit, reported=False)
        return super().write(data)


async def download(
    url: str,
    *,
    limit: int,
    name: str = "the file",
    client: httpx.AsyncClient | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> bytes:
    """The body at ``url``, at most ``limit`` bytes (decoded).

    Raises :class:`MediaTooLarge` for a body over the limit (before reading it when the server says
    its size), :class:`MediaError` for an error status and a body cut short or stalled ("the download
    of trace.log stopped after 3.1 MB: ..."); ``name`` is the file as the person knows it. The URL is
    never part of the message: a Telegram file URL carries the bot token.
    ``client`` is the caller's (its proxy, its pool); without one a client is made for this call.
    """
    own = client is None
    http = client or httpx.AsyncClient(timeout=httpx.Timeout(timeout), follow_redirects=True)
    body = LimitedBuffer(name, limit)
    try:
        async with http.stream("GET", url, headers=headers) as response:
            if response.status_code >= 400:
                raise MediaError(
                    f"the download of {name} was refused: the server answered {response.status_code}"
                    f" {response.reason_phrase}".rstrip()
                )
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limit:
                raise MediaTooLarge(name, int(declared), limit)
            async for chunk in response.aiter_bytes():
                body.write(chunk)
    except httpx.HTTPError as error:
        raise MediaError(f"the download of {name} stopped after {size_text(body.tell())}: {_reason(error)}") from error
    finally:
        if own:
            await http.aclose()
    return body.getvalue()


def _reason(error: httpx.HTTPError) -> str:
    """What went wrong, without the URL httpx may put in its message."""
    if isinstance(error, httpx.TimeoutException):
        return "the server stopped sending (timed out)"
    if isinstance(error, httpx.RemoteProtocolError):
        return "the connection closed before the whole file arrived"
    if isinstance(error, httpx.ConnectError):
        return "could not connect to the server"
    if isinstance(error, httpx.DecodingError):
        return "the server sent a body that does not decode"
    return f"the connection failed ({type(error).__name__})"
