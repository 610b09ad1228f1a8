"""Chat commands: ``/compress [focus]``, ``/model [name]``, ``/new`` (``/reset``), ``/usage``, ``/status``.

Each command runs inside the chat's turn (holding its lock), so it sees and changes the
session exactly like a message would, and its reply goes out like any other.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from agent import pricing
from agent.llm.codex_app_server import CodexThreadEngine, thread_of
from agent.models import UnknownAlias, split_large_alias
from gateway import hygiene
from gateway.events import CompressEvent
from gateway.session_source import ChatHistory

if TYPE_CHECKING:
    from agent.context_engine import ContextEngine
    from gateway.runner import ChatTurn

Command = Callable[["ChatTurn", str], Awaitable[str]]


def _engine(turn: "ChatTurn", model: str) -> "ContextEngine":
    """The chat's context engine for ``model``, with its saved state and its archive."""
    runner = turn.runner
    return runner.agents.build_engine(model, turn.meta.engine_state, ChatHistory(runner.store, turn.chat, turn.session_id))


def _percent(tokens: int, window: int) -> str:
    return f"{100 * tokens / window:.1f}%" if window else "?"


async def compress(turn: "ChatTurn", focus: str) -> str:
    """Compact now, favouring ``focus`` in the summary."""
    runner = turn.runner
    model = turn.meta.model or runner.agents.default_model
    if turn.meta.count < 2:
        return "Nothing to compress yet."
    engine = _engine(turn, model)
    if isinstance(engine, CodexThreadEngine):
        return await _compress_codex_thread(turn, engine)
    before_tokens, before_count = turn.meta.tokens, turn.meta.count
    compacted = await runner.compact(turn, engine, trigger="manual", force=True, focus=focus or None)
    if compacted is None:
        return "Nothing to compress: the conversation is already as small as compaction makes it."
    after = turn.meta
    stats = engine.last_compaction
    by = getattr(stats, "summarizer", "") or ""
    return (
        f"Compressed: {before_count} → {after.count} messages, {before_tokens:,} → {after.tokens:,} tokens"
        f" (summary by {by}). Everything folded away stays searchable."
    )


async def _compress_codex_thread(turn: "ChatTurn", engine: CodexThreadEngine) -> str:
    """S7.1: ask the app-server to compact the chat's thread, wait for it, and record the boundary.

    The transcript here is never rewritten on this route: the commit keeps every message
    where it is and only records that a compaction happened (count, reported size).
    """
    runner = turn.runner
    messages = await runner.store.active(turn.chat, turn.session_id)
    thread = thread_of(messages)
    if thread is None:
        return "Nothing to compress yet: this chat has no codex thread."
    done = await engine.compact_thread(thread, trigger="manual")
    await runner.store.commit_compaction(
        turn.chat, turn.session_id, messages, lock=turn.lock, in_place=True,
        compaction_id=f"{turn.entry_id}:codex-thread",
        meta={"engine_state": engine.export_state(), "last_prompt_tokens": done.tokens_after or None,
              "tokens_at_report": turn.meta.tokens},
    )
    turn.meta = await runner.store.meta(turn.chat, turn.session_id)
    await runner.events.emit(CompressEvent(
        platform=turn.message.platform, chat=turn.chat, session_id=turn.session_id, old_session_id="", in_place=True,
        compression_count=engine.compression_count, trigger="manual", tokens_before=done.tokens_before,
        tokens_after=done.tokens_after, summarizer="codex app-server",
    ))
    return (
        f"Compacted the codex thread: {done.tokens_before:,} → {done.tokens_after:,} tokens of context"
        " (the app-server's own compaction). The conversation here is unchanged."
    )


def _cold_cache_warning(runner: object, tokens: int, new_model: str) -> str:
    """What a switch costs: the provider's cache is per model, so the next request reads everything uncached."""
    text = f" ⚠️ The prompt cache belongs to the model: the next request re-reads this conversation's {tokens:,} tokens uncached"
    price = pricing.price_for(new_model)
    if price is not None and tokens:
        full = pricing.cost({"prompt_tokens": tokens}, new_model)
        text += f" (≈{full} at {new_model}'s input price)"
    plan = getattr(runner, "caching_plan", None)
    if callable(plan) and plan(new_model).enabled:
        text += " and writes a new cache"
    return text + "; later replies are cheap again once it is warm."


