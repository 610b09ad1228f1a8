"""One request's turn: the message handed to the gateway's intake, and what its reply's events say.

The listener is opened before the message is handed in, so a quick reply is not missed. Events of other
messages of the same session (another request's reply) are passed over: each names the message it answers.
What the turn sends besides its reply is read here: the notice that the person sends too fast, or that their
budget is spent, becomes 429, the one that the provider is away 503 (the message stays in the session and is
answered when it is back); any other (a chat command's answer) is the reply. A turn that ends with nothing
sent (a budget refusal told once already) is seen by its message leaving the session's inbox.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import RedisError

from agent import json_codec
from gateway.api.adapter import chat_key
from gateway.api.errors import ApiError, invalid, not_stored, provider_away, too_fast
from gateway.platforms.base import UNSTORABLE, IncomingMessage, Intake
from gateway.store.inbox import Inbox
from gateway.store.live import LiveHub
from gateway.worker.turn import RATE_NOTICE

#: How a provider-away notice ends (``gateway.outage.waiting_notice``): the message waits for it to come back.
WAITING_TAIL = "will be answered as soon as the provider is back."
#: How a budget's refusal reads (``gateway.access.budgets.over_budget``): its start and a phrase within.
BUDGET_MARK = ("⛔ ", " budget is used up (")
#: Seconds a client over its budget is asked to wait (the refusal's text says when the budget resets).
BUDGET_RETRY_SECONDS = 3600.0
#: Seconds a client is asked to wait after a rate refusal (the limit is per minute) and during an outage.
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
        "The message is kept in the session but was not answered: this key's budget is spent (it was told so"
        " once), or the message was answered together with a later one of this session.",
        type="insufficient_quota",
        code="not_answered",
        retry_after=RATE_RETRY_SECONDS,
    )


def read_event(event: dict[str, Any]) -> ReplyEvent:
    """What one of the session's events means for the request; raises the refusal a notice stands for."""
    text = str(event.get("text") or "")
    kind = event.get("type")
    if kind == "preview":
        return ReplyEvent(False, text)
    if not text.strip():  # the turn ended and said nothing (a budget refusal it told this session already)
        raise unanswered()
    if text == RATE_NOTICE:  # sent as the turn's reply or as a notice: the message is kept, not answered
        raise too_fast(RATE_RETRY_SECONDS)
    if kind == "notice" and text.endswith(WAITING_TAIL):
        raise provider_away(OUTAGE_RETRY_SECONDS)
    if text.startswith(BUDGET_MARK[0]) and BUDGET_MARK[1] in text:  # the notice says what was spent, and until when
        raise ApiError(429, text, type="insufficient_quota", code="budget_exceeded", retry_after=BUDGET_RETRY_SECONDS)
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


async def still_waiting(inbox: Inbox, message: IncomingMessage) -> bool:
    """Whether the message's entry is still in its chat's inbox (waiting, or its turn running): a turn removes it
    only once its reply went out. Redis not answering counts as waiting."""
    try:
        entries = await inbox.waiting(message.chat, WAITING_LOOKED_AT)
    except (RedisError, OSError):
        return True
    return any(_update_id(raw) == message.update_id for raw in entries)


def _update_id(raw: str) -> object:
    try:
        entry = json_codec.loads(raw)
    except ValueError:
        return None
    return entry.get("update_id") if isinstance(entry, dict) else None


@dataclass
class Waiter:
    """Waits for the events answering one message, and sees when none will come: its turn ended without a
    reply (the budget spent and the person told already, or the message answered together with a later one).
    """

    queue: asyncio.Queue[dict[str, Any]]
    inbox: Inbox
    message: IncomingMessage

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
                waiting = await still_waiting(self.inbox, self.message)
                gone_for = 0.0 if waiting else gone_for + CHECK_SECONDS
                if gone_for > GONE_GRACE_SECONDS:  # its reply, had there been one, would have come by now
                    raise unanswered() from None
                continue
            if event.get("reply_to") in (self.message.update_id, None):
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
        elif kind == "refused":
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
    hub: LiveHub, intake: Intake, inbox: Inbox, message: IncomingMessage, on_reply: OnReply | None = None
) -> AsyncIterator[Listen]:
    """The message handed in (listening first, so a quick reply is not missed), and a function returning the
    next event that answers it; ``on_reply`` is told the reply (:class:`Telling`)."""
    async with hub.listen(chat_key(message.chat_id)) as queue:
        await hand_in(intake, message)
        next_event = Waiter(queue, inbox, message).next_event
        yield next_event if on_reply is None else Telling(next_event, on_reply)


async def events(next_event: Listen) -> AsyncIterator[ReplyEvent]:
    """The reply's previews and then its final text (the last event)."""
    while True:
        event = read_event(await next_event())
        yield event
        if event.final:
            return
