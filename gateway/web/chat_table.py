"""The operator's list of every chat: one row per chat, sortable by any column, a page at a time.

Sorted by latest activity (the default) a page reads only its own chats: the index of chats is
ordered so. Any other order reads, for every chat, only what that column needs (the chats' totals
or their sessions' figures) in batches of pipelined round trips, then the page's rows whole
(``foldgate bench operator`` measures both with 5,000 chats).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.store import SessionStore
from gateway.store.activity import ActivityLog, ChatTotals
from gateway.worker.hygiene import estimate_session_tokens

#: Rows per page.
PER_PAGE = 50
#: Chats whose figures are read in one batch (two round trips) when every chat must be read.
BATCH = 1_000


@dataclass(frozen=True)
class ChatRow:
    """One chat: its current conversation's context and live messages, and what it archived and spent since
    it was recorded."""

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


def at_least_recorded(logged: int, in_session: int) -> int:
    """A count from the activity log, or the session's own where larger: a chat older than the log had
    compactions (and archived messages) the log never saw, which its session counted."""
    return max(logged, in_session)


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
#: What sorting by a column reads for every chat: (the chats' totals, their sessions' figures).
SORT_READS: dict[str, tuple[bool, bool]] = {
    "chat": (False, False),
    "context": (False, True),
    "messages": (False, True),
    "archived": (True, True),
    "compactions": (True, True),
    "tokens": (True, False),
    "cost": (True, False),
    "saved": (True, False),
    "errors": (True, False),
}


@dataclass(frozen=True)
class ChatPage:
    rows: list[ChatRow]
    total: int
    page: int
    pages: int
    sort: str
    descending: bool


async def _rows(
    activity: ActivityLog,
    store: SessionStore,
    window_of: Callable[[str | None], int],
    chats: Sequence[tuple[str, float]],
    *,
    totals: bool = True,
    figures: bool = True,
) -> list[ChatRow]:
    """Rows for ``chats``; what is not read (``totals`` or ``figures`` False) shows as zero."""
    names = [chat for chat, _ in chats]
    spent_of = await activity.totals(names) if totals else [ChatTotals()] * len(names)
    figures_of = await store.figures(names) if figures else [None] * len(names)
    rows = []
    for (chat, last), found, spent in zip(chats, figures_of, spent_of):
        meta = found.meta if found else None
        rows.append(
            ChatRow(
                chat=chat,
                session_id=meta.session_id if meta else "",
                context_tokens=estimate_session_tokens(meta)[0] if meta else 0,
                window=window_of(meta.model if meta else None),
                live=meta.count if meta else 0,
                archived=at_least_recorded(spent.archived, found.archived if found else 0),
                compactions=at_least_recorded(spent.compactions, meta.compaction_count if meta else 0),
                turns=spent.turns,
                tokens=spent.prompt_tokens + spent.completion_tokens,
                cost_usd=spent.cost_usd,
                saved_usd=spent.saved_usd,
                errors=spent.errors,
                last_activity=last,
            )
        )
    return rows


async def chat_page(
    activity: ActivityLog,
    store: SessionStore,
    window_of: Callable[[str | None], int],
    *,
    sort: str = "activity",
    descending: bool = True,
    page: int = 1,
    per_page: int = PER_PAGE,
) -> ChatPage:
    """Page ``page`` (from 1) of every chat, sorted by ``sort`` (a key of :data:`SORTS`).

    Only what the sort needs is read for every chat (the index, the totals or the sessions' figures);
    the page's own rows are then read whole.
    """
    if sort not in SORTS:
        sort = "activity"
    total = await activity.chat_count()
    pages = max(1, math.ceil(total / per_page))
    page = min(max(1, page), pages)
    offset = (page - 1) * per_page
    if sort == "activity":
        chats = await activity.chats(offset, per_page, newest_first=descending)
    else:
        everything = await activity.chats()
        totals, figures = SORT_READS[sort]
        keyed: list[ChatRow] = []
        for start in range(0, len(everything), BATCH):
            keyed += await _rows(
                activity, store, window_of, everything[start : start + BATCH], totals=totals, figures=figures
            )
        keyed.sort(key=SORTS[sort], reverse=descending)
        chats = [(row.chat, row.last_activity) for row in keyed[offset : offset + per_page]]
    return ChatPage(await _rows(activity, store, window_of, chats), total, page, pages, sort, descending)
