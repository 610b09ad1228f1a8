"""Downloads that stop at a byte limit: a file over it costs at most the limit in memory, never its whole size.

Every platform's fetch ends here, so the refusal reads the same on each: the file's name, its
size (or "more than" the limit, when the platform did not say), and the limit.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterable

from gateway.platforms.base import MediaTooLarge


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
