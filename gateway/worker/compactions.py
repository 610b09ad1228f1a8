"""Compaction outside the agent's loop: after an idle pause, hygiene at 85% and ``/compress``, each committed
and announced.

The agent compacts inside its own loop at 50%; these run before it sees a message, so a
session that grew past the window while nobody answered (an overnight backlog, a model
switched to a smaller window) never reaches the provider too long. Every compaction is
committed fenced by the chat's lock and announced as a ``session:compress`` event.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from agent.context_engine import CompactionStats, ContextEngine
from agent.loop import StopWaiter, unless_stopped
from agent.messages import Message, is_summary
from agent.settings import CompressionSettings
from agent.tokens import count_message
from gateway.events import CompressEvent, EventBus, Trigger
from gateway.memory.folds import FoldMemory
from gateway.memory.scopes import scope_of
from gateway.store import CompactionCommit, SessionStore
from gateway.worker import hygiene
from gateway.worker.chat_turn import ChatTurn

log = logging.getLogger(__name__)


class Compactions:
    """Runs and commits the gateway's own compactions."""

    def __init__(
        self, store: SessionStore, events: EventBus, compression: CompressionSettings, folds: FoldMemory
    ) -> None:
        self.store = store
        self.events = events
        self.compression = compression
        #: What each compaction keeps about the people who wrote what it folds, committed with it.
        self.folds = folds

    def memory_fields(
        self, turn: ChatTurn, before: list[Message], after: list[Message], unstored: list[Message]
    ) -> dict[str, Any]:
        """The meta fields a compaction commit of ``turn``'s session writes for people's memory."""
        return self.folds.commit_fields(
            turn.meta, before, after, unstored, chat=turn.chat, scope=scope_of(turn.message)
        )

    async def publish(self, turn: ChatTurn) -> None:
        """Add what the session's compactions kept about people to their memory (see :mod:`gateway.memory.folds`),
        and read the meta again when there was any."""
        if turn.meta.memory_pending:
            await self.folds.publish(turn.chat, turn.session_id, turn.lock, turn.message.platform)
            turn.meta = await self.store.meta(turn.chat, turn.session_id)

    async def before_turn(
        self,
        turn: ChatTurn,
        engine: ContextEngine,
        context_length: int,
        history: list[Message],
        *,
        pending_tokens: int = 0,
        until_stopped: StopWaiter | None = None,
    ) -> list[Message] | None:
        """Idle compaction, then hygiene, before the agent sees the message; the compacted transcript when
        either ran, else None. ``pending_tokens`` is what the turn's request adds to the session (its
        messages and tool schemas): hygiene weighs the request as a whole. A ``/stop`` while a summary is
        being written (``until_stopped``) raises :class:`~agent.loop.TurnStopped` and commits nothing."""
        meta = turn.meta
        idle = time.time() - meta.last_activity_at if meta.last_activity_at else 0.0
        tokens = hygiene.estimate_session_tokens(meta)[0]
        if meta.count >= hygiene.MIN_MESSAGES and engine.should_idle_compact(idle, tokens):
            compacted = await self.compact(
                turn, engine, trigger="idle", force=False, messages=history, until_stopped=until_stopped
            )
            if compacted is not None:
                return compacted
        decision = hygiene.decide(meta, context_length, enabled=self.compression.enabled, pending_tokens=pending_tokens)
        if not decision.fire:
            return None
        log.info("%s: hygiene: %s", turn.chat, decision.reason)
        compacted = await self.compact(
            turn,
            engine,
            trigger="hygiene",
            force=True,
            tokens=decision.tokens,
            messages=history,
            until_stopped=until_stopped,
        )
        if compacted is None:
            log.warning("%s: hygiene could not shrink the session (%s)", turn.chat, decision.reason)
        return compacted

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
        until_stopped: StopWaiter | None = None,
    ) -> list[Message] | None:
        """Compact the chat's session now and commit it; the new live transcript, or None when unchanged.

        ``messages`` is the live transcript when the caller has just read it (saves reading it again). A stop
        found by ``until_stopped`` ends the compaction before its commit (never during it) with TurnStopped.
        """
        if messages is None:
            messages = await self.store.active(turn.chat, turn.session_id)
        work = engine.compress(messages, current_tokens=tokens, focus_topic=focus, force=force)
        compacted = await (work if until_stopped is None else unless_stopped(work, until_stopped))
        if len(compacted) == len(messages) and all(a is b for a, b in zip(compacted, messages)):
            return None
        after = sum(count_message(m) for m in compacted)
        commit = await self.store.commit_compaction(
            turn.chat,
            turn.session_id,
            compacted,
            lock=turn.lock,
            in_place=self.compression.in_place,
            compaction_id=f"{turn.entry_id}:{trigger}",
            meta={"engine_state": engine.export_state(), **self.memory_fields(turn, messages, compacted, [])},
        )
        turn.session_id = commit.session_id
        if commit.replayed:  # applied by an earlier call: the session as stored is that call's result
            turn.meta = await self.store.meta(turn.chat, commit.session_id)
            await self.publish(turn)
            return await self.store.active(turn.chat, commit.session_id)
        before = hygiene.estimate_session_tokens(turn.meta)[0]
        await self.announce(turn, engine, commit, compacted, trigger, before, after)
        turn.meta = await self.store.meta(turn.chat, commit.session_id)
        await self.publish(turn)
        return compacted  # the store gave its new messages their ids: it is the session as stored

    async def announce(
        self,
        turn: ChatTurn,
        engine: ContextEngine,
        commit: CompactionCommit,
        compacted: list[Message],
        trigger: Trigger,
        before: int,
        after: int,
    ) -> None:
        """The ``session:compress`` event of ``commit`` (into ``turn.session_id``), whose new live list is
        ``compacted``."""
        # A plugin engine may keep its statistics as a mapping.
        stats: CompactionStats | Mapping[str, Any] = engine.last_compaction or {}
        summarizer = stats.get("summarizer") if isinstance(stats, Mapping) else getattr(stats, "summarizer", "")
        summary = next((m for m in reversed(compacted) if is_summary(m)), None)
        await self.events.emit(
            CompressEvent(
                platform=turn.message.platform,
                chat=turn.chat,
                session_id=turn.session_id,
                old_session_id=commit.old_session_id,
                in_place=not commit.old_session_id,
                compression_count=engine.compression_count,
                trigger=trigger,
                tokens_before=before,
                tokens_after=after,
                summarizer=str(summarizer or ""),
                summary_id=str(summary.get("_id", "")) if summary else "",
                archived_ids=list(commit.archived_ids),
            )
        )
