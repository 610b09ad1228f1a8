"""Replies in a Telegram chat: drafts while a private reply streams, edited previews elsewhere, final messages.

Every final chunk delivered is recorded in the reply's journal, so an attempt after a crash
sends only the rest. Sent as plain text (no parse mode), so nothing a user or the model
writes can break the formatting.
"""

from __future__ import annotations

import contextlib
import secrets
from typing import Optional, Protocol

from aiogram import Bot
from aiogram.exceptions import TelegramBadRequest, TelegramRetryAfter

from gateway.platforms.base import Journal, PlatformRateLimited, SendGate
from gateway.platforms.split import split_message

#: Longest message Telegram accepts, in UTF-16 code units.
TELEGRAM_MESSAGE_LIMIT = 4096


class BotHolder(Protocol):
    """What a reply needs of the adapter: its bot, its preview pace, and its typing indicator."""

    bot: Bot
    preview_interval: float

    def stop_typing(self, chat_id: str) -> None: ...


def chat_ref(chat_id: str) -> int | str:
    """Telegram chat ids are integers; ``@channelname`` stays a string."""
    try:
        return int(chat_id)
    except ValueError:
        return chat_id


class DraftReply:
    """A reply in a private chat: drafts while it streams, then the final text as real messages.

    A draft is Telegram's ephemeral preview (``sendMessageDraft``); the final ``sendMessage``
    replaces it. Past 4096 units the draft shows the part still being written. Each final chunk
    delivered is recorded in the journal, so an attempt after a crash sends only the rest.
    """

    def __init__(self, adapter: BotHolder, chat_id: str, gate: SendGate, journal: Optional[Journal]) -> None:
        self.adapter = adapter
        self.chat_id = chat_id
        self.gate = gate
        self.journal = journal
        self.interval = adapter.preview_interval
        self.draft_id = secrets.randbelow(2**31 - 1) + 1  # any non-zero id; one per reply
        #: Final chunks already sent: a retried finish sends only the rest.
        self.posted = 0

    async def preview(self, text: str) -> bool:
        if not await self.gate.allow_preview():
            return False
        tail = split_message(text, TELEGRAM_MESSAGE_LIMIT, units="utf16")[-1]
        try:
            await self.adapter.bot.send_message_draft(chat_id=chat_ref(self.chat_id), draft_id=self.draft_id,
                                                      text=tail, parse_mode=None)
        except TelegramRetryAfter as error:
            await self.gate.rate_limited(error.retry_after)
            return False
        return True

    async def finish(self, text: str) -> None:
        messenger = TelegramMessenger(self.adapter, self.chat_id)
        chunks = split_message(text, TELEGRAM_MESSAGE_LIMIT, units="utf16")
        if self.journal is not None and not self.posted:  # an attempt before a crash may have delivered some
            self.posted = int((await self.journal.load()).get("finals", 0))
        while self.posted < len(chunks):
            await self.gate.await_final()
            try:
                await messenger.post(chunks[self.posted])
            except PlatformRateLimited as limited:
                await self.gate.rate_limited(limited.retry_after)
                continue
            self.posted += 1
            if self.journal is not None:
                await self.journal.record({"finals": str(self.posted)})


class TelegramMessenger:
    """One Telegram chat's message primitives for :class:`gateway.delivery.edited.EditedReply`."""

    def __init__(self, adapter: BotHolder, chat_id: str) -> None:
        self.adapter = adapter
        self.chat_id = chat_id

    async def post(self, text: str, *, index: int = 0) -> str:
        self.adapter.stop_typing(self.chat_id)
        try:
            message = await self.adapter.bot.send_message(chat_ref(self.chat_id), text, parse_mode=None)
        except TelegramRetryAfter as error:
            raise PlatformRateLimited(error.retry_after, f"sendMessage to {self.chat_id}") from error
        return str(message.message_id)

    async def edit(self, message_id: str, text: str) -> None:
        try:
            await self.adapter.bot.edit_message_text(text=text, chat_id=chat_ref(self.chat_id),
                                                     message_id=int(message_id), parse_mode=None)
        except TelegramRetryAfter as error:
            raise PlatformRateLimited(error.retry_after, f"editMessageText in {self.chat_id}") from error
        except TelegramBadRequest as error:
            if "message is not modified" not in error.message:
                raise

    async def delete(self, message_id: str) -> None:
        with contextlib.suppress(TelegramBadRequest):
            await self.adapter.bot.delete_message(chat_id=chat_ref(self.chat_id), message_id=int(message_id))
