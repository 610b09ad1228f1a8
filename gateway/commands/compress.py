"""``/compress [focus]``: compact the chat's session now, or have the codex app-server compact its thread."""

from __future__ import annotations

from agent.codex_chat import CodexThreadEngine, thread_of
from agent.metering import BudgetExceeded
from gateway.commands.context import CommandContext
from gateway.events import CompressEvent
from gateway.worker.chat_turn import ChatTurn


async def compress(context: CommandContext, turn: ChatTurn, focus: str) -> str:
    """Compact now, favouring ``focus`` in the summary."""
    if turn.meta.count < 2:
        return "Nothing to compress yet."
    engine = context.engine(turn, context.model(turn))
    if isinstance(engine, CodexThreadEngine):
        return await _compress_codex_thread(context, turn, engine)
    before_tokens, before_count = turn.meta.tokens, turn.meta.count
    try:
        compacted = await context.compactions.compact(turn, engine, trigger="manual", force=True, focus=focus or None)
    except BudgetExceeded as over:
        return over.notice
    if compacted is None:
        return "Nothing to compress: the conversation is already as small as compaction makes it."
    after = turn.meta
    stats = engine.last_compaction
    by = stats.summarizer if stats is not None else ""
    return (
        f"Compressed: {before_count} → {after.count} messages, {before_tokens:,} → {after.tokens:,} tokens"
        f" (summary by {by}). Everything folded away stays searchable."
    )


async def _compress_codex_thread(context: CommandContext, turn: ChatTurn, engine: CodexThreadEngine) -> str:
    """Ask the codex app-server to compact the chat's thread, wait for it, and record the boundary.

    The transcript here is never rewritten on this route: the commit keeps every message
    where it is and only records that a compaction happened (count, reported size).
    """
    store = context.store
    messages = await store.active(turn.chat, turn.session_id)
    thread = thread_of(messages)
    if thread is None:
        return "Nothing to compress yet: this chat has no codex thread."
    done = await engine.compact_thread(thread, trigger="manual")
    await store.commit_compaction(
        turn.chat,
        turn.session_id,
        messages,
        lock=turn.lock,
        in_place=True,
        compaction_id=f"{turn.entry_id}:codex-thread",
        meta={
            "engine_state": engine.export_state(),
            "last_prompt_tokens": done.tokens_after or None,
            "tokens_at_report": turn.meta.tokens,
        },
    )
    turn.meta = await store.meta(turn.chat, turn.session_id)
    await context.events.emit(
        CompressEvent(
            platform=turn.message.platform,
            chat=turn.chat,
            session_id=turn.session_id,
            old_session_id="",
            in_place=True,
            compression_count=engine.compression_count,
            trigger="manual",
            tokens_before=done.tokens_before,
            tokens_after=done.tokens_after,
            summarizer="codex app-server",
        )
    )
    return (
        f"Compacted the codex thread: {done.tokens_before:,} → {done.tokens_after:,} tokens of context"
        " (the app-server's own compaction). The conversation here is unchanged."
    )
