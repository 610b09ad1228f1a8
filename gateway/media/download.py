"""A download that never takes more than it may: refused by its declared size, stopped as soon as it passes
the limit, the body held once.

A platform's file (a Telegram file path, a Discord attachment URL) is fetched with :func:`download`.
The limit is checked twice: against ``Content-Length`` before a byte of the body is read, and
against what has arrived while reading (a server may send no length, or a compressed body that
grows as it is decoded), so memory never holds more than ``limit`` bytes of it. The body is
written into one :class:`io.BytesIO`, whose ``getvalue()`` hands over its buffer rather than a copy.
"""

from __future__ import annotations

import io
from collections.abc import Mapping

import httpx

from gateway.media.errors import MediaError
from gateway.media.units import size_text

#: Seconds to connect, and the longest pause between two reads of the body.
DEFAULT_TIMEOUT = 60.0


async def download(url: str, *, limit: int, client: httpx.AsyncClient | None = None,
                   headers: Mapping[str, str] | None = None, timeout: float = DEFAULT_TIMEOUT) -> bytes:
    """The body at ``url``, at most ``limit`` bytes (decoded).

    Raises :class:`MediaError` for a body over the limit (before reading it when the server says
    its size), an error status, and a body cut short or stalled ("the download stopped after
    3.1 MB: ..."). The URL is never part of the message: a Telegram file URL carries the bot token.
    ``client`` is the caller's (its proxy, its pool); without one a client is made for this call.
    """
    own = client is None
    http = client or httpx.AsyncClient(timeout=httpx.Timeout(timeout), follow_redirects=True)
    body = io.BytesIO()
    try:
        async with http.stream("GET", url, headers=headers) as response:
            if response.status_code >= 400:
                raise MediaError(f"the download was refused: the server answered {response.status_code}"
                                 f" {response.reason_phrase}".rstrip())
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limit:
                raise MediaError(f"the file is {size_text(int(declared))}, over the {size_text(limit)} limit")
            async for chunk in response.aiter_bytes():
                if body.tell() + len(chunk) > limit:
                    raise MediaError(f"the download stopped after {size_text(body.tell())}: the file is larger"
                                     f" than the {size_text(limit)} limit")
                body.write(chunk)
    except httpx.HTTPError as error:
        raise MediaError(f"the download stopped after {size_text(body.tell())}: {_reason(error)}") from error
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
