"""A Bot API answer foldgate cannot read: one line naming the setting and what came back, never a traceback.

aiogram checks every answer against its models, and one that does not fit (a Bot API emulator
leaving out ``is_bot``, a proxy's HTML page) ends in ``ClientDecodeError``, whose text runs to
several lines with the whole answer in it. Every request of the adapter's bot goes through
:class:`ReadingSession`, which turns that into something foldgate can act on and print:

- an answer with an error status (4xx, 5xx) whose body is not the Bot API's is the error its status
  means, exactly as aiogram raises it for a readable one, with an excerpt of the body as the
  description: a proxy's 502 page is retried like any 5xx, a bare ``404: Not Found`` is refused like a 404;
- anything else is :class:`UnreadableAnswer`: the setting to look at, the field that failed and a short
  excerpt of what came back (never the bot token), and whether the answer said ``ok`` — the call then
  took effect (a message was sent), and only what the answer would have told is missing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, TypeVar

from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import ClientDecodeError
from aiogram.methods import TelegramMethod
from aiogram.methods.base import Response
from pydantic import ValidationError

T = TypeVar("T")

#: Where aiogram sends requests unless ``platforms.telegram.api_server`` says otherwise.
DEFAULT_API_SERVER = "https://api.telegram.org"
#: Characters of an answer quoted in a line: enough to recognise it, short enough for one line.
EXCERPT_CHARS = 160


def api_setting(api_server: str | None) -> str:
    """The key to look at when the Bot API answers what foldgate cannot use."""
    return "platforms.telegram.api_server" if api_server else "platforms.telegram"


def shortened(text: str, limit: int = EXCERPT_CHARS) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    flat = re.sub(r"\s+", " ", text).strip()
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _compact(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _part(data: Any, path: Sequence[int | str]) -> Any:
    """The deepest value of ``data`` along ``path`` (pydantic's location of an error; a step that is not a key
    of the answer, such as a union's member name, ends the walk)."""
    for step in path:
        if (isinstance(data, dict) and step in data) or (
            isinstance(data, list) and isinstance(step, int) and 0 <= step < len(data)
        ):
            data = data[step]
        else:
            break
    return data


def what_failed(original: Exception, data: Any) -> tuple[str, str]:
    """(the field that failed and why, the excerpt of the answer around it)."""
    if isinstance(original, ValidationError) and original.errors():
        errors = original.errors()
        first = errors[0]
        location = ".".join(str(step) for step in first["loc"]) or "the answer"
        reason = f"{location}: {first['msg'][:1].lower()}{first['msg'][1:]}"
        if len(errors) > 1:
            reason += f" (and {len(errors) - 1} more)"
        return reason, shortened(_compact(_part(data, first["loc"][:-1])))
    if isinstance(data, str) and not data.strip():
        return "an empty answer", '""'
    return "not JSON", shortened(_compact(data))


class UnreadableAnswer(ClientDecodeError):
    """The Bot API answered ``method`` with what foldgate cannot read; still aiogram's ``ClientDecodeError``.

    ``accepted`` is True when the answer said ``ok`` with a success status: the call took effect.
    ``str()`` is one line: the setting, then :attr:`sentence`.
    """

    def __init__(
        self, error: ClientDecodeError, *, method: str, where: str, setting: str, accepted: bool, token: str
    ) -> None:
        super().__init__(error.message, error.original, error.data)
        reason, excerpt = what_failed(error.original, error.data)
        self.method = method
        self.where = where
        self.setting = setting
        self.accepted = accepted
        text = (
            f"the Bot API at {where} answered {method} with something foldgate cannot read ({reason}; "
            f"it sent {excerpt})"
        )
        #: What happened, in one sentence without the setting; the token never appears in it.
        self.sentence = text.replace(token, "<token>") if token else text

    def __str__(self) -> str:
        return f"{self.setting}: {self.sentence}"

    def result_number(self, *path: str) -> int | None:
        """A whole number the answer's result holds at ``path`` (a sent message's ``message_id``), when it holds one:
        what is left to know of a call whose answer as a whole cannot be read."""
        value = self.data.get("result") if isinstance(self.data, dict) else None
        for step in path:
            value = value.get(step) if isinstance(value, dict) else None
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def fix(self) -> str:
        """What the operator can do about it."""
        if self.setting == "platforms.telegram.api_server":
            return "point platforms.telegram.api_server at a server that answers as Telegram's Bot API does"
        return (
            "check for a proxy between this machine and Telegram that changes answers, or update foldgate "
            "(its aiogram may not know this answer's shape)"
        )


class ReadingSession(AiohttpSession):
    """aiogram's HTTP session for ``api_server`` (None: Telegram's), whose unreadable answers are as described
    in the module docstring."""

    def __init__(self, api_server: str | None) -> None:
        if api_server:
            super().__init__(api=TelegramAPIServer.from_base(api_server))
        else:
            super().__init__()
        self.where = api_server or DEFAULT_API_SERVER
        self.setting = api_setting(api_server)

    def check_response(self, bot: Bot, method: TelegramMethod[T], status_code: int, content: str) -> Response[T]:
        try:
            return super().check_response(bot, method, status_code, content)
        except ClientDecodeError as error:
            name = method.__api_method__
            if status_code >= 400:
                # an error answer that is not the Bot API's: the same check on a readable version of it
                # raises the error its status means (it never returns: the answer is not ok)
                said = shortened(content.replace(bot.token, "<token>")) or "an empty answer"
                readable = {"ok": False, "error_code": status_code, "description": f"HTTP {status_code}: {said}"}
                return super().check_response(bot, method, status_code, json.dumps(readable))
            accepted = isinstance(error.data, dict) and error.data.get("ok") is True
            raise UnreadableAnswer(
                error, method=name, where=self.where, setting=self.setting, accepted=accepted, token=bot.token
            ) from error
