"""What every platform adapter is: platform events in, one ``IncomingMessage`` shape out, replies back.

Adapters never touch Redis or compression. They hand each update to the gateway's
intake (which makes it durable before the platform is acknowledged) and send the
replies the runner gives them, split to the platform's limit.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field


class IncomingMessage(BaseModel):
    """One message from a person on a platform, as the gateway sees it.

    ``update_id`` is the platform's own id for the delivery (Telegram's update_id, Discord's
    message id) and is what duplicates are recognised by. ``respond`` is False for messages
    the bot only records (group chatter that did not address it).
    """

    model_config = ConfigDict(frozen=True)

    platform: str = Field(min_length=1)
    chat_id: str = Field(min_length=1)
    user_id: str = ""
    user_name: str = ""
    update_id: str = Field(min_length=1)
    text: str
    ts: float = Field(default_factory=time.time)
    respond: bool = True

    @property
    def chat(self) -> str:
        """The chat's key in the store, e.g. ``tg:123456``."""
        return f"{self.platform}:{self.chat_id}"


#: The gateway's intake: makes the message durable and returns once it is safe to acknowledge.
Intake = Callable[[IncomingMessage], Awaitable[bool]]


class PlatformAdapter(ABC):
    """A chat platform: receives messages into the intake, sends replies, shows typing."""

    #: Platform prefix used in chat keys (``tg``, ``dc``, ``local``).
    platform: str
    #: Longest message the platform accepts, in the platform's own units.
    max_message_length: int

    @abstractmethod
    async def start(self, intake: Intake) -> None:
        """Begin receiving; every message goes to ``intake`` before it is acknowledged."""

    @abstractmethod
    async def stop(self) -> None:
        """Stop receiving and release connections."""

    @abstractmethod
    async def send(self, chat_id: str, text: str, *, reply_to: Optional[str] = None) -> None:
        """Deliver ``text`` completely (split as the platform requires), retrying as it asks."""

    async def typing(self, chat_id: str) -> None:
        """Show that a reply is being prepared; platforms without an indicator do nothing."""
