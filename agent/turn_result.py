"""What a turn reports, however it ends: its result, or the failure that carries what it did before.

A turn can end with the model's answer, with calls of the client's tools for the client to run,
with a stop, with too many tool calls, or with the provider failing it part way; in each case the
caller keeps what the turn did (whole tool-call pairs, an in-loop compaction, the items made for the
person), so :class:`TurnSoFar` gathers that as the turn goes and builds the one :class:`TurnResult`
every ending reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent.llm.errors import ProviderError
from agent.llm.types import Completion
from agent.messages import Message
from agent.usage import Usage


@dataclass
class TurnResult:
    """What one turn produced; ``messages`` is the whole active list after it."""

    messages: list[Message]
    new_messages: list[Message]
    reply: str
    compacted: bool
    usage: Usage = field(default_factory=Usage)
    last_usage: Usage = field(default_factory=Usage)
    calls: int = 0
    #: Messages created during the turn (never stored, so without ``_id``) that an in-loop
    #: compaction folded away: the gateway archives them with the commit.
    folded: list[Message] = field(default_factory=list)
    #: Compactions the provider made of the conversation during the turn (a codex thread, Responses).
    native_compactions: int = 0
    #: Items made for the person during the turn (refs, kept in the chat's media store), in order.
    outgoing: list[dict[str, Any]] = field(default_factory=list)
    #: Calls of the client's own tools the turn ended with (the last assistant message's, unanswered): the
    #: client runs them and the next turn starts from their results. Empty for every other ending.
    pending_client_calls: list[dict[str, Any]] = field(default_factory=list)


class TurnFailed(Exception):
    """The provider failed the turn after part of its work was done.

    ``error`` is the provider's error; ``partial`` what the turn did before it (whole tool-call
    pairs, an in-loop compaction), for the caller to keep: tool results already paid for.
    """

    def __init__(self, error: ProviderError, partial: TurnResult) -> None:
        super().__init__(str(error))
        self.error = error
        self.partial = partial


@dataclass
class TurnSoFar:
    """What a turn has done so far: what its result reports, however the turn ends."""

    #: The turn's messages as they stand (a compaction replaces the list).
    messages: list[Message]
    first_new: int  # where the turn's own messages begin
    compacted: bool = False
    total: Usage = field(default_factory=Usage)
    last: Usage = field(default_factory=Usage)
    calls: int = 0
    native_compactions: int = 0
    folded: list[Message] = field(default_factory=list)
    outgoing: list[dict[str, Any]] = field(default_factory=list)
    #: Whether a context-length refusal already had its one compaction and retry (a lowered window gets more).
    context_retry_used: bool = False

    def answered(self, completion: Completion) -> None:
        """Count one answered request: its usage, and the compactions the provider made while answering it."""
        self.calls += 1
        self.total = self.total + completion.usage
        self.last = completion.usage
        self.native_compactions += completion.native_compactions

    def result(self, reply: str, pending_client_calls: list[dict[str, Any]] | None = None) -> TurnResult:
        """The turn's result with ``reply``, as things stand (its new messages: none once it compacted), ending
        with ``pending_client_calls`` when the client is to run those."""
        new_messages = [] if self.compacted else self.messages[self.first_new :]
        return TurnResult(
            self.messages,
            new_messages,
            reply,
            self.compacted,
            self.total,
            self.last,
            self.calls,
            self.folded,
            self.native_compactions,
            self.outgoing,
            pending_client_calls or [],
        )
