"""What one inbox entry's handling works with and how it ends, as the turn's steps and the chat commands share it.

:class:`ChatTurn` is the entry in its session, which the turn's steps and the commands read and move on
(a compaction or ``/new`` changes its session); a model turn is :class:`Prepared` for the agent, and
what the agent came to is its :class:`Answer`; :class:`TurnEnd` is how every way of handling an entry
ends, which the turn then delivers and finishes; :class:`AgentFactory` is what a turn asks for its
engine and agent. What a command may use of the gateway besides is its own context
(:class:`gateway.commands.context.CommandContext`), never the runner.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.context_engine import ContextEngine
from agent.items import DEFAULT_MAX_IMAGES, MediaSource
from agent.loop import Agent, ClientToolError, ResultArchive, TurnResult, TurnStopped
from agent.messages import Message
from agent.metering import Meter
from agent.tools import ToolRegistry
from gateway.access.budgets import ChatMeter
from gateway.delivery.stream import ReplyStream
from gateway.memory.block import MemoryBlock
from gateway.platforms.base import IncomingMessage, TurnRefusal
from gateway.session_source import ChatHistory
from gateway.store import Lock, SessionMeta


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
        system_prompt: str | None = None,
        memory: str = "",
        turn_note: str = "",
    ) -> Agent: ...


@dataclass
class ChatTurn:
    """The entry being handled in its chat's session, under the chat's lock; commands receive it too."""

    chat: str
    message: IncomingMessage
    lock: Lock
    session_id: str
    meta: SessionMeta

    @property
    def entry_id(self) -> str:
        return self.message.entry_id


#: Entries a turn took in behind its head: ``(raw, message)``, in order.
Batch = list[tuple[str, IncomingMessage]]


@dataclass
class Prepared:
    """A model turn ready to run: what the agent gets and what its commit records."""

    model: str
    engine: ContextEngine
    tools: ToolRegistry
    history: list[Message]
    #: Messages of a coalesced backlog before the last one that the request carries, bounded, stored with the turn.
    earlier: list[Message]
    #: None when the turn continues one whose message and tool results are stored
    #: (:attr:`SessionMeta.partial_entry_id`).
    user_message: Message | None
    batch: Batch
    #: What the person is told above the reply (a message too long to read whole).
    notes: list[str]
    #: A ``/stop`` that came while hygiene wrote its summary: the agent ends the turn before any request.
    stopped: TurnStopped | None
    #: Meters the turn's model calls against the budgets that apply (None: no budget does).
    meter: ChatMeter | None
    #: The sender's results (``{tool_call_id, content}``) for the client calls the history ends with: the turn
    #: starts from them (empty for every other turn, and for a retry that has them stored already).
    tool_results: list[dict[str, Any]] = field(default_factory=list)
    #: The memory of the person the turn answers that its requests carry.
    memory: MemoryBlock = field(default_factory=MemoryBlock)


@dataclass
class Answer:
    """What the agent's turn came to: its result and reply, completed by the commit (the items to send, the
    context's size) and told by the turn's event."""

    result: TurnResult
    reply: str
    #: Where the reply streamed while the turn ran; it delivers the final text too.
    stream: ReplyStream | None
    #: Over budget, and the chat was told so already: the turn stores its message and sends nothing.
    quiet: bool = False
    #: What went wrong with the model call, in plain words ("" when nothing did).
    failure: str = ""
    #: Images and files made for the person (refs), sent after the reply's text.
    items: list[dict[str, Any]] = field(default_factory=list)
    #: The context's size once committed, as hygiene will judge it.
    context_tokens: int = 0
    #: The reply is a refusal's notice (a used-up budget), by kind, for the adapter (:class:`TurnEnd.refusal`).
    refusal: TurnRefusal | None = None


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
    #: Calls of the sender's own tools the reply ends with (OpenAI ``tool_calls``), for the sender to run.
    client_calls: tuple[dict[str, Any], ...] = ()
    #: The sender's client tools or tool results could not be taken (nothing was stored): why, naming the field.
    refused: ClientToolError | None = None
    #: The message is kept but not answered now (a used-up budget, a sender too fast): why, by kind, told to the
    #: adapter ahead of the notice that says so.
    refusal: TurnRefusal | None = None
