"""The engine's tools: ``lcm_grep``, ``lcm_expand``, ``lcm_describe`` — schemas and the pure work behind them.

Each function takes messages (already read from the archive) and the ledger and returns
a JSON-safe dict; the engine does the reading and the JSON. Sizes are capped so a tool
result can never flood the context it exists to relieve, and every cap says so in the
result, with the call that gets the rest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent.messages import Message, is_summary, tool_names_by_call_id
from agent.search import search_messages
from agent.tokens import content_text
from agent.tools import MAX_FETCH_CHARS
from plugins.context_engine.lcm.archive import is_derived
from plugins.context_engine.lcm.ids import RANGE_SEPARATOR, runs_text
from plugins.context_engine.lcm.index_text import clock_text
from plugins.context_engine.lcm.ledger import Ledger

GREP = "lcm_grep"
EXPAND = "lcm_expand"
DESCRIBE = "lcm_describe"

DEFAULT_HITS = 5
MAX_HITS = 20
DEFAULT_SNIPPET_CHARS = 500
MAX_SNIPPET_CHARS = 2_500
#: Messages one lcm_expand call returns at most; the rest are named for a follow-up call.
MAX_EXPAND_MESSAGES = 40
#: Smallest piece of a message worth showing when the character budget is nearly spent.
MIN_PIECE_CHARS = 200
#: Ids listed for a follow-up call when a selection does not fit.
MAX_NOT_SHOWN_IDS = 100

SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": GREP,
            "description": (
                "Search everything compacted out of this conversation's context (and what is still in it). "
                "Keywords or exact identifiers (commit SHA, PR number, path, error text), or a regex written "
                "as /pattern/ or with regex=true. Returns message ids, roles, the compaction range each "
                "message left the context in, and a snippet around the match."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "keywords, an identifier, or /regex/flags"},
                    "regex": {"type": "boolean", "description": "treat pattern as a regular expression"},
                    "ignore_case": {
                        "type": "boolean",
                        "description": "with regex=true: case-insensitive (default true)",
                    },
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_HITS},
                    "snippet_chars": {"type": "integer", "minimum": 100, "maximum": MAX_SNIPPET_CHARS},
                },
                "required": ["pattern"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": EXPAND,
            "description": (
                "Return archived messages word for word: by ids (as cited by the summary, stubs and lcm_grep), "
                f'or by a range — "A{RANGE_SEPARATOR}B" between two ids, or a compaction label such as "r1". '
                "Large outputs are capped; the result says what was cut and how to read the rest."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "ids": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_EXPAND_MESSAGES},
                    "range": {
                        "type": "string",
                        "description": f'"A{RANGE_SEPARATOR}B" or a compaction label like "r2"',
                    },
                    "max_chars": {"type": "integer", "minimum": MIN_PIECE_CHARS, "maximum": MAX_FETCH_CHARS},
                    "offset": {
                        "type": "integer",
                        "minimum": 0,
                        "description": "skip this many messages of the selection (to page through a long range)",
                    },
                    "from_char": {
                        "type": "integer",
                        "minimum": 0,
                        "description": "start each message's text here (to read on in a truncated message)",
                    },
                },
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": DESCRIBE,
            "description": "List every compaction of this conversation: when it ran and which message ids it archived.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
]


class ToolArgumentError(ValueError):
    """Arguments a tool cannot run with; the message tells the model what to send instead."""


def bounded_int(args: Mapping[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = args.get(name)
    if value is None:
        return default
    try:
        return max(low, min(int(value), high))
    except (TypeError, ValueError):
        raise ToolArgumentError(f"{name} must be an integer") from None


def searchable(message: Message) -> bool:
    """Originals only: summaries, stubs and edited copies repeat messages the search finds anyway."""
    return message.get("_id") is not None and not is_derived(message)


def grep_query(args: Mapping[str, Any]) -> tuple[str, str]:
    """``(query for agent.search, mode)`` from the tool arguments."""
    pattern = str(args.get("pattern") or args.get("query") or "").strip()
    if not pattern:
        raise ToolArgumentError("pattern is required")
    slashed = len(pattern) > 2 and pattern.startswith("/") and pattern.rstrip("imsx").endswith("/")
    if slashed:
        return pattern, "regex"
    if args.get("regex"):
        return f"/{pattern}/" + ("i" if args.get("ignore_case", True) else ""), "regex"
    return pattern, "keywords"


def grep(messages: Sequence[Message], ranges: Mapping[str, str], args: Mapping[str, Any]) -> dict[str, Any]:
    """Ranked hits for ``args["pattern"]`` over the searchable ``messages``; raises SearchError for a bad regex."""
    query, mode = grep_query(args)
    limit = bounded_int(args, "limit", DEFAULT_HITS, 1, MAX_HITS)
    snippet_chars = bounded_int(args, "snippet_chars", DEFAULT_SNIPPET_CHARS, 100, MAX_SNIPPET_CHARS)
    candidates = [message for message in messages if searchable(message)]
    hits = search_messages(candidates, query, limit=limit, snippet_chars=snippet_chars)
    result: dict[str, Any] = {
        "pattern": query,
        "mode": mode,
        "searched_messages": len(candidates),
        "hits": [
            {
                "id": str(hit.message_id),
                "role": hit.role,
                **({"tool": hit.tool_name} if hit.tool_name else {}),
                "range": ranges.get(str(hit.message_id)),
                "score": hit.score,
                "snippet": hit.snippet,
            }
            for hit in hits
        ],
    }
    if hits:
        result["next"] = f'{EXPAND}(ids=["…"]) returns a hit\'s whole message'
    else:
        result["note"] = "no match; try fewer or other keywords, an exact identifier, or a /regex/"
    return result


def _header(message: Mapping[str, Any], tool_names: Mapping[str, str], where: Mapping[str, str]) -> dict[str, Any]:
    record: dict[str, Any] = {"id": str(message.get("_id")), "role": message.get("role")}
    if where.get(record["id"]):
        record["range"] = where[record["id"]]
    if message.get("role") == "tool":
        record["tool_call_id"] = message.get("tool_call_id")
        name = message.get("name") or tool_names.get(str(message.get("tool_call_id")))
        if name:
            record["tool"] = name
    if message.get("tool_calls"):
        record["tool_calls"] = [
            {
                "id": call.get("id"),
                "name": (call.get("function") or {}).get("name"),
                "arguments": (call.get("function") or {}).get("arguments"),
            }
            for call in message["tool_calls"]
            if isinstance(call, Mapping)
        ]
    if is_summary(message):
        record["summary"] = True
    return record


def render(
    messages: Sequence[Mapping[str, Any]],
    *,
    missing: Sequence[str],
    where: Mapping[str, str],
    max_chars: int,
    from_char: int = 0,
    offset: int = 0,
    context: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """Messages verbatim within ``max_chars`` of text; what does not fit is cut or named for a follow-up call.

    ``offset`` says how many messages of the selection earlier calls already showed (it
    only numbers the follow-up); ``context`` (e.g. all messages) helps name the tool a
    result came from.
    """
    tool_names = tool_names_by_call_id([*context, *messages])
    budget = max_chars
    out: list[dict[str, Any]] = []
    not_shown: list[str] = []
    truncated = False
    for message in messages:
        text = content_text(message.get("content"))
        piece = text[from_char:]
        if len(out) >= MAX_EXPAND_MESSAGES or (out and budget < min(MIN_PIECE_CHARS, len(piece) or 1)):
            not_shown.append(str(message.get("_id")))
            continue
        record = _header(message, tool_names, where)
        shown = piece[: max(0, budget)]
        record["content"] = shown
        record["chars"] = len(text)
        if from_char:
            record["from_char"] = from_char
        if len(shown) < len(piece):
            truncated = True
            record["truncated"] = {"shown_chars": len(shown), "next_from_char": from_char + len(shown)}
        budget -= len(shown)
        out.append(record)
    result: dict[str, Any] = {"messages": out, "missing": list(missing)}
    notes = []
    if truncated:
        notes.append(
            f'text capped at {max_chars:,} characters; read on with {EXPAND}(ids=["<id>"], from_char=<next_from_char>)'
        )
    if not_shown:
        result["not_shown_count"] = len(not_shown)
        result["not_shown_ids"] = not_shown[:MAX_NOT_SHOWN_IDS]
        result["next_offset"] = offset + len(out)
        notes.append(
            f"{len(not_shown):,} more messages did not fit; repeat the call with offset={offset + len(out)} "
            "for the next page, or ask for some of not_shown_ids"
        )
    if missing:
        notes.append("missing ids are not in this conversation's archive or context")
    if notes:
        result["note"] = "; ".join(notes)
    return result


def describe(ledger: Ledger, *, backing: str, archived_in_memory: int) -> dict[str, Any]:
    """Every compaction in the ledger, for the model and for operators."""
    compactions = []
    for record in ledger.records:
        item: dict[str, Any] = {
            "range": record.label,
            "compacted_at": clock_text(record.at),
            "trigger": record.trigger,
            "folded": {"count": record.folded_count, "ids": runs_text(record.folded)},
            "tokens": record.tokens,
            "summarizer": record.summarizer,
        }
        if record.replaced_count:
            item["replaced"] = {"count": record.replaced_count, "ids": runs_text(record.replaced)}
        if record.first_ts:
            item["written"] = [clock_text(record.first_ts), clock_text(record.last_ts)]
        if record.tools:
            item["tool_calls"] = record.tools
        if record.keys:
            item["identifiers"] = record.keys
        if record.partial:
            item["partial_ids"] = True
        compactions.append(item)
    result: dict[str, Any] = {
        "backing": backing,
        "compactions_total": ledger.compactions,
        "messages_archived": ledger.messages,
        "tokens_archived": ledger.tokens,
        "compactions": compactions,
        "how": f'{EXPAND}(range="r1") returns a range verbatim; {GREP}(pattern="…") searches all of them',
    }
    if ledger.older.records:
        result["older"] = {
            "ranges": f"r{ledger.older.first_number}–r{ledger.older.last_number}",
            "compactions": ledger.older.records,
            "messages": ledger.older.messages,
            "tokens": ledger.older.tokens,
        }
    if archived_in_memory:
        result["held_in_memory"] = archived_in_memory
    return result
