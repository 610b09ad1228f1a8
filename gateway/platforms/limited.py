"""Downloads that stop at a byte limit: a file over it costs at most the limit in memory, never its whole size.

Every platform's fetch ends here, so the refusal reads the same on each: the file's name, its
size (or "more than" the limit, when the platform did not say), and the limit.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterable

import aiohttp

from gateway.platforms.base import MediaFetchError, MediaTooLarge

#: Seconds one download may take in all.
DOWNLOAD_SECONDS = 120
#: Bytes read from the network at a time.
CHUNK = 64 * 1024


class LimitedBuffer(io.BytesIO):
    """A binary buffer that refuses, with :class:`MediaTooLarge`, a write that would take it past ``limit``."""

    def __init__(self, name: str, limit: int) -> None:
        super().__init__()
        self.name = name
        self.limit = limit

    @property
    def count(self) -> int:
        """Bytes taken so far."""
        return self.tell()

    def write(self, data: bytes | bytearray | memoryview, /) -> int:  # type: ignore[override]
        if self.tell() + len(data) > self.limit:
            raise MediaTooLarge(self.name, self.tell() + len(data), self.limit, reported=False)
        return super().write(data)


async def read_limited(chunks: AsyncIterable[bytes], name: str, limit: int) -> bytes:
    """Every chunk of a stream, stopping with :class:`MediaTooLarge` once more than ``limit`` bytes came."""
    buffer = LimitedBuffer(name, limit)
    async for chunk in chunks:
        buffer.write(chunk)
    return buffer.getvalue()


async def download(session: aiohttp.ClientSession, url: str, name: str, limit: int, *,
                   timeout: float = DOWNLOAD_SECONDS) -> bytes:
    """GET ``url`` into memory, at most ``limit`` bytes: refused before reading when its Content-Length
    says more, cut off when more arrive; :class:`MediaFetchError` for a refusal or a broken download."""
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout)) as response:
            if response.status != 200:
                raise MediaFetchError(f"{name} could not be downloaded (HTTP {response.status} {response.reason})")
            if response.content_length is not None and response.content_length > limit:
                raise MediaTooLarge(name, response.content_length, limit)
            data = await read_limited(response.content.iter_chunked(CHUNK), name, limit)
    except MediaFetchError:
        raise
    except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as error:
        raise MediaFetchError(f"the download of {name} broke off ({type(error).__name__})") from error
    if response.content_length is not None and len(data) != response.content_length:
        raise MediaFetchError(f"the download of {name} broke off after {len(data)} of {response.content_length} bytes")
    return data
