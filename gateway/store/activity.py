"""What happened in each chat, kept in Redis for the operator's view.

The process that runs a turn records its events here, so the operator view of any process
shows every chat, whichever process answered it::

    {prefix}:{<chat>}:activity   stream: the chat's turns, compactions and errors, the newest ~1,000
    {prefix}:{<chat>}:totals     hash: what the chat has spent since it was first recorded
    {prefix}:chats               sorted set: every chat that sent a message, by its latest message (the intake's)

Recording observes a commit; it is not part of it. It happens right after the commit it
describes, so a process that dies in between leaves that one event out of the log (the
transcript, which the store commits, is never affected), and a failure to record is logged,
never raised into a turn. A compaction's archived ids are kept as runs (``12-480,483``):
a compaction of a long night moves hundreds of consecutive ids.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from redis.asyncio import Redis
from redis.exceptions import RedisError

from agent import json_codec
from gateway.events import EVENT_JSON, FAILED_CALLS, CompressEvent, Event, MemoryWriteEvent, ToolCallEvent, TurnEvent
from gateway.store import ChatKeys, SessionStore, chat_index_key
from gateway.store.channel import RedisChannel
from gateway.store.keys import chat_index_backfilled_key, chat_of_session_key, session_keys_pattern
from gateway.store.meta import hash_float, hash_int

log = logging.getLogger(__name__)

#: Events kept per chat (Redis trims the stream to about this many, oldest first); ≈ 300 bytes each.
ACTIVITY_MAX_ENTRIES = 1_000


def id_ranges(ids: Sequence[str]) -> str:
    """``["12", "13", "14", "20", "x"]`` → ``"12-14,20,x"``: consecutive numeric ids as runs."""
    parts: list[str] = []
    run: list[int] = []
    for message_id in ids:
        if message_id.isdigit() and run and int(message_id) == run[-1] + 1:
            run.append(int(message_id))
            continue
        if run:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        if message_id.isdigit():
            run = [int(message_id)]
        else:
            parts.append(message_id)
    if run:
        parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(parts)


def expand_ranges(text: str) -> list[str]:
    """The ids :func:`id_ranges` wrote, in order."""
    ids: list[str] = []
    for part in filter(None, text.split(",")):
        first, dash, last = part.partition("-")
        if dash and first.isdigit() and last.isdigit():
            ids += [str(number) for number in range(int(first), int(last) + 1)]
        else:
            ids.append(part)
    return ids


def _stored(event: Event) -> str:
    data = event.model_dump(exclude={"archived_ids"})
    if isinstance(event, CompressEvent):
        data["archived"] = id_ranges(event.archived_ids)
    return json_codec.dumps_text(data)


def _loaded(text: str) -> Event:
    data = json_codec.loads(text)
    if isinstance(data, dict) and "archived" in data:
        data["archived_ids"] = expand_ranges(str(data.pop("archived")))
    return EVENT_JSON.validate_python(data)


def _increments(event: Event) -> Sequence[tuple[str, str, int | float]]:
    """(command, field, amount) for the chat's totals."""
    if isinstance(event, TurnEvent):
        steps: list[tuple[str, str, int | float]] = [
            ("HINCRBY", "turns", 1),
            ("HINCRBY", "prompt_tokens", event.prompt_tokens),
            ("HINCRBY", "completion_tokens", event.completion_tokens),
            ("HINCRBY", "cache_read_tokens", event.cache_read_tokens),
            ("HINCRBY", "cache_write_tokens", event.cache_write_tokens),
            ("HINCRBYFLOAT", "cost_usd", event.cost_usd),
            ("HINCRBYFLOAT", "saved_usd", event.saved_usd),
        ]
        return steps + ([("HINCRBY", "errors", 1)] if event.error else [])
    if isinstance(event, CompressEvent):
        return [
            ("HINCRBY", "compactions", 1),
            ("HINCRBY", f"compactions_{event.trigger}", 1),
            ("HINCRBY", "archived", len(event.archived_ids)),
        ]
    if isinstance(event, ToolCallEvent):
        return [("HINCRBY", "tool_calls", 1)] + (
            [("HINCRBY", "tool_errors", 1)] if event.outcome in FAILED_CALLS else []
        )
    if isinstance(event, MemoryWriteEvent):
        return [("HINCRBY", f"memory_{event.source}", event.entries)]
    return [("HINCRBY", "errors", 1)]


