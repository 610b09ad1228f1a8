"""The recovery tools every session has: ``session_search`` and ``session_fetch``.

They are how the model gets back what compaction folded away: every original message stays in the
session's archive with its id, and summaries and stubs cite those ids. ``session_fetch`` of a photo
gives the photo back (as the result's items), of a document or voice message its text.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any, Protocol

from agent import json_codec
from agent.messages import Message, carried_images, stand_in_lines, tool_names_by_call_id
from agent.search import DEFAULT_HITS, SearchError, SearchHit, search_messages
from agent.search_answers import MEANING_DEPTH
from agent.search_query import parse_regex
from agent.tokens import content_text
from agent.tools.registry import Tool, ToolOutput

logger = logging.getLogger(__name__)

#: Most hits one search hands back when the model asks for more than :data:`agent.search.DEFAULT_HITS`.
MAX_SEARCH_HITS = 20
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


async def search_source(
    source: MessageSource, query: str, limit: int = DEFAULT_HITS
) -> tuple[list[SearchHit], list[Message]]:
    """The one ranking of a chat's history behind ``session_search``, ``foldgate search`` and the web chat's
    search: keywords (and dates) over every searchable message, summaries included but behind the originals,
    fused with the source's search by meaning when it has one. Returns the hits and the messages searched.
    Raises :class:`agent.search.SearchError` for a query that cannot run."""
    messages = searchable(await source.all_messages())
    wanted = query.strip() and parse_regex(query) is None  # a /regex/ asks for exact text, not for a meaning
    similar = await _similar(source, query, MEANING_DEPTH) if wanted else None
    hits = search_messages(
        messages,
        query,
        limit=limit,
        snippet_chars=SEARCH_SNIPPET_CHARS,
        similar=similar,
        neighbour_chars=SEARCH_NEIGHBOUR_CHARS,
    )
    return hits, messages


SEARCH_DESCRIPTION = (
    "Search this chat's full history, including everything compacted out of the context and "
    "earlier conversations (before a /new), by keywords or an exact identifier (commit SHA, PR "
    "number, path, error text), and by meaning too where a meaning index is configured. A date "
    "phrase in the query ('last Saturday', 'in May', 'yesterday', '2023-05-08') finds what was "
    "written then or said about that day; a date alone lists that day's messages. Returns ranked "
    "snippets with message ids and their session, each with the turn before and the turn after it "
    "(the answer to a question it found); ids from an earlier conversation look like '<session>:<id>'."
)
SEARCH_PARAMETERS = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "keywords, an identifier, a date phrase, or /regex/"},
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_SEARCH_HITS,
            "description": f"hits wanted (default {DEFAULT_HITS})",
        },
    },
    "required": ["query"],
}
FETCH_DESCRIPTION = (
    "Return the original text of messages of this chat by id (as cited by summaries, stubs and search hits). "
    "A message's photos come back as images, its documents and voice messages as their text."
)
#: Most images one fetch hands back (the request shows at most its newest few anyway).
MAX_FETCH_IMAGES = 8
FETCH_PARAMETERS = {
    "type": "object",
    "properties": {"ids": {"type": "array", "items": {"type": "string"}, "maxItems": 20}},
    "required": ["ids"],
}


def recovery_tools(source: MessageSource) -> list[Tool]:
    """``session_search`` and ``session_fetch`` over one chat's messages (never another chat's)."""
    recovery = _Recovery(source)
    return [
        Tool(
            name="session_search", description=SEARCH_DESCRIPTION, parameters=SEARCH_PARAMETERS, handler=recovery.search
        ),
        Tool(name="session_fetch", description=FETCH_DESCRIPTION, parameters=FETCH_PARAMETERS, handler=recovery.fetch),
    ]


class _Recovery:
    """The recovery tools' handlers over one message source."""

    def __init__(self, source: MessageSource) -> None:
        self.source = source

    async def search(self, args: dict[str, Any]) -> str:
        query = str(args.get("query") or "").strip()
        if not query:
            return json_codec.dumps_text({"error": "query is required"})
        try:
            limit = max(1, min(int(args.get("limit") or DEFAULT_HITS), MAX_SEARCH_HITS))
        except (TypeError, ValueError):
            limit = DEFAULT_HITS
        try:
            hits, messages = await search_source(self.source, query, limit)
        except SearchError as error:
            return json_codec.dumps_text({"error": str(error)})
        # A source spanning several sessions labels each message with its own (``_session``).
        sessions = {str(m.get("_id")): m["_session"] for m in messages if m.get("_session")}
        records = []
        for hit in hits:
            record = asdict(hit)
            for side in ("before", "after"):  # the first or last turn of its conversation has none
                if record[side] is None:
                    del record[side]
            if str(hit.message_id) in sessions:
                record["session"] = sessions[str(hit.message_id)]
            records.append(record)
        return json_codec.dumps_text({"query": query, "hits": records}, default=str)

    async def fetch(self, args: dict[str, Any]) -> str | ToolOutput:
        ids = args.get("ids") or ([args["id"]] if "id" in args else [])
        ids = [str(i) for i in ids][:20]
        if not ids:
            return json_codec.dumps_text({"error": "ids is required"})
        found = await self.source.messages_by_id(ids)
        budget = MAX_FETCH_CHARS
        out = []
        images: list[Mapping[str, Any]] = []
        for message in found:
            content = message.get("content")
            text = (content if isinstance(content, str) else content_text(content)) or ""
            shown, budget = text[: max(0, budget)], budget - len(text)
            record: dict[str, Any] = {"id": message.get("_id"), "role": message.get("role"), "content": shown}
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
