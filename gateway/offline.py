"""``foldgate compact`` and ``foldgate search``: compaction and archive search from the shell.

``compact`` runs the configured context engine on a transcript file, with no gateway and no
Redis, and prints what it did as JSON — the quickest way to see what a compaction keeps.
``search`` looks through one chat's stored history (archive included) in the configured Redis.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from agent.context_engine import resolve_context_engine
from agent.messages import InvalidMessage, validate_message
from agent.search import SearchError, search_messages
from agent.tokens import count_messages, count_text
from gateway.config import ConfigError, Settings, load_settings


class TranscriptError(ValueError):
    """A transcript line that is not a message; names the file and line."""


def read_transcript(path: str | Path) -> list[dict[str, Any]]:
    """One OpenAI-format message per line; every message gets an ``_id`` (its line number) if it has none."""
    messages: list[dict[str, Any]] = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            message = validate_message(json.loads(line))
        except (ValueError, InvalidMessage) as error:
            raise TranscriptError(f"{path}:{number}: {error}") from error
        message.setdefault("_id", str(number))
        messages.append(message)
    return messages


async def compact_file(settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    from gateway.agents import AgentBuilder

    messages = read_transcript(args.input)
    compression = settings.compression
    if args.tail_mode:
        compression = compression.model_copy(update={"tail_mode": args.tail_mode})
    builder = AgentBuilder(settings)
    factory, warning = resolve_context_engine(settings.context.engine)
    if warning:
        print(f"foldgate compact: {warning}", file=sys.stderr)
    kwargs: dict[str, Any] = {"model": args.model or settings.model.name, "context_length": args.context_length,
                              "settings": compression, "summarizer": builder.summarizer}
    engine = factory(**kwargs)
    started = time.perf_counter()
    try:
        compacted = await engine.compress(messages, focus_topic=args.focus, force=True)
    finally:
        await builder.aclose()
    elapsed = time.perf_counter() - started
    stats = engine.last_compaction
    summary_tokens = sum(count_text(str(m.get("content") or "")) for m in compacted if m.get("_compressed_summary"))
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            for message in compacted:
                out.write(json.dumps(message, ensure_ascii=False) + "\n")
    return {
        "input": str(args.input),
        "messages_before": len(messages),
        "messages_after": len(compacted),
        "tokens_before": count_messages(messages),
        "tokens_after": count_messages(compacted),
        "summary_tokens": summary_tokens,
        "tail_mode": compression.tail_mode,
        "engine": engine.name,
        "summarizer": getattr(stats, "summarizer", "none"),
        "outcome": getattr(stats, "outcome", "unknown"),
        "summarizer_calls": getattr(stats, "calls", 0),
        "seconds": round(elapsed, 3),
        "output": args.output,
    }


def compact_command(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
        result = asyncio.run(compact_file(settings, args))
    except (ConfigError, TranscriptError, OSError) as error:
        print(f"foldgate compact: {error}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2))
    return 0


async def search_chat(settings: Settings, chat: str, query: str, limit: int) -> list[dict[str, Any]]:
    from gateway.redis_server import connect_or_embed
    from gateway.session_source import ChatHistory
    from gateway.store import SessionStore

    redis, embedded = await connect_or_embed(settings.redis.url or None, settings.home_path, cluster=settings.redis.cluster)
    try:
        store = SessionStore(redis, settings.redis.key_prefix)
        history = ChatHistory(store, chat, await store.current_session(chat))
        hits = search_messages(await history.all_messages(), query, limit=limit)
        return [{"id": h.message_id, "role": h.role, "score": round(h.score, 2), "snippet": h.snippet} for h in hits]
    finally:
        await redis.aclose()
        if embedded:
            await embedded.stop()


def search_command(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
        hits = asyncio.run(search_chat(settings, args.chat, args.query, args.limit))
    except (ConfigError, SearchError, OSError) as error:
        print(f"foldgate search: {error}", file=sys.stderr)
        return 2
    for hit in hits:
        print(f"[{hit['id']}] {hit['role']} (score {hit['score']}): {hit['snippet'][:300]}")
    if not hits:
        print("no matches")
    return 0
