"""What every turn of one process shares, and the few things the runner and the chat commands both read.

:func:`gateway.run.build.build_runner` makes each of these once, from the settings; nothing here has a
default of its own, so a value a turn follows is always the one the configuration gave.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from agent.tools.mcp import McpTools
from gateway.access.budgets import ChatMeter
from gateway.config.access import BudgetSettings
from gateway.config.tools import ToolsSettings
from gateway.delivery.replies import Replies
from gateway.events import EventBus
from gateway.media.message import ItemIntake
from gateway.memory.block import MemoryReader
from gateway.outage import ProviderWatch
from gateway.platforms.base import IncomingMessage, PlatformAdapter
from gateway.session_source import MeaningSearch
from gateway.store import SessionStore
from gateway.store.approvals import Approvals
from gateway.store.inbox import Inbox
from gateway.store.person_chats import PersonChats
from gateway.store.spend import SpendStore
from gateway.store.told import ToldOnce
from gateway.worker.chat_turn import AgentFactory, ChatTurn
from gateway.worker.compactions import Compactions
from gateway.worker.long_messages import MessageBound

#: Answers a chat command in the turn's message; None when the message is not one (``gateway.commands``).
CommandHandler = Callable[[ChatTurn], Awaitable[str | None]]


@dataclass(frozen=True)
class TurnOptions:
    """The gateway settings a turn follows (``gateway.*``, ``delivery.stream_replies``, ``media``)."""

    stream_replies: bool
    #: Messages already waiting when a turn starts join it (``gateway.coalesce_backlog``), up to a count,
    #: and the request carries that many of their tokens word for word at most.
    coalesce_backlog: bool
    coalesce_max_messages: int
    coalesce_max_tokens: int
    #: Images one request carries at most (``media.max_images_per_request``).
    max_images: int


@dataclass(frozen=True)
class Spending:
    """What each person and chat spent, against the budgets that apply (``access.budgets``), priced at the
    prompt cache's lifetime (``prompt_caching.cache_ttl``). Turns meter their model calls with it; ``/usage``
    reads it."""

    store: SpendStore
    budgets: BudgetSettings
    cache_ttl: str

    def meter(self, message: IncomingMessage, notes: list[str]) -> ChatMeter | None:
        """The meter of model calls made for ``message``, when a budget applies to them (warnings go to
        ``notes``)."""
        meter = ChatMeter(self.store, self.budgets, message, cache_ttl=self.cache_ttl, notes=notes)
        return meter if meter.active else None


@dataclass(frozen=True)
class ToolAccess:
    """The MCP servers of this process (None: none configured), which of them each chat may use (``tools``),
    and where a call whose policy is ``ask`` waits for its answer."""

    mcp: McpTools | None
    settings: ToolsSettings
    approvals: Approvals


@dataclass(frozen=True)
class TurnParts:
    """What every turn of this process shares."""

    store: SessionStore
    #: The chats' inboxes: the backlog a turn takes in, and the ``/stop`` it honours.
    inbox: Inbox
    agents: AgentFactory
    events: EventBus
    adapters: Mapping[str, PlatformAdapter]
    replies: Replies
    compactions: Compactions
    provider: ProviderWatch
    #: The chats' items: stored, read back for the agent (fetched again once dropped), voice heard.
    items: ItemIntake
    bound: MessageBound
    #: What each chat was told once (the rate notice, the over-budget notice once per budget period).
    told: ToldOnce
    tools: ToolAccess
    spend: Spending
    options: TurnOptions
    #: The chat commands, with what they may use of the gateway; the turn only hands them its message.
    commands: CommandHandler
    #: Search by meaning over the chats' embedded messages (``memory.embeddings``); None: keywords only.
    meanings: MeaningSearch | None
    #: What the bot keeps about people: the block each request carries and the model's memory tools.
    memory: MemoryReader
    #: The chats each person took part in (``session_search`` with scope ``my chats``).
    person_chats: PersonChats

    def model(self, turn: ChatTurn) -> str:
        """The model the chat's session talks to."""
        return turn.meta.model or self.agents.default_model


@dataclass
class WorkerStatus:
    """This process's worker as ``/status`` and the metrics show it: its id, when it started, and the chats
    it is answering now (the runner's slots, each its drain's task)."""

    worker_id: str
    started_at: float
    running: dict[str, asyncio.Task[None]] = field(default_factory=dict)

    @property
    def busy_chats(self) -> int:
        """How many chats this process is answering now (each has a message in its inbox until answered)."""
        return len(self.running)
