"""Telegram's "typing…" indicator, kept alive while a reply is prepared.

Telegram shows the indicator for 5 s, so it is sent again every ``interval`` seconds until the
reply is sent, or ``timeout`` passes if a turn ends without one. It follows a group to its
supergroup like every call to a chat; a failed indicator is never worth failing a turn.
"""

from __future__ import annotations

import asyncio
import logging

from aiogram import Bot

from gateway.platforms.telegram.moves import ChatMoves

log = logging.getLogger("gateway.platforms.telegram")  # the adapter's log: one logger to filter for Telegram


class TypingIndicator:
    """One bot's typing indicators, one task per chat."""

    def __init__(self, bot: Bot, moves: ChatMoves, *, interval: float, timeout: float) -> None:
        self.bot = bot
        self.moves = moves
        self.interval = interval
        self.timeout = timeout
        self._tasks: dict[str, asyncio.Task[None]] = {}

    async def start(self, chat_id: str) -> None:
        """Show "typing…" now and keep it shown until :meth:`stop` (or ``timeout``)."""
        await self._send(chat_id)
        self.stop(chat_id)
        if self.interval > 0:
            self._tasks[chat_id] = asyncio.create_task(self._keep(chat_id), name=f"telegram-typing-{chat_id}")

    def stop(self, chat_id: str) -> None:
        task = self._tasks.pop(chat_id, None)
        if task is not None:
            task.cancel()

    def stop_all(self) -> None:
        for chat_id in list(self._tasks):
            self.stop(chat_id)

    async def _keep(self, chat_id: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        while loop.time() + self.interval < deadline:
            await asyncio.sleep(self.interval)
            await self._send(chat_id)

    async def _send(self, chat_id: str) -> None:
        try:
            await self.moves.in_chat(chat_id, lambda target: self.bot.send_chat_action(chat_id=target, action="typing"))
        except asyncio.CancelledError:
            raise
        except Exception as error:  # an indicator is never worth failing a turn
            log.debug("telegram: typing indicator for %s failed: %s", chat_id, error)