async def model(turn: "ChatTurn", name: str) -> str:
    """Show the model, or switch this chat to another one (a cold prompt cache: it costs more at first)."""
    runner = turn.runner
    current = turn.meta.model or runner.agents.default_model
    window = runner.agents.context_length(current)
    if not name:
        engine = _engine(turn, current)
        return (
            f"Model: {current} — window {window:,} tokens, compaction at {engine.threshold:.0%}"
            f" ({engine.threshold_tokens:,} tokens), hygiene at 85%."
        )
    try:
        split_large_alias(name)
    except UnknownAlias as error:
        return f"⚠️ {error}"
    if name == current:
        return f"Already on {current}."
    await runner.store.update_meta(turn.chat, turn.session_id, lock=turn.lock, model=name)
    engine = _engine(turn, name)
    tokens, _source = hygiene.estimate_session_tokens(turn.meta)
    return (
        f"Switched {current} → {name} (window {runner.agents.context_length(name):,} tokens, compaction at"
        f" {engine.threshold:.0%})." + _cold_cache_warning(runner.agents, tokens, name)
    )


async def new(turn: "ChatTurn", _arg: str) -> str:
    """Start a fresh conversation; the old one stays stored and searchable by its session id."""
    old = turn.session_id
    sid = await turn.runner.store.new_session(turn.chat, lock=turn.lock)
    turn.session_id = sid
    return f"Started a new conversation (session {sid}). The previous one ({old}) is kept."


#: Routes whose tokens are not billed per token (a subscription, or nothing at all).
UNBILLED_PROVIDERS = {"local": "the local demo model is free", "openai-codex": "a ChatGPT subscription, not per-token billing"}


def _money_line(runner: object, model: str, totals: dict) -> str:
    """Money spent on the session and what prompt caching saved (B5)."""
    provider = getattr(runner, "provider", None)
    if provider in UNBILLED_PROVIDERS:
        return f"Cost: not billed per token ({UNBILLED_PROVIDERS[provider]})"
    if pricing.price_for(model) is None:
        return f"Cost: no price known for {model}"
    settings = getattr(runner, "settings", None)
    ttl = settings.prompt_caching.cache_ttl if settings is not None else "5m"
    spent = pricing.cost(totals, model, ttl)
    without = pricing.uncached_cost(totals, model)
    saved = without - spent
    share = f" ({saved.ratio(without):.0%} less than without caching)" if saved.amount > 0 else ""
    return f"Cost: {spent} spent, priced as {pricing.price_key(model)}; caching saved {saved}{share}"


async def usage(turn: "ChatTurn", _arg: str) -> str:
    """Context size, compactions, token usage (cache reads and writes), money spent and saved by caching."""
    meta = turn.meta
    runner = turn.runner
    model = meta.model or runner.agents.default_model
    window = runner.agents.context_length(model)
    tokens, source = hygiene.estimate_session_tokens(meta)
    totals = meta.usage_totals
    compactions = f"Compactions: {meta.compaction_count}"
    native = (meta.engine_state or {}).get("native_compactions")
    if native:
        compactions += (f" (codex thread: {native.get('manual', 0)} by /compress, {native.get('gateway', 0)} at foldgate's"
                        f" threshold, {native.get('app_server', 0)} by the app-server itself)")
    lines = [
        f"Context: {tokens:,} / {window:,} tokens ({_percent(tokens, window)}; {source}), {meta.count} messages",
        compactions,
        f"Turns: {totals.get('turns', 0)}; prompt tokens {totals.get('prompt_tokens', 0):,},"
        f" completion tokens {totals.get('completion_tokens', 0):,}",
        f"Cache: read {totals.get('cache_read_tokens', 0):,} tokens, written {totals.get('cache_write_tokens', 0):,} tokens",
        _money_line(runner.agents, model, totals),
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


async def stop(turn: "ChatTurn", _arg: str) -> str:
    """End the reply being written. The stop itself happens as the message arrives (the running turn
    honours it and clears it); by the time this command's own turn comes, only a leftover is cleared."""
    if await turn.runner.inbox.clear_stop(turn.chat):
        return "Nothing was being written; there is nothing to stop."
    return "⏹ Stopped. What was written so far is kept; your next message is answered as usual."


COMMANDS: dict[str, Command] = {
    "compress": compress,
    "model": model,
    "new": new,
    "reset": new,
    "usage": usage,
    "status": status,
    "stop": stop,
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
