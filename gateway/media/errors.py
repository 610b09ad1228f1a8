"""What goes wrong with an item people send, in words that can be shown to them.

Every platform's fetch, the download, the store and the intake raise these, so a refusal reads the
same wherever it happened: the file's name, its size (or "more than" the limit, when nobody said),
and the limit.
"""

from __future__ import annotations

from gateway.media.units import size_text


class MediaError(Exception):
    """An item could not be taken in (too large, a download cut short, not an image); the message says why,
    in words fit for the person who sent it (it never holds a URL: a Telegram file URL carries the bot token)."""


class MediaTooLarge(MediaError):
    """An item over the byte limit: refused before (or as soon as) more than ``limit`` bytes would be read."""

    def __init__(self, name: str, size: int, limit: int, *, reported: bool = True) -> None:
        what = size_text(size) if reported else f"more than {size_text(limit)}"
        super().__init__(f"{name or 'the file'} is {what}, over the {size_text(limit)} limit")
        self.size = size
        self.limit = limit


class TranscriptionError(MediaError):
    """Voice or audio could not be turned into text; the message says why (the service's status and words)."""
