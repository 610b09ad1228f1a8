"""One request's turn: the message handed to the gateway's intake, and what its reply's events say.

The listener is opened before the message is handed in, so a quick reply is not missed. Events of other
messages of the same session (another request's reply) are passed over: each names the message it answers.
What the turn sends besides its reply is read here. A message kept unanswered is told by kind ahead of its notice
(a ``refusal`` event, :meth:`gateway.api.adapter.ApiAdapter.turn_refused`), never recognised by the notice's
words: a sender too fast or a budget used up is 429, the provider away 503 (the message stays in the session and
is answered when it is back). Any other notice (a chat command's answer) is the reply. A turn that ends with
nothing sent (a budget refusal told once already) is seen by its message leaving the session's inbox.

A tool's question (policy ``ask``) is a notice like any other, so it is the request's answer; the request that
answers it (``/approve <id>``) is answered by the rest of the reply of the turn that asked.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import RedisError

from agent import json_codec
from gateway.api.adapter import chat_key
from gateway.api.errors import ApiError, invalid, not_stored, provider_away, too_fast
from gateway.commands.syntax import ANSWERS
from gateway.commands.syntax import parse as parse_command
from gateway.platforms.base import UNSTORABLE, IncomingMessage, Intake
from gateway.store.approvals import Approvals
from gateway.store.inbox import Inbox
from gateway.store.live import LiveHub

#: Seconds a client over its budget is asked to wait when the refusal does not say when the budget resets.
BUDGET_RETRY_SECONDS = 3600.0
#: Seconds a client is asked to wait after a rate refusal (the limit is per minute) and during an outage (unless
#: the provider asked for its own wait).
RATE_RETRY_SECONDS = 60.0
OUTAGE_RETRY_SECONDS = 30.0
#: Longest a request waits for its reply; the message is kept and answered in the session all the same.
REPLY_WAIT_SECONDS = 600.0
STORE_RETRY_SECONDS = 2.0
#: Seconds between looks at whether a message still waits when no event comes, and how long after it is gone a
#: request gives up on a reply (the final event is published before the entry is removed).
CHECK_SECONDS = 1.0
GONE_GRACE_SECONDS = 1.5
#: Entries of a session's inbox looked at for the message (an API session's inbox is short).
WAITING_LOOKED_AT = 100


@dataclass(frozen=True)
class ReplyEvent:
    """A preview (the whole text so far) or the final text of the reply a request waits for."""

    final: bool
    text: str


def unanswered() -> ApiError:
    return ApiError(
        429,
        "The message is kept in the session but was not answered: this key's budget is spent (it was told so once).",
        type="insufficient_quota",
        code="not_answered",
        retry_after=RATE_RETRY_SECONDS,
    )


def refusal_error(event: dict[str, Any]) -> ApiError:
    """The answer a ``refusal`` event's kind stands for, with its ``Retry-After``: what the refusal says, else a
    default for the kind."""
    kind, text = event.get("kind"), str(event.get("text") or "")
    retry_after = _seconds(event.get("retry_after"))
    if kind == "provider_away":
        return provider_away(retry_after or OUTAGE_RETRY_SECONDS)
    if kind == "rate_limited":
        return too_fast(retry_after or RATE_RETRY_SECONDS)
    if kind == "over_budget":
        resets_at = _seconds(event.get("resets_at"))
        wait = max(1.0, resets_at - time.time()) if resets_at else retry_after or BUDGET_RETRY_SECONDS
        message = text or "This key's budget is used up; the message is kept in the session."
        return ApiError(429, message, type="insufficient_quota", code="budget_exceeded", retry_after=wait)
    return unanswered()  # a kind this process does not know: the message is kept, not answered


def _seconds(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and value > 0 else None


def read_event(event: dict[str, Any]) -> ReplyEvent:
    """What one of the session's events means for the request; raises the refusal a ``refusal`` event stands for,
    and :func:`unanswered` for a turn that ended saying nothing."""
    text = str(event.get("text") or "")
    kind = event.get("type")
    if kind == "refusal":
        raise refusal_error(event)
    if kind == "preview":
        return ReplyEvent(False, text)
    if not text.strip():  # the turn ended and said nothing (a budget refusal it told this session already)
        raise unanswered()
    return ReplyEvent(True, text)


async def hand_in(intake: Intake, message: IncomingMessage) -> None:
    """Give the message to the intake; a store that does not answer is 503 (nothing was taken in)."""
    try:
        await intake(message)
    except UNSTORABLE:
        raise invalid("messages", "The message cannot be stored.") from None
    except (RedisError, OSError) as error:
        raise not_stored(STORE_RETRY_SECONDS) from error


Listen = Callable[[], Awaitable[dict[str, Any]]]


async def still_waiting(inbox: Inbox, chat: str, update_ids: Collection[str]) -> bool:
    """Whether one of the messages' entries is still in chat ``chat``'s inbox (waiting, or its turn running): a
    turn removes it only once its reply went out. Redis not answering counts as waiting."""
    try:
        entries = await inbox.waiting(chat, WAITING_LOOKED_AT)
    except (RedisError, OSError):
        return True
    return any(_update_id(raw) in update_ids for raw in entries)


async def answered_turn(approvals: Approvals | None, message: IncomingMessage) -> str | None:
    """The update id of the message whose turn waits for the answer this message gives (``/approve <id>`` or
    ``/refuse <id>`` to a question a tool's ``ask`` policy put), else None: that turn's reply, when it goes on,
    is the answer to this request, as the question was the answer to the one before."""
    command = parse_command(message.text.strip())
    if approvals is None or command is None or command[0] not in ANSWERS or not command[1]:
        return None
    try:
        return await approvals.about(message.chat, command[1].split()[0])
    except (RedisError, OSError):
        return None  # the answer is still taken in (or refused) by the intake; this request hears its own reply


def _update_id(raw: str) -> object:
    try:
        entry = json_codec.loads(raw)
    except ValueError:
        return None
    return entry.get("update_id") if isinstance(entry, dict) else None


@dataclass
class Waiter:
    """Waits for the events answering one message, and sees when none will come: its turn ended without a
    reply (the budget spent and the person told already).
    """

    queue: asyncio.Queue[dict[str, Any]]
    inbox: Inbox
    message: IncomingMessage
    #: The update id of an earlier message whose reply also answers this one (:func:`answered_turn`).
    answering: str | None = None

    @property
    def answered(self) -> frozenset[str]:
        """The update ids whose events answer the request."""
        return frozenset(i for i in (self.message.update_id, self.answering) if i)

    async def next_event(self) -> dict[str, Any]:
        """The next event answering the message; :class:`ApiError` when none will come or none came in time."""
        try:
            async with asyncio.timeout(REPLY_WAIT_SECONDS):
                return await self._next()
        except TimeoutError:
            raise ApiError(
                504,
                "No answer came in time; the message is kept in the session and answered there.",
                type="server_error",
                code="timeout",
            ) from None

    async def _next(self) -> dict[str, Any]:
        gone_for = 0.0
        while True:
            try:
                async with asyncio.timeout(CHECK_SECONDS):
                    event = await self.queue.get()
            except TimeoutError:
                waiting = await still_waiting(self.inbox, self.message.chat, self.answered)
                gone_for = 0.0 if waiting else gone_for + CHECK_SECONDS
                if gone_for > GONE_GRACE_SECONDS:  # its reply, had there been one, would have come by now
                    raise unanswered() from None
                continue
            reply_to = event.get("reply_to")
            if reply_to is None or reply_to in self.answered:
                return event


#: Told the reply a request got, as the assistant message its client will resend, before the client has it.
OnReply = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass
class Telling:
    """``next_event`` that tells ``on_reply`` the reply (its final text and the calls of the client's tools it
    ends with) before it returns the reply's last event: what is done with the reply is done before the client
    has it and can send its next request. A refusal is no reply, and neither are the client's refused tools."""

    next_event: Listen
    on_reply: OnReply
    calls: list[dict[str, Any]] = field(default_factory=list)
    refused: bool = False

    async def __call__(self) -> dict[str, Any]:
        event = await self.next_event()
        kind = event.get("type")
        if kind == "tool_calls":
            self.calls = [dict(call) for call in event.get("calls") or ()]
        elif kind in ("refused", "refusal"):  # the request's answer is an error: the session records no reply
            self.refused = True
        elif kind != "preview" and not self.refused:
            reply = self._reply(event)
            if reply is not None:
                await self.on_reply(reply)
        return event

    def _reply(self, event: dict[str, Any]) -> dict[str, Any] | None:
        text = str(event.get("text") or "")
        if not self.calls:
            try:
                text = read_event(event).text
            except ApiError:
                return None
            return {"role": "assistant", "content": text}
        return {"role": "assistant", "content": text or None, "tool_calls": self.calls}


@contextlib.asynccontextmanager
async def asked(
    hub: LiveHub,
    intake: Intake,
    inbox: Inbox,
    message: IncomingMessage,
    on_reply: OnReply | None = None,
    *,
    approvals: Approvals | None = None,
) -> AsyncIterator[Listen]:
    """The message handed in (listening first, so a quick reply is not missed), and a function returning the
    next event that answers it (or, for an answer to a tool's question, the reply of the turn that asked);
    ``on_reply`` is told the reply (:class:`Telling`)."""
    answering = await answered_turn(approvals, message)
    async with hub.listen(chat_key(message.chat_id)) as queue:
        await hand_in(intake, message)
        next_event = Waiter(queue, inbox, message, answering).next_event
        yield next_event if on_reply is None else Telling(next_event, on_reply)


async def events(next_event: Listen) -> AsyncIterator[ReplyEvent]:
    """The reply's previews and then its final text (the last event)."""
    while True:
        event = read_event(await next_event())
        yield event
        if event.final:
            return
