"""Groups upgraded to supergroups: where a chat's calls go now.

A group upgraded to a supergroup gets a new chat id, and Telegram answers every call to the old
one with a 400 naming it (``migrate_to_chat_id``). Every call addressed to a chat goes through
:meth:`ChatMoves.in_chat`: it remembers the new id and makes the same call there, so a refused
chunk is sent once, at the new id, and every later call from this process (whole replies,
streamed ones, typing) goes straight there. The move is remembered per process, not in Redis:
each process pays one 400 at most, unless the upgrade's service message reached it first.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiogram.exceptions import TelegramMigrateToChat

log = logging.getLogger("gateway.platforms.telegram")  # the adapter's log: one logger to filter for Telegram

#: Upgrades one call follows before it gives up: a group moves once; a loop of moves is a broken server.
MAX_MOVES = 2

T = TypeVar("T")


def chat_ref(chat_id: str) -> int | str:
    """Telegram chat ids are integers; ``@channelname`` stays a string."""
    try:
        return int(chat_id)
    except ValueError:
        return chat_id


class ChatMoves:
    """Chat id -> the supergroup that group became, learnt from a 400 or from the upgrade's service message."""

    def __init__(self) -> None:
        self._moved: dict[str, int] = {}

    def target(self, chat_id: str) -> int | str:
        """Where calls for ``chat_id`` go now: the supergroup's id once the group was upgraded."""
        return self._moved.get(chat_id, chat_ref(chat_id))

    def moved(self, chat_id: str, new_chat_id: int) -> bool:
        """Remember that the group ``chat_id`` became the supergroup ``new_chat_id``; False when already known."""
        if self._moved.get(chat_id) == new_chat_id:
            return False
        log.info("telegram: chat %s was upgraded to the supergroup %s; its replies go there", chat_id, new_chat_id)
        self._moved[chat_id] = new_chat_id
        return True

    async def in_chat(self, chat_id: str, request: Callable[[int | str], Awaitable[T]]) -> T:
        """Run ``request`` at ``chat_id``'s current id, following the group to its supergroup.

        Telegram refused the call at the old id, so making it again at the new one sends nothing
        twice; the move is remembered, so later calls do not hit the 400 again.
        """
        for _ in range(MAX_MOVES):
            try:
                return await request(self.target(chat_id))
            except TelegramMigrateToChat as moved:
                self.moved(chat_id, moved.migrate_to_chat_id)
        return await request(self.target(chat_id))
