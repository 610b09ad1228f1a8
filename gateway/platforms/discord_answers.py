"""A Discord answer foldgate cannot read: one line naming the setting and what came back, never a traceback.

discord.py builds its models straight from Discord's JSON. An answer that lacks a field (an emulator's
user without ``id``), or claims to be JSON and is not, ends in a ``KeyError``, ``TypeError`` or
``ValueError`` from deep inside the library that says neither which request it was nor what came
back. The adapter's client keeps the last few REST answers it read (:class:`Answers`, through
discord.py's ``http_trace`` hook); such a failure while a call runs, once an answer to it came in, is
that answer being unreadable (:func:`reading`), and becomes :class:`UnreadableDiscordAnswer`. A failure
of that kind with no answer behind it is a bug, and keeps its traceback.
"""

from __future__ import annotations

import collections
import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, TypeVar

import aiohttp

T = TypeVar("T")

#: What discord.py raises when an answer does not fit its models (or is not the JSON it claims to be).
PARSE_ERRORS: tuple[type[Exception], ...] = (KeyError, TypeError, ValueError, AttributeError, IndexError)
#: Bytes of each answer kept: a message with its embeds, never a long message history.
KEPT_BYTES = 64 * 1024
#: Characters of an answer quoted in a line.
EXCERPT_CHARS = 160


@dataclass
class Answer:
    """One REST answer the client read: its request, its status and the start of its body."""

    number: int
    method: str
    url: str
    status: int
    body: bytes = b""

    @property
    def accepted(self) -> bool:
        """A success status: Discord took the call (a message was posted), whatever the body says."""
        return 200 <= self.status < 300

    @property
    def cut(self) -> bool:
        """Whether only the start of the body was kept."""
        return len(self.body) >= KEPT_BYTES

    def json(self) -> Any:
        """The body as JSON, or None when it is not (or was cut)."""
        try:
            return json.loads(self.body)
        except ValueError:
            return None


class Answers:
    """The last ``keep`` REST answers of one client, numbered as they come in."""

    def __init__(self, keep: int = 16) -> None:
        self._kept: collections.deque[Answer] = collections.deque(maxlen=keep)
        self._count = 0

    def trace(self) -> aiohttp.TraceConfig:
        """The hook to give discord.py's client (``http_trace``): every answer's status, then its body as read."""
        config = aiohttp.TraceConfig()
        config.on_request_end.append(self._ended)
        config.on_response_chunk_received.append(self._read)
        return config

    @property
    def mark(self) -> int:
        """How many answers came in so far: :meth:`since` a mark are the answers to calls made after it."""
        return self._count

    def since(self, mark: int, where: str = "") -> Answer | None:
        """The latest answer that came in after ``mark`` to a URL containing ``where``, if any."""
        for answer in reversed(self._kept):
            if answer.number <= mark:
                return None
            if where in answer.url:
                return answer
        return None

    async def _ended(
        self, _session: aiohttp.ClientSession, _context: SimpleNamespace, params: aiohttp.TraceRequestEndParams
    ) -> None:
        self._count += 1
        self._kept.append(Answer(self._count, params.method, str(params.url), params.response.status))

    async def _read(
        self,
        _session: aiohttp.ClientSession,
        _context: SimpleNamespace,
        params: aiohttp.TraceResponseChunkReceivedParams,
    ) -> None:
        for answer in reversed(self._kept):
            if answer.method == params.method and answer.url == str(params.url) and not answer.body:
                answer.body = bytes(params.chunk[:KEPT_BYTES])
                return


def _what_failed(error: Exception, answer: Answer) -> str:
    if answer.json() is None and not answer.cut:
        return "not JSON"
    if isinstance(error, KeyError):
        return f"no {error.args[0]!r} in it" if error.args else "a field missing"
    return f"{type(error).__name__}: {error}"


def _excerpt(body: bytes, token: str) -> str:
    text = re.sub(r"\s+", " ", body.decode("utf-8", errors="replace")).strip()
    if token:
        text = text.replace(token, "<token>")
    text = text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 1] + "…"
    return text or "an empty answer"


class UnreadableDiscordAnswer(Exception):
    """Discord answered a call with what discord.py cannot read. ``accepted``: the call took effect (a success
    status). ``str()`` is one line: the setting, then :attr:`sentence`."""

    setting = "platforms.discord"

    def __init__(self, answer: Answer, error: Exception, *, base: str, token: str) -> None:
        path = answer.url[len(base) :] if answer.url.startswith(base) else answer.url
        self.answer = answer
        self.accepted = answer.accepted
        #: What happened, in one sentence without the setting; the token never appears in it.
        self.sentence = (
            f"the Discord API at {base} answered {answer.method} {path} (HTTP {answer.status}) with "
            f"something foldgate cannot read ({_what_failed(error, answer)}; it sent "
            f"{_excerpt(answer.body, token)})"
        )
        super().__init__(self.sentence)

    def __str__(self) -> str:
        return f"{self.setting}: {self.sentence}"

    #: What the operator can do about it (Discord's address is not a setting: the answer came from Discord
    #: or from something in between).
    fix = (
        "check for a proxy between this machine and Discord that changes answers, or update foldgate (its "
        "discord.py may not know this answer's shape)"
    )

    @property
    def message_id(self) -> str:
        """The id of the message the answer is about, when it still shows one; "" when not."""
        data = self.answer.json()
        value = data.get("id") if isinstance(data, dict) else None
        return str(value) if isinstance(value, (str, int)) and str(value).isdigit() else ""


def accepted(log: logging.Logger, error: UnreadableDiscordAnswer, what: str) -> bool:
    """Whether the call ``what`` took effect although its answer cannot be read (then one line says so, and the
    caller goes on without what the answer would have told); False when it may not have, for the caller to raise."""
    if error.accepted:
        log.warning("discord: %s; %s went through all the same, so it is not made again", error, what)
    return error.accepted


@dataclass(frozen=True)
class Reader:
    """One client's calls read through :func:`reading`: its answers, its token (never shown), its API base."""

    answers: Answers
    token: str
    base: Callable[[], str]

    async def read(self, call: Callable[[], Awaitable[T]], *, where: str = "") -> T:
        return await reading(self.answers, call, base=self.base(), token=self.token, where=where)


async def reading(answers: Answers, call: Callable[[], Awaitable[T]], *, base: str, token: str, where: str = "") -> T:
    """``call()``, whose failure to read an answer that came in meanwhile (to a URL containing ``where``: other
    calls may run at the same time) is :class:`UnreadableDiscordAnswer`."""
    mark = answers.mark
    try:
        return await call()
    except PARSE_ERRORS as error:
        answer = answers.since(mark, where)
        if answer is None or isinstance(error, aiohttp.ClientError):
            raise  # no answer behind it (aiohttp's InvalidURL is a ValueError too): not an answer's doing
        raise UnreadableDiscordAnswer(answer, error, base=base, token=token) from error
