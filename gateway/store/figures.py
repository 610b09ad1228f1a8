"""Many chats' current conversations in numbers, for the operator's list of chats.

The meta hash also holds the summary and the engine's state (kilobytes each), so the list reads
only the fields it shows: the session pointers in one pipelined round trip, then each session's
counters and archive length in a second. Both go through redis-py (a Cluster pipeline on a
Cluster), never the message path's channel, so a page listing thousands of chats does not queue
in front of a turn's commands.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gateway.store.keys import ChatKeys
from gateway.store.meta import SessionMeta, parse_meta
from gateway.store.routes import Routes

#: The meta fields the figures need (token estimate, counts, model, activity).
FIGURE_FIELDS = (
    "tokens",
    "count",
    "last_prompt_tokens",
    "tokens_at_report",
    "compaction_count",
    "model",
    "last_activity_at",
    "updated_at",
    "created_at",
)


@dataclass(frozen=True)
class ChatFigures:
    """A chat's current conversation: its session's counters (a partial meta) and how many messages
    its archive holds."""

    chat: str
    meta: SessionMeta
    archived: int


async def figures(routes: Routes, chats: Sequence[ChatKeys]) -> list[ChatFigures | None]:
    """The figures of each chat, in order; None for a chat with no session stored."""
    pointers = routes.redis.pipeline(transaction=False)
    for keys in chats:
        pointers.get(keys.session)
    sids = await pointers.execute()
    counters = routes.redis.pipeline(transaction=False)
    present = [(keys, str(sid)) for keys, sid in zip(chats, sids) if sid]
    for keys, sid in present:
        counters.hmget(keys.meta(sid), FIGURE_FIELDS)
        counters.llen(keys.archive(sid))
    replies = await counters.execute()
    found: dict[str, ChatFigures] = {}
    for index, (keys, sid) in enumerate(present):
        values, archived = replies[2 * index], replies[2 * index + 1]
        raw = {name: value for name, value in zip(FIGURE_FIELDS, values) if value is not None}
        found[keys.chat] = ChatFigures(keys.chat, parse_meta(sid, raw), int(archived or 0))
    return [found.get(keys.chat) for keys in chats]
