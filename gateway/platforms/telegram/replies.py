"""Replies in a Telegram chat: drafts while a private reply streams, edited previews elsewhere, final messages.

Every final chunk delivered is recorded in the reply's journal, so an attempt after a crash
sends only the rest. Sent as plain text (no parse mode), so nothing a user or the model
writes can break the formatting.

A group upgraded to a supergroup keeps its messages under the old chat id, and a supergroup
numbers its messages afresh, so a message is always edited in the chat it was posted in: its
key names that chat when it is not the reply's own (``"<chat id>:<message id>"``). A message
left in the old group can no longer be edited; its next text is posted in the supergroup.

A send or an edit whose answer foldgate cannot read but which said ``ok`` took effect (see
:mod:`.calls`): it is not made again. A message sent so keeps the id its answer still shows; when
even that cannot be read, its key is empty, and the next text of that message is posted anew
(as for a message deleted meanwhile), since there is nothing to edit.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import secrets
from typing import Protocol

from aiogram import Bot
from aiogram.exceptions import (
    TelegramAPIError,
    TelegramBadRequest,
    TelegramMigrateToChat,
    TelegramNotFound,
    TelegramRetryAfter,
)
from aiogram.types import Message

from gateway.platforms.base import Journal, PlatformRateLimited, SendGate
from gateway.platforms.retry import SendRetry, budget_pause
from gateway.platforms.split import split_message
from gateway.platforms.telegram.answers import DEFAULT_API_SERVER, UnreadableAnswer, api_setting
from gateway.platforms.telegram.calls import accepted, once
from gateway.platforms.telegram.moves import ChatMoves, chat_ref

log = logging.getLogger("gateway.platforms.telegram")  # the adapter's log: one logger to filter for Telegram

#: Longest message Telegram accepts, in UTF-16 code units.
TELEGRAM_MESSAGE_LIMIT = 4096


class TelegramChats(Protocol):
    """What a reply needs of the adapter: its bot and Bot API server, its preview pace, whether that server takes
    drafts, its retry policy for final sends, where a group that became a supergroup went, and its typing
    indicator (which a sent message ends)."""

    bot: Bot
    api_server: str | None
    preview_interval: float
    drafts: bool
    retry: SendRetry
    moves: ChatMoves

    def stop_typing(self, chat_id: str) -> None: ...


class DraftReply:
    """A reply in a private chat: drafts while it streams, then the final text as real messages.

    A draft is Telegram's ephemeral preview (``sendMessageDraft``); the final ``sendMessage``
    replaces it. Past 4096 units the draft shows the part still being written. Each final chunk
    delivered is recorded in the journal, so an attempt after a crash sends only the rest. A Bot API
    server without the method (an emulator) is asked once: from then on replies in private chats
    arrive whole, and one line said why.
    """

    def __init__(self, adapter: TelegramChats, chat_id: str, gate: SendGate, journal: Journal | None) -> None:
        self.adapter = adapter
        self.chat_id = chat_id
        self.gate = gate
        self.journal = journal
        self.interval = adapter.preview_interval
        self.draft_id = secrets.randbelow(2**31 - 1) + 1  # any non-zero id; one per reply
        #: Final chunks already sent: a retried finish sends only the rest.
        self.posted = 0

    async def preview(self, text: str) -> bool:
        if not self.adapter.drafts:
            return True  # nothing to show it with: the stream waits for the final text
        if not await self.gate.allow_preview():
            return False
        tail = split_message(text, TELEGRAM_MESSAGE_LIMIT, units="utf16")[-1]
        try:
            await self.adapter.bot.send_message_draft(
                chat_id=chat_ref(self.chat_id), draft_id=self.draft_id, text=tail, parse_mode=None
            )
        except TelegramRetryAfter as error:
            await self.gate.rate_limited(error.retry_after)
            return False
        except UnreadableAnswer as error:
            if not accepted(log, error, f"sendMessageDraft to {self.chat_id}"):
                raise
        except (TelegramNotFound, TelegramBadRequest) as error:
            if not lacks_method(error):
                raise
            self._no_drafts(error)
        return True

    def _no_drafts(self, error: TelegramAPIError) -> None:
        """The server has no sendMessageDraft: said once, and not asked again."""
        if self.adapter.drafts:
            self.adapter.drafts = False
            where = self.adapter.api_server or DEFAULT_API_SERVER
            log.warning(
                "telegram: %s: the Bot API at %s has no sendMessageDraft (%s); replies in private chats "
                "arrive whole, without a preview while they are written",
                api_setting(self.adapter.api_server),
                where,
                error.message,
            )

    async def finish(self, text: str) -> None:
        messenger = TelegramMessenger(self.adapter, self.chat_id)
        chunks = split_message(text, TELEGRAM_MESSAGE_LIMIT, units="utf16")
        if self.journal is not None and not self.posted:  # an attempt before a crash may have delivered some
            self.posted = int((await self.journal.load()).get("finals", 0))
        pause = budget_pause(self.gate)
        while self.posted < len(chunks):
            await self.gate.await_final()
            # retries=0: a transient failure goes back to the delivery's attempts, which enter through the budget again
            await self.adapter.retry.run(
                functools.partial(messenger.post, chunks[self.posted]),
                f"telegram: sendMessage to {self.chat_id}",
                pause=pause,
                retries=0,
            )
            self.posted += 1
            if self.journal is not None:
                await self.journal.record({"finals": str(self.posted)})


def lacks_method(error: TelegramAPIError) -> bool:
    """Whether the Bot API refused a call because it does not have the method (a 404 is only ever that,
    for a bot whose token it took)."""
    return isinstance(error, TelegramNotFound) or "method not found" in (error.message or "").lower()


class TelegramMessenger:
    """One Telegram chat's message primitives for :class:`gateway.delivery.edited.EditedReply`."""

    def __init__(self, adapter: TelegramChats, chat_id: str) -> None:
        self.adapter = adapter
        self.chat_id = chat_id
        #: Key of a message left in an upgraded group -> key of the one that carries its text on.
        self._reposted: dict[str, str] = {}

    async def post(self, text: str, *, index: int = 0) -> str:
        """Send ``text`` as a new message (one attempt; a 429 raised as :class:`PlatformRateLimited`); its key."""
        self.adapter.stop_typing(self.chat_id)
        try:
            message = await self.adapter.moves.in_chat(self.chat_id, functools.partial(self._send, text))
        except UnreadableAnswer as error:
            if not accepted(log, error, f"sendMessage to {self.chat_id}"):
                raise
            return self._unread_key(error)
        return self._key(message)

    async def _send(self, text: str, target: int | str) -> Message:
        return await once(
            functools.partial(self.adapter.bot.send_message, target, text, parse_mode=None),
            f"sendMessage to {self.chat_id}",
        )

    async def edit(self, message_id: str, text: str) -> None:
        key = self._reposted.get(message_id, message_id)
        if not key:  # sent, but its id could not be read: nothing to edit
            self._reposted[message_id] = await self.post(text)
            return
        chat, number = self._locate(key)
        if self.adapter.moves.target(chat) == chat_ref(chat):  # the chat takes edits (as far as is known)
            try:
                await self.adapter.bot.edit_message_text(
                    text=text, chat_id=chat_ref(chat), message_id=number, parse_mode=None
                )
                return
            except UnreadableAnswer as error:
                if not accepted(log, error, f"editMessageText in {self.chat_id}"):
                    raise
                return
            except TelegramRetryAfter as error:
                raise PlatformRateLimited(error.retry_after, f"editMessageText in {self.chat_id}") from error
            except TelegramMigrateToChat as moved:
                self.adapter.moves.moved(chat, moved.migrate_to_chat_id)
            except TelegramBadRequest as error:
                if "message is not modified" in error.message:
                    return
                if "message to edit not found" not in error.message:
                    raise
        # its old group is read-only now, or the message is gone (deleted by a person or taken down)
        self._reposted[message_id] = await self.post(text)

    async def delete(self, message_id: str) -> None:
        key = self._reposted.pop(message_id, message_id)
        if not key:  # its id could not be read: it stays
            return
        chat, number = self._locate(key)
        # gone, left in an upgraded group, or deleted with an answer that cannot be read
        with contextlib.suppress(TelegramBadRequest, TelegramMigrateToChat, UnreadableAnswer):
            await self.adapter.bot.delete_message(chat_id=chat_ref(chat), message_id=number)

    def _key(self, message: Message) -> str:
        """The message's key: its id in the reply's chat, ``"<chat id>:<id>"`` in the supergroup it moved to."""
        chat = str(message.chat.id)
        return str(message.message_id) if chat == self.chat_id else f"{chat}:{message.message_id}"

    def _unread_key(self, error: UnreadableAnswer) -> str:
        """The key of a message sent with an answer that cannot be read as a whole: from the ids it still shows,
        or empty when its id is not among them."""
        number = error.result_number("message_id")
        if number is None:
            return ""
        chat = error.result_number("chat", "id")
        where = str(chat) if chat is not None else str(self.adapter.moves.target(self.chat_id))
        return str(number) if where == self.chat_id else f"{where}:{number}"

    def _locate(self, key: str) -> tuple[str, int]:
        """The chat a message key was posted in, and its id there."""
        chat, _, number = key.rpartition(":")
        return chat or self.chat_id, int(number)
