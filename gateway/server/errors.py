"""The errors of the embedded Redis server, in a module of their own so every part of it can raise them."""

from __future__ import annotations


class EmbeddedRedisError(RuntimeError, OSError):
    """The embedded server could not start or stop; the message is one line, or quotes its log.

    Also an :class:`OSError`, so commands that report OS errors in one line report this too.
    """


class EmbeddedRedisInUse(EmbeddedRedisError):
    """Another live foldgate runs the server on this home and it may not be shared; the message says what to do."""
