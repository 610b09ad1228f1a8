"""One inbox entry's handling, as the runner and the chat commands share it.

:class:`ChatTurn` is what a command receives; :class:`Gateway` is the part of the runner a
command may use (its store, inbox, agent builder, events, and compaction). Commands depend on
this small interface, not on the runner, so neither module imports the other's internals.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from agent.context_engine import ContextEngine
from agent.messages import Message
from gateway.agents import AgentBuilder
from gateway.events import EventBus
from gateway.inbox import Inbox
from gateway.platforms.base import IncomingMessage
from gateway.store import Lock, SessionMeta, SessionStore


class Gateway(Protocol):
    """What a chat command may use of the gateway that runs it."""

    store: SessionStore
    inbox: Inbox
    agents: AgentBuilder
    events: EventBus
    worker_id: str
    started_at: float

    @property
    def busy_chats(self) -> int: ...

    async def compact(self, turn: "ChatTurn", engine: ContextEngine, *, trigger: str, force: bool,
                      focus: str | None = None, tokens: int | None = None,
                      messages: list[Message] | None = None) -> list[Message] | None: ...


@dataclass
class ChatTurn:
    """Everything one entry's handling works with; commands receive it too."""

    runner: Gateway
    chat: str
    message: IncomingMessage
    lock: Lock
    session_id: str
    meta: SessionMeta

    @property
    def entry_id(self) -> str:
        return f"{self.message.platform}:{self.message.update_id}"
