"""``foldgate compact`` and ``foldgate search``: compaction and archive search from the shell.

``compact`` runs the configured context engine on a transcript file, with no gateway and no
Redis, and prints what it did as JSON — the quickest way to see what a compaction keeps.
``search`` looks through one chat's stored history (archive included) in the configured Redis.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from agent import json_codec
from agent.engine_registry import resolve_context_engine
from agent.messages import InvalidMessage, Message, validate_message
from agent.search import DEFAULT_HITS, SearchError
from agent.tokens import count_messages, count_text
from gateway.config import ConfigError, ModelSettings, Settings, load_settings
from gateway.startup_errors import exit_code_of


class TranscriptError(ValueError):
    """A transcript line that is not a message; names the file and line."""


def read_transcript(path: str | Path) -> list[Message]:
    """One OpenAI-format message per line; every message gets an ``_id`` (its line number) if it has none."""
    messages: list[Message] = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json_codec.loads(line)
        except ValueError as error:
            raise TranscriptError(f"{path}:{number}: {error}") from error
        if isinstance(record, dict) and "kind" in record and "role" not in record:
            raise TranscriptError(
                f"{path}:{number}: a replay fixture record, not a message: `foldgate replay"
                f" {path}` plays fixtures; compact reads one OpenAI-format message per line"
            )
        try:
            message = validate_message(record)
        except InvalidMessage as error:
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
    kwargs: dict[str, Any] = {
        "model": args.model or settings.model.name,
        "context_length": args.context_length,
        "settings": compression,
        "summarizer": builder.summarizer,
    }
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
        # A one-shot command: nothing else is waiting on the loop while the result is written.
        with open(args.output, "w", encoding="utf-8") as out:  # noqa: ASYNC230
            for message in compacted:
                out.write(json_codec.dumps_text(message) + "\n")
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


def context_length_range() -> tuple[int | None, int | None]:
    """The lowest and highest ``model.context_length`` config.yaml accepts (None: unbounded).

    Read from the config field's own constraints, so ``--context-length`` cannot drift from them.
    """
    low: int | None = None
    high: int | None = None
    for bound in ModelSettings.model_fields["context_length"].metadata:
        if getattr(bound, "ge", None) is not None:
            low = int(bound.ge)
        if getattr(bound, "gt", None) is not None:
            low = int(bound.gt) + 1
        if getattr(bound, "le", None) is not None:
            high = int(bound.le)
        if getattr(bound, "lt", None) is not None:
            high = int(bound.lt) - 1
    return low, high


def context_length_problem(value: int) -> str | None:
    """Why ``value`` is no context length config.yaml would accept, or None when it is one."""
    low, high = context_length_range()
    if (low is None or value >= low) and (high is None or value <= high):
        return None
    if low is not None and high is not None:
        allowed = f"from {low} to {high}"
    elif low is not None:
        allowed = f"at least {low}"
    else:
        allowed = f"at most {high}"
    return (
        f"--context-length {value} is out of range: it must be {allowed} tokens, as model.context_length in config.yaml"
    )


def compact_command(args: argparse.Namespace) -> int:
    problem = context_length_problem(args.context_length)
    if problem:
        print(f"foldgate compact: {problem}", file=sys.stderr)
        return 2
    try:
        settings = load_settings(args.config)
        result = asyncio.run(compact_file(settings, args))
    except (ConfigError, TranscriptError, OSError) as error:
        print(f"foldgate compact: {error}", file=sys.stderr)
        return 2
    print(json_codec.dumps_text(result, indent=True))
    return 0


class UnknownChat(LookupError):
    """``foldgate search`` was given a chat key nothing is stored under; the message shows the key's form."""


async def search_chat(settings: Settings, chat: str, query: str, limit: int) -> list[dict[str, Any]]:
    from gateway.run.build import meaning_search
    from gateway.server.lifecycle import connect_or_embed
    from gateway.session_source import ID_SEPARATOR, search_conversations
    from gateway.store import SessionStore

    redis, embedded = await connect_or_embed(
        settings.redis.url or None, settings.home_path, cluster=settings.redis.cluster
    )
    try:
        store = SessionStore(redis, settings.redis.key_prefix)
        sid = await store.stored_session(chat)
        if sid is None:  # a search never creates a chat, and a mistyped key should not read as "no matches"
            raise UnknownChat(
                f"nothing is stored for chat {chat!r} (under key prefix {settings.redis.key_prefix!r});"
                " chat keys look like local:terminal, tg:<chat id>, dc:<channel id>"
            )
        # With memory.embeddings on, by meaning too (the vectors the gateway keeps); keywords alone when it is away.
        hits = await search_conversations(store, chat, sid, query, limit, meaning=meaning_search(settings, store))
        # The id as session_fetch takes it: plain in the current session, "<session>:<id>" in others.
        return [
            {
                "id": h.message_id if h.session_id == sid else f"{h.session_id}{ID_SEPARATOR}{h.message_id}",
                "session": h.session_id,
                "role": h.role,
                "score": round(h.score, 2),
                "snippet": h.snippet,
                **{side: asdict(turn) for side, turn in (("before", h.before), ("after", h.after)) if turn},
            }
            for h in hits
        ]
    finally:
        await redis.aclose()
        if embedded:
            await embedded.stop()


def search_command(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
    except ConfigError as error:
        print(f"foldgate search: {error}", file=sys.stderr)
        return 2
    return exit_code_of("foldgate search", settings, lambda: _print_hits(settings, args))


def _print_hits(settings: Settings, args: argparse.Namespace) -> int:
    try:
        hits = asyncio.run(search_chat(settings, args.chat, args.query, args.limit or DEFAULT_HITS))
    except (SearchError, UnknownChat, OSError) as error:
        print(f"foldgate search: {error}", file=sys.stderr)
        return 2
    for hit in hits:  # the id as session_fetch takes it: plain in the current session, "<session>:<id>" in others
        print(f"[{hit['id']}] {hit['role']}, session {hit['session']} (score {hit['score']}): {hit['snippet'][:300]}")
        for side in ("before", "after"):  # the question a hit answers, the answer to one it asks
            if side in hit:
                turn = hit[side]
                print(f"    {side:<6} [{turn['id']}] {turn['role']}: {' '.join(turn['text'].split())[:200]}")
    if not hits:
        print("no matches")
    return 0
