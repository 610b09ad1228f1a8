"""Whose chat a message is in, and so where what is learned from it applies.

A chat is private when it is one person's. On Telegram that is a chat whose id is the sender's id; the
terminal and each browser of the web chat are one person's; an API session (``api:<key>/<session>``) is its
key's own. A Discord DM is marked as such by the adapter (``IncomingMessage.direct``); every other Discord
channel is a group of its own: what is learned there is used there only.
"""

from __future__ import annotations

from gateway.platforms.base import IncomingMessage
from gateway.store.memory import PRIVATE, group_scope

#: Platforms where every chat is one person's: the terminal, a browser of the web chat, an API key's session.
ONE_PERSON_PLATFORMS = frozenset({"local", "web", "api"})


def is_private(message: IncomingMessage) -> bool:
    """Whether ``message``'s chat is one person's (the module docstring says how each platform tells)."""
    if message.platform in ONE_PERSON_PLATFORMS:
        return True
    if message.platform == "tg":
        return bool(message.user_id) and message.chat_id == message.user_id
    return message.direct and bool(message.user_id)


def scope_of(message: IncomingMessage) -> str:
    """Where an entry learned from ``message`` applies: the sender's private chats, or this group."""
    return PRIVATE if is_private(message) else group_scope(message.chat)


def where(scope: str) -> str:
    """A scope as a person reads it: ``private``, or the group's chat key."""
    return "private" if scope == PRIVATE else scope.removeprefix("group:")
