"""What goes wrong with an item people send, in words that can be shown to them."""

from __future__ import annotations


class MediaError(Exception):
    """An item could not be taken in (too large, a download cut short, not an image); the message says why,
    in words fit for the person who sent it (it never holds a URL: a Telegram file URL carries the bot token)."""


class TranscriptionError(MediaError):
    """Voice or audio could not be turned into text; the message says why (the service's status and words)."""
