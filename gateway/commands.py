"""Chat commands: ``/compress [focus]``, ``/model [name]``, ``/new`` (``/reset``), ``/usage``, ``/status``.

Each command runs inside the chat's turn (holding its lock), so it sees and changes the
session exactly like a message would, and its reply goes out like any other.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Awaitable, Callable

from agent.models import UnknownAlias, split_large_alias
from gateway import hygiene
from gateway.session_source import ChatHistory

if TYPE_CHECKING:
    from gateway.runner import ChatTurn

Command = Callable[["ChatTurn", str], Awaitable[str]]


def _percent(tokens: int, window: int) -> str:
    return f"{100 * tokens / window:.1f}%" if window else "?"


async def compress(turn: "ChatTurn", focus: str) -> str:
    """Compact now, favouring ``focus`` in the summary."""
    runner = turn.runner
    model = turn.meta.model or runner.agents.default_model
    if turn.meta.count < 2:
        return "Nothing to compress yet."
    engine = runner.agents.build_engine(model, turn.meta.engine_state, ChatHistory(runner.store, turn.chat, turn.session_id))
    before_tokens, before_count = turn.meta.tokens, turn.meta.count
    changed = await runner.compact(turn, engine, trigger="manual", force=True, focus=focus or None)
    if not changed:
        return "Nothing to compress: the conversation is already as small as compaction makes it."
    after = turn.meta
    stats = engine.last_compaction
    by = getattr(stats, "summarizer", "") or ""
    return (
        f"Compressed: {before_count} → {after.count} messages, {before_tokens:,} → {after.tokens:,} tokens"
        f" (summary by {by}). Everything folded away stays searchable."
    )


async def model(turn: "ChatTurn", name: str) -> str:
    """Show the model, or switch this chat to another one (a cold prompt cache: it costs more at first)."""
    runner = turn.runner
    current = turn.meta.model or runner.agents.default_model
    window = runner.agents.context_length(current)
    if not name:
        engine = runner.agents.build_engine(current, turn.meta.engine_state, ChatHistory(runner.store, turn.chat, turn.session_id))
        return (
            f"Model: {current} — window {window:,} tokens, compaction at {engine.threshold:.0%}"
            f" ({engine.threshold_tokens:,} tokens), hygiene at 85%."
        )
    try:
        split_large_alias(name)
    except UnknownAlias as error:
        return f"⚠️ {error}"
    await runner.store.update_meta(turn.chat, turn.session_id, lock=turn.lock, model=name)
    engine = runner.agents.build_engine(name, turn.meta.engine_state, ChatHistory(runner.store, turn.chat, turn.session_id))
    return (
        f"Switched {current} → {name} (window {runner.agents.context_length(name):,} tokens, compaction at"
        f" {engine.threshold:.0%}). ⚠️ The prompt cache belongs to the model: the next replies are read at full"
        " price until the new cache warms up."
    )


async def new(turn: "ChatTurn", _arg: str) -> str:
    """Start a fresh conversation; the old one stays stored and searchable by its session id."""
    old = turn.session_id
    sid = await turn.runner.store.new_session(turn.chat)
    await turn.runner.store.update_meta(turn.chat, sid, lock=turn.lock, last_entry_id=turn.entry_id,
                                        replied_entry_id=turn.entry_id)
    turn.session_id = sid
    return f"Started a new conversation (session {sid}). The previous one ({old}) is kept."


async def usage(turn: "ChatTurn", _arg: str) -> str:
    """Context size, compactions and token usage (cache reads and writes) of this conversation."""
    meta = turn.meta
    runner = turn.runner
    model = meta.model or runner.agents.default_model
    window = runner.agents.context_length(model)
    tokens, source = hygiene.estimate_session_tokens(meta)
    totals = meta.usage_totals
    lines = [
        f"Context: {tokens:,} / {window:,} tokens ({_percent(tokens, window)}; {source}), {meta.count} messages",
        f"Compactions: {meta.compaction_count}",
        f"Turns: {totals.get('turns', 0)}; prompt tokens {totals.get('prompt_tokens', 0):,},"
        f" completion tokens {totals.get('completion_tokens', 0):,}",
        f"Cache: read {totals.get('cache_read_tokens', 0):,} tokens, written {totals.get('cache_write_tokens', 0):,} tokens",
    ]
    return "\n".join(lines)


async def status(turn: "ChatTurn", _arg: str) -> str:
    """Where this chat stands and how the gateway is doing."""
    runner = turn.runner
    meta = turn.meta
    uptime = int(time.time() - runner.started_at)
    pending = await runner.inbox.pending(turn.chat)
    return "\n".join([
        f"Session {turn.session_id} ({'continues ' + meta.parent_session_id if meta.parent_session_id else 'root'})",
        f"Model {meta.model or runner.agents.default_model}",
        f"Messages {meta.count}, compactions {meta.compaction_count}, pending in inbox {max(0, pending - 1)}",
        f"Worker {runner.worker_id}, up {uptime // 3600}h{uptime % 3600 // 60:02d}m, chats running here {len(runner._busy)}",
    ])


COMMANDS: dict[str, Command] = {
    "compress": compress,
    "model": model,
    "new": new,
    "reset": new,
    "usage": usage,
    "status": status,
}


def parse(text: str) -> tuple[str, str] | None:
    """``("name", "argument")`` for a known command (``/cmd@botname arg`` too), else None."""
    if not text.startswith("/"):
        return None
    head, _, argument = text[1:].partition(" ")
    name = head.split("@", 1)[0].lower()
    return (name, argument.strip()) if name in COMMANDS else None


async def handle_command(turn: "ChatTurn") -> str | None:
    """Run the command in the turn's message; None when the message is not a command."""
    parsed = parse(turn.message.text.strip())
    if parsed is None:
        return None
    name, argument = parsed
    return await COMMANDS[name](turn, argument)
