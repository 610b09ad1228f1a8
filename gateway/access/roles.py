"""Who the bot answers: admins, the people allowed, the people blocked (:mod:`gateway.config.access`).

The configuration's lists are the floor and the admins' changes (:class:`gateway.store.access.AccessLists`) are
added to them, read at every message so a change made in one process counts in every other at once. An admin is
always answered. A blocked person's messages are stored and never answered; with anyone allowed, only they (and
the admins) are answered, and everyone else's messages are stored the same way.
"""

from __future__ import annotations

import re

from gateway.config.access import AccessSettings
from gateway.config.api import KEY_NAME_PATTERN
from gateway.platforms.base import IncomingMessage
from gateway.store.access import AccessLists

#: A person as a command names them: ``tg:123``, a bare id (of the chat's platform), a Discord mention ``<@123>``,
#: or an API key's person ``api:<key name>``.
_PERSON = re.compile(r"^(?:(tg|dc|web|local|api):)?(?:<@!?(\d+)>|([\w.-]+))$")
#: An id of the chat platforms: a word character first, then word characters and dashes (web chat ids).
_CHAT_ID = re.compile(r"\w[\w-]*")
#: A key's name (``platforms.api.keys[].name``): it may hold dots and start with any of its marks.
_KEY_NAME = re.compile(KEY_NAME_PATTERN)


def person_of(message: IncomingMessage) -> str:
    """Who sent ``message``: ``<platform>:<user id>``."""
    return f"{message.platform}:{message.user_id}"


def named_person(text: str, platform: str) -> str | None:
    """The person a command's argument names, on ``platform`` unless it says another; None when it names nobody."""
    match = _PERSON.match(text.strip())
    if match is None:
        return None
    where, ident = match[1] or platform, match[2] or match[3]
    if where in ("tg", "dc") and not ident.isdigit():  # Telegram and Discord people are numbers; a name is not one
        return None
    if where == "api":
        return f"api:{ident}" if match[3] and _KEY_NAME.fullmatch(ident) else None
    if _CHAT_ID.fullmatch(ident) is None:
        return None
    return f"{where}:{ident}"


class Roles:
    """The configuration's lists and the admins' changes, asked once per message."""

    def __init__(self, settings: AccessSettings, lists: AccessLists) -> None:
        self.settings = settings
        self.lists = lists
        self.admins = frozenset(settings.admins)

    def is_admin(self, person: str) -> bool:
        return person in self.admins

    async def answers(self, message: IncomingMessage) -> bool:
        """Whether the bot answers the sender of ``message`` now."""
        person = person_of(message)
        if self.is_admin(person):
            return True
        changes = await self.lists.read()
        if person in self.settings.blocked or person in changes.blocked:
            return False
        allowed = set(self.settings.allowed) | changes.allowed
        return not allowed or person in allowed
