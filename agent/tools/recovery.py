"""The recovery tools every session has: ``session_search`` and ``session_fetch``.

They are how the model gets back what compaction folded away: every original message stays in the
session's archive with its id, and summaries and stubs cite those ids. ``session_fetch`` of a photo
gives the photo back (as the result's items), of a document or voice message its text.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Generic, Protocol, TypeVar

from agent import json_codec
from agent.messages import Message, carried_images, stand_in_lines, tool_names_by_call_id
from agent.search import DEFAULT_HITS, SearchError, SearchHit, search_messages
from agent.search_answers import MEANING_DEPTH
from agent.search_corpus import SearchCorpus
from agent.search_query import parse_regex
from agent.tokens import content_text
from agent.tools.recovery_schema import (
    CHAT_SEPARATOR,
    FETCH_DESCRIPTION,
    FETCH_PARAMETERS,
    MAX_SEARCH_HITS,
    MY_CHATS,
    SCOPED_FETCH_DESCRIPTION,
    SCOPED_SEARCH_DESCRIPTION,
    SCOPED_SEARCH_PARAMETERS,
    SEARCH_DESCRIPTION,
    SEARCH_PARAMETERS,
    THIS_CHAT,
)
from agent.tools.registry import Tool, ToolOutput

logger = logging.getLogger(__name__)
T = TypeVar("T")

#: A hit's snippet and each of its neighbours, in characters: six hits stay near 10K characters, what four
#: 2,500-character snippets took before neighbours came with them. The same for every caller, so the proximity
#: window (a share of the snippet) and with it the ranking are the same in the tool, the CLI and the web chat.
SEARCH_SNIPPET_CHARS = 1_000
SEARCH_NEIGHBOUR_CHARS = 400
#: Longest tool result text handed back to the model from one retrieval call.
MAX_FETCH_CHARS = 20_000
#: The recovery tools: their own calls and results are echoes of earlier searches, never what is searched for.
RECOVERY_TOOL_NAMES = frozenset({"session_search", "session_fetch"})


def searchable(messages: Sequence[Message]) -> list[Message]:
    """``messages`` without the recovery tools' own traffic: a search for "login timeout" would otherwise
    find every earlier ``session_search(query="login timeout")`` and its results before the message
    that holds the answer."""
    names = tool_names_by_call_id(messages)
    kept = []
    for message in messages:
        calls = message.get("tool_calls") or ()
        if (
            calls
            and not content_text(message.get("content")).strip()
            and all(
                isinstance(call, Mapping) and (call.get("function") or {}).get("name") in RECOVERY_TOOL_NAMES
                for call in calls
            )
        ):
            continue
        if message.get("role") == "tool" and names.get(str(message.get("tool_call_id"))) in RECOVERY_TOOL_NAMES:
            continue
        kept.append(message)
    return kept


@dataclass(frozen=True)
class SearchPiece:
    """Consecutive messages of a chat's history made ready for searching once: what :func:`searchable` keeps of
    them (reading tool names from these messages alone), its corpus, the ids of the calls they make (and of
    those whose last call is a recovery tool's), and the call ids of tool results whose call they do not hold.
    A source that keeps pieces of an archive between searches (:meth:`PreparedSource.search_pieces`) pays
    for each message once, not on every search."""

    messages: list[Message]
    corpus: SearchCorpus
    calls: frozenset[str]
    recovery_calls: frozenset[str]
    answered_elsewhere: frozenset[str]

    @classmethod
    def of(cls, messages: Sequence[Message]) -> SearchPiece:
        kept = searchable(messages)
        names = tool_names_by_call_id(messages)
        results = {str(m.get("tool_call_id")) for m in messages if m.get("role") == "tool"}
        return cls(
            kept,
            SearchCorpus.build(kept),
            frozenset(names),
            frozenset(call_id for call_id, name in names.items() if name in RECOVERY_TOOL_NAMES),
            frozenset(results - names.keys()),
        )

    def extended(self, newer: Sequence[Message]) -> SearchPiece | None:
        """This piece followed by ``newer``, as one; None where that is not this piece's kept messages followed
        by what ``newer`` keeps (a call id of one made or answered in the other)."""
        tail = SearchPiece.of(newer)
        if _clash([self, tail]):
            return None
        return SearchPiece(
            self.messages + tail.messages,
            self.corpus.extended(tail.messages),
            self.calls | tail.calls,
            self.recovery_calls | tail.recovery_calls,
            (self.answered_elsewhere - tail.calls) | (tail.answered_elsewhere - self.calls),
        )

    @property
    def chars(self) -> int:
        """How much it holds, in characters of search text (what a cache of pieces is bounded by)."""
        return self.corpus.chars


def _clash(pieces: Sequence[SearchPiece]) -> bool:
    """Whether a call id is made in two of the pieces, or a recovery call's result sits in another piece."""
    calls: set[str] = set()
    recovery: set[str] = set()
    for piece in pieces:
        if not calls.isdisjoint(piece.calls):
            return True
        calls.update(piece.calls)
        recovery.update(piece.recovery_calls)
    return bool(recovery) and any(not recovery.isdisjoint(piece.answered_elsewhere) for piece in pieces)


def joined_pieces(pieces: Sequence[SearchPiece]) -> tuple[list[Message], SearchCorpus] | None:
    """``searchable`` of the pieces' messages one after the other, and its corpus; None where that could differ
    from joining what each piece keeps (a call id made in two pieces, or a result in one piece of a recovery
    call in another): :func:`searchable` reads tool names across the whole history."""
    if _clash(pieces):
        return None
    messages = [message for piece in pieces for message in piece.messages]
    return messages, SearchCorpus.joined([piece.corpus for piece in pieces])


@dataclass(frozen=True)
class KeptPart:
    """Stored messages read before and kept ready for searching: their plain ids (and whether no two are the
    same) and their piece."""

    ids: frozenset[str]
    unique: bool
    piece: SearchPiece

    @classmethod
    def of(cls, messages: Sequence[Message], labelled: Sequence[Message]) -> KeptPart:
        """``messages`` kept, searched as ``labelled`` (the same messages as a source hands them out)."""
        plain = [str(message.get("_id")) for message in messages]
        return cls(frozenset(plain), len(set(plain)) == len(plain), SearchPiece.of(labelled))

    def extended(self, newer: Sequence[Message], labelled: Sequence[Message]) -> KeptPart | None:
        """This part followed by ``newer`` (searched as ``labelled``); None as :meth:`SearchPiece.extended`."""
        piece = self.piece.extended(labelled)
        if piece is None:
            return None
        added = [str(message.get("_id")) for message in newer]
        unique = self.unique and len(set(added)) == len(added) and self.ids.isdisjoint(added)
        return KeptPart(self.ids.union(added), unique, piece)


def conversation_pieces(
    parts: Sequence[KeptPart | Sequence[Message]], label: Callable[[Sequence[Message]], list[Message]]
) -> list[SearchPiece] | None:
    """One conversation's messages as pieces, from parts read in order, some kept from earlier searches and
    the others (live lists) read now and labelled by ``label``: each message id once, where it first occurs,
    as it last occurs (the live lists of a rotated conversation repeat the messages the next session kept).
    None where a kept part holds an id twice or one a live list holds: that would change a kept piece."""
    kept = [part for part in parts if isinstance(part, KeptPart)]
    latest: dict[str, Message] = {}
    for part in parts:
        if not isinstance(part, KeptPart):
            latest.update((str(message.get("_id")), message) for message in part)
    seen: set[str] = set()
    for part in kept:
        if not part.unique or not seen.isdisjoint(part.ids) or not part.ids.isdisjoint(latest):
            return None
        if len(kept) > 1:
            seen.update(part.ids)
    pieces: list[SearchPiece] = []
    for part in parts:
        if isinstance(part, KeptPart):
            pieces.append(part.piece)
            continue
        fresh = []
        for message in part:
            key = str(message.get("_id"))
            if key not in seen:
                seen.add(key)
                fresh.append(latest[key])
        pieces.append(SearchPiece.of(label(fresh)))
    return pieces


class KeptPieces(Generic[T]):
    """What a process keeps between searches (``T`` holds a piece), by key, the least recently used dropped
    first once the pieces' search text passes ``max_chars``."""

    def __init__(self, max_chars: int, piece: Callable[[T], SearchPiece]) -> None:
        self.max_chars = max_chars
        self.piece = piece
        self.kept: OrderedDict[Hashable, T] = OrderedDict()
        self.chars = 0

    def get(self, key: Hashable) -> T | None:
        found = self.kept.get(key)
        if found is not None:
            self.kept.move_to_end(key)
        return found

    def put(self, key: Hashable, value: T) -> T:
        """Keep ``value`` under ``key`` (the one kept before goes); returns it."""
        old = self.kept.pop(key, None)
        self.chars += self.piece(value).chars - (self.piece(old).chars if old is not None else 0)
        self.kept[key] = value
        while self.chars > self.max_chars and len(self.kept) > 1:
            self.chars -= self.piece(self.kept.popitem(last=False)[1]).chars
        return value


class MessageSource(Protocol):
    """Where the recovery tools read a session's messages: the live list and the archive."""

    async def all_messages(self) -> Sequence[Message]:
        """Every message of the session the model may recover: archived first, then active."""

    async def messages_by_id(self, ids: Sequence[str]) -> Sequence[Message]:
        """The stored messages with these ids, in the order asked, missing ones left out."""

    async def similar(self, query: str, limit: int) -> Sequence[str] | None:
        """Ids of the messages closest in meaning to ``query``, best first, at most ``limit``; None when there is
        no index of meanings or it cannot be reached (the search then goes by keywords alone)."""


async def _similar(source: MessageSource, query: str, limit: int) -> Sequence[str] | None:
    """The source's search by meaning, or None: a source without one, or one that fails, leaves the keywords."""
    similar = getattr(source, "similar", None)
    if similar is None:
        return None
    try:
        return await similar(query, limit)
    except Exception:  # an index that is away must not cost the model its search
        logger.warning("search by meaning failed; searching by keywords alone", exc_info=True)
        return None


class PreparedSource(MessageSource, Protocol):
    """A source that keeps its history made ready for searching between searches."""

    async def search_pieces(self) -> Sequence[SearchPiece] | None:
        """Every message :meth:`all_messages` returns, in its order, as pieces (the older ones kept from earlier
        searches); None when that cannot be told apart from reading them all (the search then reads them all)."""


async def _searched(source: MessageSource) -> tuple[list[Message], SearchCorpus | None]:
    """The messages a search looks at, and their corpus where the source keeps one."""
    pieces = getattr(source, "search_pieces", None)
    if pieces is not None:
        found = await pieces()
        joined = joined_pieces(found) if found is not None else None
        if joined is not None:
            return joined
    return searchable(await source.all_messages()), None


async def search_source(
    source: MessageSource, query: str, limit: int = DEFAULT_HITS
) -> tuple[list[SearchHit], list[Message]]:
    """The one ranking of a chat's history behind ``session_search``, ``foldgate search`` and the web chat's
    search: keywords (and dates) over every searchable message, summaries included but behind the originals,
    fused with the source's search by meaning when it has one, the messages it ranks first for the query
    (``ranked_first(query)``, where it says) ahead. Returns the hits and the messages searched.
    Raises :class:`agent.search.SearchError` for a query that cannot run."""
    messages, corpus = await _searched(source)
    wanted = query.strip() and parse_regex(query) is None  # a /regex/ asks for exact text, not for a meaning
    similar = await _similar(source, query, MEANING_DEPTH) if wanted else None
    ranked_first = getattr(source, "ranked_first", None)
    hits = search_messages(
        messages,
        query,
        limit=limit,
        snippet_chars=SEARCH_SNIPPET_CHARS,
        similar=similar,
        neighbour_chars=SEARCH_NEIGHBOUR_CHARS,
        corpus=corpus,
        first=ranked_first(query) if ranked_first is not None else None,
    )
    return hits, messages


#: Most images one fetch hands back (the request shows at most its newest few anyway).
MAX_FETCH_IMAGES = 8


def recovery_tools(source: MessageSource, *, everywhere: MessageSource | None = None) -> list[Tool]:
    """``session_search`` and ``session_fetch`` over one chat's messages (never another chat's); with ``everywhere``
    (the person's chats) also over those, as scope ``my chats``; without it, exactly as they always were."""
    recovery = _Recovery(source, everywhere)
    scoped = everywhere is not None
    return [
        Tool(
            name="session_search",
            description=SCOPED_SEARCH_DESCRIPTION if scoped else SEARCH_DESCRIPTION,
            parameters=SCOPED_SEARCH_PARAMETERS if scoped else SEARCH_PARAMETERS,
            handler=recovery.search,
        ),
        Tool(
            name="session_fetch",
            description=SCOPED_FETCH_DESCRIPTION if scoped else FETCH_DESCRIPTION,
            parameters=FETCH_PARAMETERS,
            handler=recovery.fetch,
        ),
    ]


def _labels(message: Mapping[str, Any]) -> dict[str, Any]:
    """Where a source spanning several sessions, or chats, says a message was read: ``session``, ``chat``."""
    return {name: message[key] for key, name in (("_session", "session"), ("_chat", "chat")) if message.get(key)}


class _Recovery:
    """The recovery tools' handlers over one message source (and the person's chats, where given)."""

    def __init__(self, source: MessageSource, everywhere: MessageSource | None = None) -> None:
        self.source = source
        self.everywhere = everywhere

    def _scoped(self, scope: Any) -> MessageSource | str:
        """The source ``scope`` names, or why there is none."""
        if scope in (None, THIS_CHAT):
            return self.source
        if scope == MY_CHATS:
            return self.everywhere or f"scope '{MY_CHATS}' is not offered here: only this chat can be searched"
        return f"unknown scope {scope!r}: use '{THIS_CHAT}'" + (f" or '{MY_CHATS}'" if self.everywhere else "")

    async def search(self, args: dict[str, Any]) -> str:
        query = str(args.get("query") or "").strip()
        if not query:
            return json_codec.dumps_text({"error": "query is required"})
        try:
            limit = max(1, min(int(args.get("limit") or DEFAULT_HITS), MAX_SEARCH_HITS))
        except (TypeError, ValueError):
            limit = DEFAULT_HITS
        source = self._scoped(args.get("scope"))
        if isinstance(source, str):
            return json_codec.dumps_text({"error": source})
        try:
            hits, messages = await search_source(source, query, limit)
        except SearchError as error:
            return json_codec.dumps_text({"error": str(error)})
        wanted = {hit.message_id for hit in hits}  # the hits' own ids, looked up in one pass
        found: dict[str, Mapping[str, Any]] = {str(m.get("_id")): m for m in messages if m.get("_id") in wanted}
        records = []
        for hit in hits:
            record = asdict(hit)
            for side in ("before", "after"):  # the first or last turn of its conversation has none
                if record[side] is None:
                    del record[side]
            records.append(record | _labels(found.get(str(hit.message_id), {})))
        return json_codec.dumps_text({"query": query, "hits": records}, default=str)

    async def _found(self, ids: list[str]) -> Sequence[Message]:
        """The messages with these ids, in the order asked: another chat's read through the person's chats."""
        if self.everywhere is None or not any(CHAT_SEPARATOR in i for i in ids):
            return await self.source.messages_by_id(ids)
        found = [*await self.source.messages_by_id([i for i in ids if CHAT_SEPARATOR not in i])]
        found += await self.everywhere.messages_by_id([i for i in ids if CHAT_SEPARATOR in i])
        return sorted(found, key=lambda m: ids.index(str(m.get("_id"))) if str(m.get("_id")) in ids else len(ids))

    async def fetch(self, args: dict[str, Any]) -> str | ToolOutput:
        ids = args.get("ids") or ([args["id"]] if "id" in args else [])
        ids = [str(i) for i in ids][:20]
        if not ids:
            return json_codec.dumps_text({"error": "ids is required"})
        found = await self._found(ids)
        budget = MAX_FETCH_CHARS
        out = []
        images: list[Mapping[str, Any]] = []
        for message in found:
            content = message.get("content")
            text = (content if isinstance(content, str) else content_text(content)) or ""
            shown, budget = text[: max(0, budget)], budget - len(text)
            record: dict[str, Any] = {"id": message.get("_id"), "role": message.get("role"), "content": shown}
            if "chat" in (labels := _labels(message)):  # read through the person's chats
                record["chat"] = labels["chat"]
            if len(shown) < len(text):
                record["truncated_from_chars"] = len(text)
            if message.get("tool_calls"):
                record["tool_calls"] = message["tool_calls"]
            lines = stand_in_lines(message)
            if lines:
                record["items"] = lines
                images += carried_images(message)
            out.append(record)
        missing = sorted(set(ids) - {str(m.get("_id")) for m in found})
        text = json_codec.dumps_text({"messages": out, "missing": missing})
        return ToolOutput(text, tuple(images[-MAX_FETCH_IMAGES:])) if images else text
