"""Which Telegram updates the gateway records, and as what.

- Private chats: every message with text or media, answered.
- Groups: a message addressed to the bot is answered — a ``/command`` (not one meant for
  another bot, ``/command@other_bot``), an ``@mention`` of the bot, or a reply to one of the
  bot's messages. Every other message of the room is recorded without an answer
  (``respond=False``) as ``"<first name>: <text>"``, so the session knows what was said when
  someone next asks. Addressed messages are recorded the same way, minus a leading
  ``@mention`` of the bot; commands are kept verbatim so they run.
- Photos, images and other files, voice messages, music and video notes are recorded as the
  message's ``items`` (:mod:`.media` says which becomes what), with or without a caption: the
  caption is the text, and a photo without one is recorded with empty text (in a group, the
  speaker's name alone). Media nothing can be read from (stickers, videos, ...) is recorded only
  when it has a caption. An album — several updates sharing a ``media_group_id`` — is one message
  (:func:`album_message`; :mod:`.albums` gathers its parts), carrying the first part's update id.
- Edits, service messages (joins, pins, ...) and channel posts are ignored. The two service
  messages of a group's upgrade to a supergroup (``migrate_to_chat_id`` in the old group,
  ``migrate_from_chat_id`` in the new one) are not recorded either, but they teach the adapter
  where the group's replies go now (:func:`migration`).
- A press of a button of a question the bot asked before running a tool (callback data
  ``fga:<id>:y`` or ``fga:<id>:n``) is the message ``/approve <id>`` or ``/refuse <id>`` of the person
  who pressed it (:func:`button_message`); any other button is ignored.
- With ``allowed_user_ids`` / ``allowed_chat_ids`` set, messages from anyone else are ignored
  (not recorded) and logged at info.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection, Sequence

from aiogram.types import Message, MessageEntity, Update, User

from gateway.platforms.base import IncomingMessage, approval_command, valid_text
from gateway.platforms.telegram.media import BOT_API_DOWNLOAD_LIMIT, message_items

log = logging.getLogger("gateway.platforms.telegram")  # the adapter's log: one logger to filter for Telegram

#: New messages, and presses of the bot's buttons: edits, reactions, member changes are not conversation.
ALLOWED_UPDATES = ["message", "callback_query"]
#: A button of a question the bot asked (``fga:<approval id>:y`` or ``:n``).
APPROVAL_DATA = re.compile(r"^fga:([0-9a-f]{1,16}):([yn])$")


def approval_data(approval_id: str, approved: bool) -> str:
    """The callback data of a question's yes or no button."""
    return f"fga:{approval_id}:{'y' if approved else 'n'}"


def button_message(
    update: Update, *, platform: str, allowed_user_ids: Collection[int], allowed_chat_ids: Collection[int]
) -> IncomingMessage | None:
    """The answer a press of a question's button gives, as the presser's ``/approve <id>`` or ``/refuse <id>``;
    None for any other update or button, or a presser outside the allowlists."""
    query = update.callback_query
    match = APPROVAL_DATA.match(query.data or "") if query is not None else None
    if query is None or match is None or query.message is None:
        return None
    chat_id, user = query.message.chat.id, query.from_user
    if not _allowed(user, chat_id, allowed_user_ids, allowed_chat_ids):
        log.info("telegram: ignored a button pressed by user %s in chat %s (not in the allowlists)", user.id, chat_id)
        return None
    return IncomingMessage(
        platform=platform,
        chat_id=str(chat_id),
        user_id=str(user.id),
        user_name=_display_name(user),
        update_id=str(update.update_id),
        text=approval_command(match[1], match[2] == "y"),
    )


def album_message(
    updates: Sequence[Update],
    me: User | None,
    *,
    platform: str,
    allowed_user_ids: Collection[int],
    allowed_chat_ids: Collection[int],
    max_bytes: int = BOT_API_DOWNLOAD_LIMIT,
) -> IncomingMessage | None:
    """One message of the updates of an album (oldest first; one update is an album of one), or None.

    The first part names the chat, the sender and the update id; the first part with words decides
    whom the album addresses; every part's media is an item, in order.
    """
    messages = [update.message for update in updates if update.message is not None]
    if not messages or messages[0].chat.type == "channel":
        return None
    first = messages[0]
    items = tuple(item for message in messages for item in message_items(message, max_bytes))
    lead = next((message for message in messages if message.text or message.caption), first)
    raw = valid_text(_words(lead))  # before the entity slices below, which encode it as UTF-16
    if not raw and not items:
        return None
    sender = first.from_user
    if not _admitted(first, allowed_user_ids, allowed_chat_ids):
        return None
    text, respond = _album_text(me, messages, lead, raw)
    return IncomingMessage(
        platform=platform,
        chat_id=str(first.chat.id),
        user_id=str(sender.id) if sender else "",
        user_name=_display_name(sender),
        update_id=str(updates[0].update_id),
        text=text,
        ts=first.date.timestamp(),
        respond=respond,
        items=items,
    )


