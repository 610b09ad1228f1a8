"""Approvals: a tool call waiting for a person's yes or no, seen by every process at once.

The turn that wants to run a tool whose policy is ``ask`` opens an approval and waits for its answer;
the answer comes as a button press (or ``/approve <id>``) to whichever process receives it, which
records it here. One small hash per approval, beside the chat's other keys::

    {prefix}:{<chat>}:approval:<id>   hash  asker -> the user id that may answer ("" = anyone in the chat),
                                             about -> the update id of the message whose turn asks,
                                             answer -> "yes" or "no", by -> who answered (user id),
                                             by_name -> their name

The answer is recorded with HSETNX, so the first one stands; the waiting turn reads it (a few reads a
second: the pipelined connection the store uses cannot block). The hash expires an hour after it was
opened, answered or not.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from gateway.store.channel import RedisChannel
from gateway.store.keys import ChatKeys, check_key_part, text_of

#: How long an approval is kept, answered or not.
APPROVAL_TTL_SECONDS = 3600
#: Seconds between two looks for the answer.
POLL_SECONDS = 0.25

#: What became of an answer: recorded, from someone who may not answer, for no open approval, or too late.
Answered = Literal["recorded", "not yours", "unknown", "already answered"]


@dataclass(frozen=True)
class Answer:
    """A person's answer to an approval."""

    approved: bool
    user_id: str
    user_name: str


class Approvals:
    """Every chat's open approvals."""

    def __init__(self, channel: RedisChannel, prefix: str) -> None:
        self.channel = channel
        self.prefix = check_key_part("prefix", prefix)

    def key(self, chat: str, approval_id: str) -> str:
        return ChatKeys(self.prefix, check_key_part("chat", chat)).approval(check_key_part("approval id", approval_id))

    async def open(self, chat: str, *, asker: str, about: str = "") -> str:
        """A new approval in ``chat`` that ``asker`` may answer (``""``: anyone there), asked by the turn that
        answers message ``about`` (its update id); its id."""
        approval_id = secrets.token_hex(4)
        key = self.key(chat, approval_id)
        opened = ("HSET", key, "asker", asker, "about", about, "opened", int(time.time()))
        await self.channel.call_in_order(opened, ("EXPIRE", key, APPROVAL_TTL_SECONDS))
        return approval_id

    async def about(self, chat: str, approval_id: str) -> str | None:
        """The update id of the message whose turn asked approval ``approval_id``; None when no such approval is
        open (or it did not say): an API request answering the question waits for that turn's reply."""
        try:
            key = self.key(chat, approval_id)
        except ValueError:  # not an id at all
            return None
        found = await self.channel.call("HGET", key, "about")
        return text_of(found) or None if found is not None else None

    async def answer(
        self, chat: str, approval_id: str, *, approved: bool, user_id: str, user_name: str, admin: bool = False
    ) -> Answered:
        """Record ``user_id``'s answer, if they may give it (the person asked, or an ``admin``) and none was given
        before."""
        key = self.key(chat, approval_id)
        asker = await self.channel.call("HGET", key, "asker")
        if asker is None:
            return "unknown"
        asker = text_of(asker)
        if asker and asker != user_id and not admin:
            return "not yours"
        if not await self.channel.call("HSETNX", key, "answer", "yes" if approved else "no"):
            return "already answered"
        await self.channel.call("HSET", key, "by", user_id, "by_name", user_name)
        return "recorded"

    async def wait(
        self,
        chat: str,
        approval_id: str,
        timeout: float,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> Answer | None:
        """The answer once it is given; None when ``timeout`` seconds pass without one (which closes it: an answer
        after that is "already answered")."""
        key = self.key(chat, approval_id)
        deadline = clock() + timeout
        while True:
            found = await self._read(key)
            if found is not None:
                return found
            if clock() >= deadline:
                if await self.channel.call("HSETNX", key, "answer", "timeout"):
                    return None
                continue  # answered in the last moment: that answer stands
            await sleep(POLL_SECONDS)

    async def _read(self, key: str) -> Answer | None:
        raw = await self.channel.call("HMGET", key, "answer", "by", "by_name")
        answer, by, by_name = (None if value is None else text_of(value) for value in raw)
        if answer not in ("yes", "no") or by is None:
            return None
        return Answer(answer == "yes", by, by_name or "")
