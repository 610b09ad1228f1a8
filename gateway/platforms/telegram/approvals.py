"""A tool's question in a Telegram chat: asked with a yes and a no button, then edited to say what was decided.

The press itself comes back as an update (:func:`.updates.button_message`); this module only puts the question
in the chat and settles it there. Both calls go through the adapter's retry policy for final sends, following
a group that became a supergroup, and a call whose answer foldgate cannot read but which said ``ok`` is taken
as made (see :mod:`.calls`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable

from aiogram.types import InlineKeyboardButton, InlineKeyboardMarkup, Message

from gateway.platforms.base import ApprovalPrompt
from gateway.platforms.telegram.answers import UnreadableAnswer
from gateway.platforms.telegram.calls import accepted, once
from gateway.platforms.telegram.replies import TelegramChats
from gateway.platforms.telegram.updates import approval_data

log = logging.getLogger("gateway.platforms.telegram")  # the adapter's log: one logger to filter for Telegram

#: Waits out a 429 for the call named (a question has no send budget, as a reply sent whole has none).
WaitOut = Callable[[str, float], Awaitable[None]]


def approval_buttons(approval_id: str) -> InlineKeyboardMarkup:
    """The yes and the no button under a question; each press carries the approval and the answer."""
    return InlineKeyboardMarkup(
        inline_keyboard=[
            [
                InlineKeyboardButton(text="✅ Approve", callback_data=approval_data(approval_id, True)),
                InlineKeyboardButton(text="✖ Refuse", callback_data=approval_data(approval_id, False)),
            ]
        ]
    )


async def ask_with_buttons(chats: TelegramChats, chat_id: str, prompt: ApprovalPrompt, wait_out: WaitOut) -> str | None:
    """Post the question with its buttons; the message's id, to edit it once answered (None when the answer did
    not show it: the outcome then comes as a message of its own)."""
    buttons = approval_buttons(prompt.approval_id)
    what = f"sendMessage to {chat_id}"

    async def post(target: int | str) -> Message:
        return await once(
            functools.partial(chats.bot.send_message, target, prompt.question, parse_mode=None, reply_markup=buttons),
            what,
        )

    try:
        sent = await chats.retry.run(
            functools.partial(chats.moves.in_chat, chat_id, post),
            f"telegram: {what}",
            pause=functools.partial(wait_out, what),
        )
    except UnreadableAnswer as error:
        if not accepted(log, error, what):
            raise
        number = error.result_number("message_id")
        return None if number is None else str(number)
    return str(sent.message_id)


async def settle_question(
    chats: TelegramChats, chat_id: str, message_id: str, prompt: ApprovalPrompt, outcome: str, wait_out: WaitOut
) -> None:
    """Edit the question to say what was decided (``outcome``), its buttons gone."""
    what = f"editMessageText in {chat_id}"
    edit = functools.partial(
        chats.bot.edit_message_text,
        text=f"{prompt.question}\n→ {outcome}",
        chat_id=chats.moves.target(chat_id),
        message_id=int(message_id),
        parse_mode=None,
        reply_markup=None,
    )
    try:
        await chats.retry.run(
            functools.partial(once, edit, what), f"telegram: {what}", pause=functools.partial(wait_out, what)
        )
    except UnreadableAnswer as error:
        if not accepted(log, error, what):
            raise