def _admitted(first: Message, user_ids: Collection[int], chat_ids: Collection[int]) -> bool:
    """Whether the album's sender and chat pass the allowlists; one that does not is logged, not recorded."""
    sender = first.from_user
    if _allowed(sender, first.chat.id, user_ids, chat_ids):
        return True
    log.info(
        "telegram: ignored a message from user %s in chat %s (not in the allowlists)",
        sender.id if sender else "?",
        first.chat.id,
    )
    return False


def _album_text(me: User | None, messages: Sequence[Message], lead: Message, raw: str) -> tuple[str, bool]:
    """The text the album is recorded with, and whether it is answered: the lead part's words (``raw``) as
    whom they address leaves them, then every other part's words, under the speaker's name in a group."""
    sender = messages[0].from_user
    speaker = sender.first_name if sender else "someone"
    body, respond, prefix = _addressing(me, messages, lead, raw, speaker)
    more = [valid_text(_words(message)) for message in messages if message is not lead and _words(message)]
    words = "\n".join(part for part in (body, *more) if part)
    text = prefix + words if words else prefix.rstrip()  # a group's photo without a caption: "Ann:"
    return text, respond


def _addressing(
    me: User | None, messages: Sequence[Message], lead: Message, raw: str, speaker: str
) -> tuple[str, bool, str]:
    """``(body, respond, prefix)``: a private chat's words or a command for this bot are answered as they are;
    a group's mention of the bot or reply to it is answered, without the leading mention, under the speaker's
    name; anything else in a group is recorded under the name without an answer."""
    if messages[0].chat.type == "private" or raw and _is_command_for(me, lead, raw):
        return raw, True, ""
    if (raw and _mentions(me, lead, raw)) or any(_replies_to(me, message) for message in messages):
        return _without_leading_mention(me, raw), True, f"{speaker}: "
    return raw, False, f"{speaker}: "


def media_group(update: Update) -> tuple[int, str] | None:
    """``(chat id, media_group_id)`` when ``update`` is one part of an album, else None."""
    message = update.message
    if message is None or not message.media_group_id:
        return None
    return message.chat.id, message.media_group_id


def update_chat(update: Update) -> int | None:
    """The chat an update's message is in; None for an update without one."""
    return update.message.chat.id if update.message is not None else None


def migration(update: Update) -> tuple[int, int] | None:
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


def _allowed(sender: User | None, chat_id: int, user_ids: Collection[int], chat_ids: Collection[int]) -> bool:
    if chat_ids and chat_id not in chat_ids:
        return False
    return not user_ids or (sender is not None and sender.id in user_ids)


def _username(me: User | None) -> str:
    return (me.username or "").lower() if me else ""


def _is_command_for(me: User | None, message: Message, raw: str) -> bool:
    """A /command at the start of the message, for every bot or for this one by name."""
    for entity in _entities(message):
        if entity.type == "bot_command" and entity.offset == 0:
            _, _, target = _utf16_slice(raw, entity.offset, entity.length).partition("@")
            return not target or target.lower() == _username(me)
    return False


def _mentions(me: User | None, message: Message, raw: str) -> bool:
    name = _username(me)
    for entity in _entities(message):
        if entity.type == "mention" and name and _utf16_slice(raw, entity.offset, entity.length).lower() == "@" + name:
            return True
        if entity.type == "text_mention" and entity.user and me and entity.user.id == me.id:
            return True
    return False


def _replies_to(me: User | None, message: Message) -> bool:
    replied = message.reply_to_message
    return bool(replied and replied.from_user and me and replied.from_user.id == me.id)


def _without_leading_mention(me: User | None, raw: str) -> str:
    handle = "@" + _username(me)
    if len(handle) > 1 and raw.lower().startswith(handle):
        rest = raw[len(handle) :].lstrip(" \t\n,:;")
        if rest:
            return rest
    return raw


def _display_name(user: User | None) -> str:
    if user is None:
        return "someone"
    return " ".join(part for part in (user.first_name, user.last_name) if part) or (user.username or str(user.id))


def _words(message: Message) -> str:
    """A message's text, or its media's caption."""
    return (message.text if message.text is not None else message.caption) or ""


def _entities(message: Message) -> list[MessageEntity]:
    return list(message.entities or message.caption_entities or [])


def _utf16_slice(text: str, offset: int, length: int) -> str:
    """``text[offset:offset+length]`` in UTF-16 code units, as Telegram's entity offsets count."""
    encoded = text.encode("utf-16-le")
    return encoded[2 * offset : 2 * (offset + length)].decode("utf-16-le", errors="replace")
