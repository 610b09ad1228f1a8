"""A throwaway gateway for the demo and for replays, so neither writes into the user's own.

A replayed fixture or the bundled demo would otherwise leave its messages (and its update ids,
remembered for deduplication) in the user's chats: the next replay would find every message
already taken in and report no turns. Run them in a fresh home with its own embedded server,
removed afterwards, unless the user asks for their configured gateway.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

from gateway.config import Settings


@contextlib.contextmanager
def throwaway_gateway(settings: Settings, purpose: str) -> Iterator[Settings]:
    """``settings`` with a temporary home and the embedded Redis in it; the home is removed on exit.

    Close every gateway opened with these settings before leaving the block: the embedded
    server's files live in the home.
    """
    with tempfile.TemporaryDirectory(prefix=f"foldgate-{purpose}-") as home:
        yield settings.model_copy(
            update={
                "gateway": settings.gateway.model_copy(update={"home": home}),
                "redis": settings.redis.model_copy(update={"url": "", "cluster": False}),
            }
        )


def describe_gateway(settings: Settings) -> str:
    """Where a gateway built from ``settings`` keeps its sessions, in words for a one-line report."""
    if settings.redis.url:
        return f"Redis at {without_credentials(settings.redis.url)} (key prefix {settings.redis.key_prefix})"
    return f"embedded Redis under {settings.home_path}"


def without_credentials(url: str) -> str:
    """``url`` with any user name and password left out, for printing."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
