"""Which Discord messages the gateway records, and as what (see :mod:`gateway.platforms.discord`).

DMs: every message, answered. Server channels and threads: a message that mentions the bot (or
its managed role) or replies to it is answered, without the bot's mention; every other one is
recorded unanswered as ``"Name: text"``. Bots, webhooks and system messages are ignored, and so
is whatever the allowlists do not permit. Attachments are the message's items
(:mod:`gateway.platforms.discord_media`); a message of attachments alone has empty text (in a
server channel, the speaker's name alone).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import discord

from gateway.platforms.base import IncomingMessage
from gateway.platforms.discord_media import attachment_items

#: Messages that are people talking; the others (joins, pins, boosts, thread notices) are ignored.
CONVERSATION_TYPES = frozenset({discord.MessageType.default, discord.MessageType.reply})

_MENTION = re.compile(r"<@!?(?P<user>\d+)>|<@&(?P<role>\d+)>|<#(?P<channel>\d+)>")
#: stands in for the bot's own mention while the text is rendered, then removed with its blanks
_OWN_MENTION = "\x00"
_OWN_MENTION_AT_EDGE = re.compile(r"(?m)^[ \t]*\x00[ \t]*|[ \t]*\x00[ \t]*$")
_OWN_MENTION_INSIDE = re.compile(r"[ \t]*\x00[ \t]*")


@dataclass(frozen=True)
class Allowlist:
    """Who and where the bot serves; an empty set allows all, every non-empty set must match."""

    users: frozenset[int] = frozenset()
    guilds: frozenset[int] = frozenset()
    channels: frozenset[int] = frozenset()

    @classmethod
    def of(cls, users: Iterable[int] = (), guilds: Iterable[int] = (), channels: Iterable[int] = ()) -> Allowlist:
        return cls(frozenset(users), frozenset(guilds), frozenset(channels))

    def permits(self, message: discord.Message) -> bool:
        if self.users and message.author.id not in self.users:
            return False
        if self.guilds and guild_id_of(message) not in self.guilds:
            return False
        if self.channels:
            channel = message.channel
            parent = channel.parent_id if isinstance(channel, discord.Thread) else None
            if channel.id not in self.channels and parent not in self.channels:
                return False
        return True


def incoming_message(
    message: discord.Message, me: discord.ClientUser | None, *, platform: str, allowlist: Allowlist
) -> IncomingMessage | None:
    """The gateway's view of a message received by the bot ``me``, or None when the bot ignores it."""
    author = message.author
    if me is None or author.bot or author.id == me.id or message.webhook_id is not None:
        return None
    if message.type not in CONVERSATION_TYPES or not allowlist.permits(message):
        return None
    text = readable_text(message, me.id)
    items = attachment_items(message)
    if not text and not items:
        return None
    respond = is_direct(message) or addresses_bot(message, me.id)
    name = author.display_name
    return IncomingMessage(
        platform=platform,
        chat_id=str(message.channel.id),
        user_id=str(author.id),
        user_name=name,
        update_id=str(message.id),
        text=text if respond else f"{name}: {text}".rstrip(),
        ts=message.created_at.timestamp(),
        respond=respond,
        items=items,
        direct=isinstance(message.channel, discord.DMChannel),  # a group DM is several people's
    )


def guild_id_of(message: discord.Message) -> int | None:
    """The server a message was posted in, also when that server is not cached; None for DMs."""
    if message.guild is not None:
        return message.guild.id
    channel = message.channel
    return channel.guild_id if isinstance(channel, discord.PartialMessageable) else None


def is_direct(message: discord.Message) -> bool:
    return isinstance(message.channel, discord.abc.PrivateChannel)


def addresses_bot(message: discord.Message, bot_id: int) -> bool:
    """Mentioned by user or by the bot's managed role, or a reply to one of the bot's messages."""
    if any(user.id == bot_id for user in message.mentions):
        return True
    if any(role.tags is not None and role.tags.bot_id == bot_id for role in message.role_mentions):
        return True
    reference = message.reference
    if reference is None:
        return False
    replied = reference.resolved if isinstance(reference.resolved, discord.Message) else reference.cached_message
    return replied is not None and replied.author.id == bot_id


def readable_text(message: discord.Message, bot_id: int) -> str:
    """The content as a person reads it: the bot's own mention removed, other mentions as names."""
    users = {user.id: user for user in message.mentions}
    roles = {role.id: role for role in message.role_mentions}
    guild = message.guild

    def render(match: re.Match[str]) -> str:
        if match["user"]:
            user_id = int(match["user"])
            if user_id == bot_id:
                return _OWN_MENTION
            user = users.get(user_id)
            return f"@{user.display_name}" if user else match[0]
        if match["role"]:
            role = roles.get(int(match["role"]))
            if role is not None and role.tags is not None and role.tags.bot_id == bot_id:
                return _OWN_MENTION
            return f"@{role.name}" if role else match[0]
        channel = guild.get_channel_or_thread(int(match["channel"])) if guild else None
        return f"#{channel.name}" if channel else match[0]

    text = _MENTION.sub(render, message.content)
    # the bot's mention goes with the blanks around it: none left at a line's edge, one between words
    text = _OWN_MENTION_AT_EDGE.sub("", text)
    return _OWN_MENTION_INSIDE.sub(" ", text).strip()
