"""What one inbox entry's handling works with and how it ends, as the turn's steps and the chat commands share it.

:class:`ChatTurn` is what a command receives; :class:`CommandHost` is the part of the worker a
command may use (its store, inbox, agent builder, events, and compaction); :class:`TurnEnd` is
how every way of handling an entry ends, which the turn then delivers and finishes. Commands
depend on this small interface, not on the runner, so neither module imports the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from agent.context_engine import ContextEngine
from agent.items import DEFAULT_MAX_IMAGES, MediaSource
from agent.loop import Agent, ResultArchive
from agent.messages import Message
from agent.metering import Meter
from agent.tools import ToolRegistry
from gateway.access.roles import Roles
from gateway.agents import AgentBuilder
from gateway.config.access import BudgetSettings
from gateway.delivery.stream import ReplyStream
from gateway.events import EventBus, Trigger
from gateway.platforms.base import IncomingMessage
from gateway.session_source import ChatHistory
from gateway.store import Lock, SessionMeta, SessionStore
from gateway.store.inbox import Inbox
from gateway.store.spend import SpendStore


class AgentFactory(Protocol):
    """Builds what a turn needs for a chat's session (``gateway.agents.AgentBuilder``)."""

    default_model: str

    def context_length(self, model: str) -> int: ...

    async def refresh_windows(self) -> None: ...

    def build_engine(
        self, model: str, state: Mapping[str, object], history: ChatHistory, meter: Meter | None = None
    ) -> ContextEngine: ...

    def build_agent(
        self,
        engine: ContextEngine,
        model: str,
        tools: ToolRegistry,
        *,
        media: MediaSource | None = None,
        max_images: int = DEFAULT_MAX_IMAGES,
        results: ResultArchive | None = None,
        result_limit: int | None = None,
        meter: Meter | None = None,
    ) -> Agent: ...


class CommandHost(Protocol):
    """What a chat command may use of the worker that runs it (the runner is one)."""

    store: SessionStore
    inbox: Inbox
    agents: AgentBuilder
    events: EventBus
    worker_id: str
    started_at: float
    roles: Roles
    spending: SpendStore
    budgets: BudgetSettings

    @property
    def busy_chats(self) -> int: ...

    @property
    def cache_ttl(self) -> str: ...

    async def compact(
        self,
        turn: ChatTurn,
        engine: ContextEngine,
        *,
        trigger: Trigger,
        force: bool,
        focus: str | None = None,
        tokens: int | None = None,
        messages: list[Message] | None = None,
    ) -> list[Message] | None: ...


@dataclass
class ChatTurn:
    """Everything one entry's handling works with; commands receive it too."""

    runner: CommandHost
    chat: str
    message: IncomingMessage
    lock: Lock
    session_id: str
    meta: SessionMeta

    @property
    def entry_id(self) -> str:
        return self.message.entry_id


@dataclass(frozen=True)
class TurnEnd:
    """How an entry ended: the session it ended in, the reply to send (if any), and whether that
    reply belongs to a committed turn (so sending it is recorded in the session meta)."""

    session_id: str
    reply: str | None
    committed: bool
    #: Where the reply streamed while the turn ran; it delivers the final text too.
    stream: ReplyStream | None = None
    #: Entries after this one that the turn took in too (a coalesced backlog): ``(raw, entry id)``, in order.
    batch: tuple[tuple[str, str], ...] = ()
    #: True for an entry an earlier turn already took in: removed without a reply of its own.
    silent: bool = False
    #: Images and files made for the person (refs), sent after the reply's text.
    items: tuple[dict[str, Any], ...] = ()
    #: The message the reply answers when it is not the entry's own: a batch's last (its journal is the reply's).
    answers: IncomingMessage | None = None
