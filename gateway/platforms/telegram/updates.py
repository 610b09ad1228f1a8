"""Which Telegram updates the gateway records, and as what.

- Private chats: every text message, answered.
- Groups: a message addressed to the bot is answered — a ``/command`` (not one meant for
  another bot, ``/command@other_bot``), an ``@mention`` of the bot, or a reply to one of the
  bot's messages. Every other text message of the room is recorded without an answer
  (``respond=False``) as ``"<first name>: <text>"``, so the session knows what was said when
  someone next asks. Addressed messages are recorded the same way, minus a leading
  ``@mention`` of the bot; commands are kept verbatim so they run.
- Media with a caption is recorded as ``"[photo] <caption>"`` (the media itself is not);
  edits, media without a caption, service messages (joins, pins, ...) and channel posts are
  ignored. The two service messages of a group's upgrade to a supergroup (``migrate_to_chat_id``
  in the old group, ``migrate_from_chat_id`` in the new one) are not recorded either, but they
  teach the adapter where the group's replies go now (:func:`migration`).
- With ``allowed_user_ids`` / ``allowed_chat_ids`` set, messages from anyone else are ignored
  (not recorded) and logged at info.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Collection
from typing import Optional

from aiogram.types import Message, MessageEntity, Update, User

from gateway.platforms.base import IncomingMessage, valid_text

log = logging.getLogger("gateway.platforms.telegram")  # the adapter's log: one logger to filter for Telegram

#: Only new messages are asked for: edits, reactions, member changes are not conversation.
ALLOWED_UPDATES = ["message"]


def incoming_message(update: Update, me: Optional[User], *, platform: str, allowed_user_ids: Collection[int],
                     allowed_chat_ids: Collection[int]) -> Optional[IncomingMessage]:
    """The gateway's view of an update received by the bot ``me``, or None when it is not recorded."""
    message = update.message
    if message is None or message.chat.type == "channel":
        return None
    raw = message.text if message.text is not None else message.caption
    if not raw:
        return None
    raw = valid_text(raw)  # before the entity slices below, which encode it as UTF-16
    sender = message.from_user
    if not _allowed(sender, message.chat.id, allowed_user_ids, allowed_chat_ids):
        log.info("telegram: ignored a message from user %s in chat %s (not in the allowlists)",
                 sender.id if sender else "?", message.chat.id)
        return None
    media = "" if message.text is not None else f"[{_media_kind(message)}] "
    speaker = sender.first_name if sender else "someone"
    if message.chat.type == "private":
        text, respond = media + raw, True
    elif _is_command_for(me, message, raw):
        text, respond = media + raw, True
    elif _mentions(me, message, raw) or _replies_to(me, message):
        text, respond = f"{speaker}: {media}{_without_leading_mention(me, raw)}", True
    else:
        text, respond = f"{speaker}: {media}{raw}", False
    return IncomingMessage(
        platform=platform, chat_id=str(message.chat.id), user_id=str(sender.id) if sender else "",
        user_name=_display_name(sender), update_id=str(update.update_id), text=text, ts=message.date.timestamp(),
        respond=respond,
    )


def migration(update: Update) -> Optional[tuple[int, int]]:
    """``(old group id, supergroup id)`` when ``update`` is a service message of a group's upgrade, else None.

    Telegram sends two: ``migrate_to_chat_id`` in the old group and ``migrate_from_chat_id`` in the
    new supergroup. Either one tells where the group's replies go from now on.
    """
    message = update.message
    if message is None:
        return None
    if message.migrate_to_chat_id:
        return message.chat.id, message.migrate_to_chat_id
    if message.migrate_from_chat_id:
        return message.migrate_from_chat_id, message.chat.id
    return None


def _allowed(sender: Optional[User], chat_id: int, user_ids: Collection[int], chat_ids: Collection[int]) -> bool:
    if chat_ids and chat_id not in chat_ids:
        return False
    if user_ids and (sender is None or sender.id not in user_ids):
        return False
    return True


def _username(me: Optional[User]) -> str:
    return (me.username or "").lower() if me else ""


def _is_command_for(me: Optional[User], message: Message, raw: str) -> bool:
    """A /command at the start of the message, for every bot or for this one by name."""
    for entity in _entities(message):
        if entity.type == "bot_command" and entity.offset == 0:
            _, _, target = _utf16_slice(raw, entity.offset, entity.length).partition("@")
            return not target or target.lower() == _username(me)
    return False


def _mentions(me: Optional[User], message: Message, raw: str) -> bool:
    name = _username(me)
    for entity in _entities(message):
        if entity.type == "mention" and name and _utf16_slice(raw, entity.offset, entity.length).lower() == "@" + name:
            return True
        if entity.type == "text_mention" and entity.user and me and entity.user.id == me.id:
            return True
    return False


def _replies_to(me: Optional[User], message: Message) -> bool:
    replied = message.reply_to_message
    return bool(replied and replied.from_user and me and replied.from_user.id == me.id)


def _without_leading_mention(me: Optional[User], raw: str) -> str:
    handle = "@" + _username(me)
    if len(handle) > 1 and raw.lower().startswith(handle):
        rest = raw[len(handle):].lstrip(" \t\n,:;")
        if rest:
            return rest
    return raw


def _display_name(user: Optional[User]) -> str:
    if user is None:
        return "someone"
    return " ".join(part for part in (user.first_name, user.last_name) if part) or (user.username or str(user.id))


def _media_kind(message: Message) -> str:
    kind = message.content_type
    return kind.value if isinstance(kind, enum.Enum) else str(kind)


def _entities(message: Message) -> list[MessageEntity]:
    return list(message.entities or message.caption_entities or [])


def _utf16_slice(text: str, offset: int, length: int) -> str:
    """``text[offset:offset+length]`` in UTF-16 code units, as Telegram's entity offsets count."""
    encoded = text.encode("utf-16-le")
    return encoded[2 * offset: 2 * (offset + length)].decode("utf-16-le", errors="replace")
