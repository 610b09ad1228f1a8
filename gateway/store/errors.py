"""What a refused store operation raises, and how a script's coded error reply becomes one of them.

The scripts fail with ``FG_<KIND> message`` (``helpers.lua``'s ``fail``) before their first write,
so every exception here means nothing was written.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from redis.exceptions import ResponseError

from agent.messages import InvalidMessage


class StoreError(RuntimeError):
    """A store operation was refused; nothing was written."""


class StaleLock(StoreError):
    """The caller's chat lock expired or was taken over; its write was refused."""


class VersionConflict(StoreError):
    """The session changed since the caller read it (version, pointer or successor moved)."""


class UnknownSession(StoreError, KeyError):
    """No session with that id exists for the chat."""


class WrongKeyType(StoreError):
    """A chat key holds a different Redis type than the store writes; it was left alone."""


_ERRORS: dict[str, type[StoreError]] = {
    "FG_STALE_LOCK": StaleLock,
    "FG_CONFLICT": VersionConflict,
    "FG_UNKNOWN_SESSION": UnknownSession,
    "FG_WRONG_TYPE": WrongKeyType,
}
#: Redis appends where in the script the error was raised; callers want the message alone.
_SCRIPT_LOCATION = re.compile(r"\s+script: .*$", re.DOTALL)


def translate(error: ResponseError) -> Exception:
    """Turn a script's coded error reply into the matching exception (others pass through)."""
    text = _SCRIPT_LOCATION.sub("", str(error))
    code, _, message = text.partition(" ")
    if code == "FG_INVALID":
        return InvalidMessage(message)
    kind = _ERRORS.get(code)
    return kind(message) if kind else error


@contextmanager
def script_errors() -> Iterator[None]:
    """Inside, a script's coded error reply raises the store's matching exception (other errors pass)."""
    try:
        yield
    except ResponseError as error:
        translated = translate(error)
        if translated is error:
            raise
        raise translated from error
