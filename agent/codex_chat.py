"""The Codex app-server route (``api_mode: codex_app_server``).

Here the codex agent owns the conversation: the app-server keeps each thread's context,
runs its own tools, and decides what the model sees. Summarizing a local copy would not
shrink that thread, so on this route foldgate never rewrites its transcript. It sends each
new user message as a turn on the chat's thread, and compaction is the app-server's own
(``thread/compact/start``):

- ``/compress`` asks for it and waits until the compaction has completed;
- ``compression.codex_app_server_auto``: ``native`` lets the app-server decide and records
  what it did; ``hermes`` (alias ``foldgate``) starts it when foldgate's threshold is
  crossed; ``off`` never starts one (codex itself still may).

Compactions are recorded, not hidden: counted in the engine state the gateway persists,
and marked on the assistant message of the turn they happened in (the store keeps it), so
the visible history stays whole and the boundary is on record.

The route's pieces, one module each (every name importable from here as before):
:mod:`agent.llm.codex_process` (the process and its JSON-RPC wire protocol, turns and
compactions on a thread), :mod:`agent.llm.codex_transcript` (how a transcript records its
thread), :mod:`agent.codex_engine` (when to compact). This module is the chat model
over them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from agent.codex_engine import AUTO_MODES, CodexThreadEngine
from agent.llm.codex_process import (
    APPROVAL_METHODS,
    MAX_LINE_BYTES,
    AppServerError,
    CodexAppServer,
    NativeCompaction,
    ThreadUsage,
    TurnOutcome,
)
from agent.llm.codex_transcript import THREAD_KEY, AppServerCompletion, pending_input, thread_of
from agent.llm.errors import BadResponse
from agent.llm.stream import EventSink, TextDelta
from agent.llm.types import Completion

__all__ = [
    "APPROVAL_METHODS",
    "AUTO_MODES",
    "MAX_LINE_BYTES",
    "THREAD_KEY",
    "AppServerCompletion",
    "AppServerError",
    "CodexAppServer",
    "CodexAppServerChat",
    "CodexThreadEngine",
    "NativeCompaction",
    "ThreadUsage",
    "TurnOutcome",
    "pending_input",
    "thread_of",
]


class CodexAppServerChat:
    """The agent's ``ChatModel`` on this route, for one conversation: each ``complete()`` is one codex turn."""

    def __init__(self, server: CodexAppServer, engine: CodexThreadEngine) -> None:
        self.server = server
        self.engine = engine
        #: Gateway-started compactions already marked on an answer (the agent loop may start one too).
        self._gateway_marked = engine.native_compactions.get("gateway", 0)

    async def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        model: str,
        max_tokens: int,
        tools: Sequence[Mapping[str, Any]] | None = None,
        temperature: float | None = None,
        on_event: EventSink | None = None,
    ) -> Completion:
        """Run the new user input as a turn on the conversation's thread (codex uses its own tools).

        The app-server's answer arrives whole here, so ``on_event`` gets it as one text delta.
        """
        thread = thread_of(messages)
        if thread is None:
            thread = await self.server.start_thread(model)
        elif self.engine.should_compress():
            await self.engine.compact_thread(thread, trigger="gateway")
        started = self.engine.native_compactions.get("gateway", 0)
        compacted_before, self._gateway_marked = started - self._gateway_marked, started
        text = pending_input(messages)
        if not text.strip():
            raise BadResponse("nothing new to send to the codex thread")
        outcome = await self.server.run_turn(thread, text, model=model)
        self.engine.record_turn(outcome)
        if not outcome.text.strip():
            raise BadResponse("the codex turn completed without an agent message")
        if on_event is not None:
            await on_event(TextDelta(outcome.text))
        record: dict[str, Any] = {"thread": thread, "turn": outcome.turn_id}
        if outcome.compactions or compacted_before:
            record["compactions"] = {"app_server": outcome.compactions, "gateway": compacted_before}
        return AppServerCompletion(
            text=outcome.text, usage=outcome.usage.as_usage(), thread=record, raw={"turn": asdict(outcome)}
        )
