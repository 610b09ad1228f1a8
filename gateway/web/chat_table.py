"""The operator's list of every chat: one row per chat, sortable by any column, a page at a time.

Sorted by latest activity (the default) a page reads only its own chats: the index of chats is
ordered so. Any other order needs every chat's figures, read in batches of pipelined round trips
(``foldgate bench operator`` measures both with 5,000 chats).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.activity import ActivityLog, ChatTotals
from gateway.hygiene import estimate_session_tokens
from gateway.store import SessionStore

#: Rows per page.
PER_PAGE = 50
#: Chats whose figures are read in one batch (two round trips) when every chat must be read.
BATCH = 1_000


@dataclass(frozen=True)
class ChatRow:
    """One chat: its current conversation's context and messages, and what it spent since it was recorded."""

    chat: str
    session_id: str
    context_tokens: int
    window: int
    live: int
    archived: int
    compactions: int
    turns: int
    tokens: int
    cost_usd: float
    saved_usd: float
    errors: int
    last_activity: float

    @property
    def platform(self) -> str:
        return self.chat.partition(":")[0]

    @property
    def context_share(self) -> float:
        return self.context_tokens / self.window if self.window else 0.0


#: Column -> the value rows are sorted by.
SORTS: dict[str, Callable[[ChatRow], Any]] = {
    "activity": lambda row: row.last_activity,
    "chat": lambda row: row.chat,
    "context": lambda row: row.context_share,
    "messages": lambda row: row.live,
    "archived": lambda row: row.archived,
    "compactions": lambda row: row.compactions,
    "tokens": lambda row: row.tokens,
    "cost": lambda row: row.cost_usd,
    "saved": lambda row: row.saved_usd,
    "errors": lambda row: row.errors,
}


@dataclass(frozen=True)
class ChatPage:
    rows: list[ChatRow]
    total: int
    page: int
    pages: int
    sort: str
    descending: bool


async def _rows(activity: ActivityLog, store: SessionStore, window_of: Callable[[str | None], int],
                chats: Sequence[tuple[str, float]]) -> list[ChatRow]:
    names = [chat for chat, _ in chats]
    totals = await activity.totals(names)
    rows = []
    for (chat, last), figures, spent in zip(chats, await store.figures(names), totals):
        spent = spent or ChatTotals()
        meta = figures.meta if figures else None
        rows.append(ChatRow(
            chat=chat, session_id=meta.session_id if meta else "",
            context_tokens=estimate_session_tokens(meta)[0] if meta else 0,
            window=window_of(meta.model if meta else None), live=meta.count if meta else 0,
            archived=figures.archived if figures else 0,
            # a chat older than the activity log had compactions the log never saw: its session counted them
            compactions=max(spent.compactions, meta.compaction_count if meta else 0), turns=spent.turns,
            tokens=spent.prompt_tokens + spent.completion_tokens, cost_usd=spent.cost_usd, saved_usd=spent.saved_usd,
            errors=spent.errors, last_activity=last,
        ))
    return rows


async def chat_page(activity: ActivityLog, store: SessionStore, window_of: Callable[[str | None], int], *,
                    sort: str = "activity", descending: bool = True, page: int = 1,
                    per_page: int = PER_PAGE) -> ChatPage:
    """Page ``page`` (from 1) of every chat, sorted by ``sort`` (a key of :data:`SORTS`)."""
    if sort not in SORTS:
        sort = "activity"
    await activity.index_stored_chats(store)
    total = await activity.chat_count()
    pages = max(1, math.ceil(total / per_page))
    page = min(max(1, page), pages)
    offset = (page - 1) * per_page
    if sort == "activity":
        chats = await activity.chats(offset, per_page, newest_first=descending)
        return ChatPage(await _rows(activity, store, window_of, chats), total, page, pages, sort, descending)
    everything = await activity.chats()
    rows: list[ChatRow] = []
    for start in range(0, len(everything), BATCH):
        rows += await _rows(activity, store, window_of, everything[start:start + BATCH])
    rows.sort(key=SORTS[sort], reverse=descending)
    return ChatPage(rows[offset:offset + per_page], total, page, pages, sort, descending)
