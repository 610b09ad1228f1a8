"""What a chat command may use of the gateway that runs it: the narrow context every command receives.

A command runs inside its chat's turn, but it never sees the runner or the turn's own parts: only
the session store and inbox, the agent builder, the events, the compactions, who the bot answers,
what people spent, and how this process's worker is doing. :func:`gateway.run.build.build_runner`
makes one per process.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from agent.context_engine import ContextEngine
from gateway.access.roles import Roles
from gateway.agents import AgentBuilder
from gateway.events import EventBus
from gateway.session_source import ChatHistory
from gateway.store import SessionStore
from gateway.store.inbox import Inbox
from gateway.store.memory import MemoryStore
from gateway.worker.chat_turn import ChatTurn
from gateway.worker.compactions import Compactions
from gateway.worker.parts import Spending, WorkerStatus


@dataclass(frozen=True)
class CommandContext:
    """Exactly what the chat commands use of the gateway."""

    store: SessionStore
    #: The chat's pending messages (``/status``) and its stop flag (``/stop``).
    inbox: Inbox
    agents: AgentBuilder
    events: EventBus
    #: ``/compress`` compacts and commits through the same path as the turn's own compactions.
    compactions: Compactions
    #: Who the bot answers; the admins' ``/allow``, ``/block`` and ``/unblock`` change it.
    roles: Roles
    spend: Spending
    #: This process's worker, as ``/status`` reports it.
    status: WorkerStatus
    #: What the bot keeps about people (``/remember``, ``/memory``, ``/forget``).
    memory: MemoryStore

    def model(self, turn: ChatTurn) -> str:
        """The model the chat's session talks to."""
        return turn.meta.model or self.agents.default_model

    def engine(self, turn: ChatTurn, model: str) -> ContextEngine:
        """The chat's context engine for ``model``, with its saved state and its archive; its summarizer's calls
        count against the budgets of the person who asked (and the chat)."""
        return self.agents.build_engine(
            model,
            turn.meta.engine_state,
            ChatHistory(self.store, turn.chat, turn.session_id),
            self.spend.meter(turn.message, []),
        )


#: A chat command: its context, the turn it runs in, and the text after its name; its reply.
Command = Callable[[CommandContext, ChatTurn, str], Awaitable[str]]