@dataclass(frozen=True)
class ChatTotals:
    """What a chat has spent and undergone since its activity was first recorded."""

    turns: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0
    saved_usd: float = 0.0
    compactions: int = 0
    #: Messages its compactions archived, in any of its conversations.
    archived: int = 0
    errors: int = 0
    by_trigger: dict[str, int] = field(default_factory=dict)
    #: Calls of MCP servers' tools, and those that did not end well (an error, a timeout, the server away).
    tool_calls: int = 0
    tool_errors: int = 0

    @classmethod
    def of(cls, raw: dict[str, Any]) -> ChatTotals:
        def count(name: str) -> int:
            return hash_int(raw, name) or 0

        def dollars(name: str) -> float:
            return hash_float(raw, name) or 0.0

        triggers = {name.removeprefix("compactions_"): count(name) for name in raw if name.startswith("compactions_")}
        return cls(
            count("turns"),
            count("prompt_tokens"),
            count("completion_tokens"),
            count("cache_read_tokens"),
            count("cache_write_tokens"),
            dollars("cost_usd"),
            dollars("saved_usd"),
            count("compactions"),
            count("archived"),
            count("errors"),
            triggers,
            tool_calls=count("tool_calls"),
            tool_errors=count("tool_errors"),
        )


class ActivityLog:
    """Records gateway events per chat (subscribe :meth:`record` to the event bus) and reads them back."""

    def __init__(
        self, redis: Redis, channel: RedisChannel, prefix: str, *, max_entries: int = ACTIVITY_MAX_ENTRIES
    ) -> None:
        self.redis = redis
        self.channel = channel
        self.prefix = prefix
        self.index_key = chat_index_key(prefix)
        self.max_entries = max_entries

    def _keys(self, chat: str) -> ChatKeys:
        return ChatKeys(self.prefix, chat)

    async def record(self, event: Event) -> None:
        """Append the event to its chat's stream and add it to the chat's totals, in one round trip (an event of
        no chat, an operator's change to someone's memory, is counted by the metrics alone)."""
        if not event.chat:
            return
        keys = self._keys(event.chat)
        commands: list[tuple[Any, ...]] = [  # the chat's place in the index is the intake's to keep
            ("XADD", keys.activity, "MAXLEN", "~", self.max_entries, "*", "e", _stored(event)),
            *((command, keys.totals, name, amount) for command, name, amount in _increments(event)),
        ]
        try:
            await self.channel.call_in_order(*commands)
        except (RedisError, OSError) as error:  # an observer's write: the turn it describes stands
            log.warning("%s: could not record %s in the activity log: %s", event.chat, event.name, error)

    async def history(self, chat: str, limit: int = ACTIVITY_MAX_ENTRIES) -> list[Event]:
        """The chat's newest ``limit`` events, oldest first; an unreadable entry is skipped."""
        # The client decodes replies (decode_responses=True): ids and fields are str.
        raw = await self.redis.xrevrange(self._keys(chat).activity, count=limit)
        entries = cast("list[tuple[str, dict[str, str]]]", raw)
        events: list[Event] = []
        for _entry_id, fields in reversed(entries):
            try:
                events.append(_loaded(fields["e"]))
            except (KeyError, ValueError) as error:
                log.warning("%s: skipping an unreadable activity entry: %s", chat, error)
        return events

    async def totals(self, chats: Sequence[str]) -> list[ChatTotals]:
        """Each chat's totals, in order, in one pipelined round trip."""
        pipeline = self.redis.pipeline(transaction=False)
        for chat in chats:
            pipeline.hgetall(self._keys(chat).totals)
        return [ChatTotals.of(raw or {}) for raw in await pipeline.execute()]

    async def chat_count(self) -> int:
        return int(await self.redis.zcard(self.index_key))

    async def chats(
        self, offset: int = 0, limit: int | None = None, *, newest_first: bool = True
    ) -> list[tuple[str, float]]:
        """Chats with their latest activity, the most recent first (``limit`` None: all of them)."""
        end = -1 if limit is None else offset + limit - 1
        read = self.redis.zrevrange if newest_first else self.redis.zrange
        # With scores, every member comes back as a (member, score) pair.
        pairs = cast("list[tuple[str, float]]", await read(self.index_key, offset, end, withscores=True))
        return [(str(chat), float(score)) for chat, score in pairs]

    async def index_stored_chats(self, store: SessionStore) -> int:
        """Add the chats stored before the index existed (found by SCAN, once per Redis); how many."""
        marker = chat_index_backfilled_key(self.prefix)
        if await self.redis.exists(marker):
            return 0
        found = [
            chat
            async for key in self.redis.scan_iter(match=session_keys_pattern(self.prefix), count=1000)
            if (chat := chat_of_session_key(self.prefix, str(key))) is not None
        ]
        added = 0
        for start in range(0, len(found), 500):
            batch = found[start : start + 500]
            scores: dict[str, float] = {}
            for figures in await store.figures(batch):
                if figures is not None:
                    meta = figures.meta
                    scores[figures.chat] = meta.last_activity_at or meta.updated_at or meta.created_at
            if scores:
                # Without INCR, ZADD answers how many members it added.
                added += int(cast(int, await self.redis.zadd(self.index_key, scores, nx=True)))
        await self.redis.set(marker, "1")
        return added
