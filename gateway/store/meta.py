"""A session's meta hash: the fields, who may set which, and their encoding as hash strings.

The meta is bounded (counters, the summary, guard state), so reading it whole is one cheap
HGETALL that answers the per-message questions (token total, version, last entry) without
touching the transcript.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agent import json_codec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SessionMeta:
    """One session's counters and state, read in one HGETALL of a bounded hash."""

    session_id: str
    tokens: int = 0
    count: int = 0
    last_prompt_tokens: int | None = None
    tokens_at_report: int | None = None  # meta ``tokens`` when last_prompt_tokens was reported
    compaction_count: int = 0
    previous_summary: str | None = None
    engine_state: dict[str, Any] = field(default_factory=dict)
    version: int = 0
    parent_session_id: str | None = None
    successor_session_id: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    model: str | None = None
    last_activity_at: float | None = None
    next_id: int = 0
    fence: int = 0
    last_entry_id: str | None = None  # the inbox entry whose turn was committed last
    last_reply: str | None = None  # that turn's reply, resent if the process died before sending it
    #: The items that reply carries (refs of images and files made for the person), resent with it.
    last_reply_items: list[dict[str, Any]] = field(default_factory=list)
    replied_entry_id: str | None = None  # the entry whose reply was sent last
    #: Every entry the last committed turn took together (a coalesced backlog), one per line.
    batch_entry_ids: str | None = None
    #: The entry whose turn stored its messages and tool results but not yet its reply (the provider went
    #: away mid-turn): its retry continues from them instead of running the tools again.
    partial_entry_id: str | None = None
    #: What that cut-short turn made for the person (refs), sent with the reply of the turn that continues it.
    partial_items: list[dict[str, Any]] = field(default_factory=list)
    usage_totals: dict[str, int] = field(default_factory=dict)  # summed provider usage of the session
    #: The session's own system prompt (an API client's system message), sent instead of the bot's; a meta
    #: field so a rotating compaction carries it over like the model, and only the chat's lock holder sets it.
    system_prompt: str | None = None
    #: Which memory entries the session's requests carry, fixed until its next compaction so the prompt cache
    #: survives (:mod:`gateway.memory.block`): per block key, the entry numbers shown and the newest number then.
    memory_view: dict[str, Any] = field(default_factory=dict)
    #: What the session's last compactions kept about the people who wrote what they folded, committed with
    #: them and not yet added to those people's memory (:mod:`gateway.memory.folds` adds them, idempotently).
    memory_pending: list[dict[str, Any]] = field(default_factory=list)

    def took(self, entry: str) -> bool:
        """Whether the inbox entry's turn is done with it: committed last, or taken into a turn's batch."""
        return entry == self.last_entry_id or entry in (self.batch_entry_ids or "").split("\n")

    def holds(self, entry: str) -> bool:
        """Whether the inbox entry's message is stored in the session: taken, or kept by a turn still to finish."""
        return self.took(entry) or entry == self.partial_entry_id


#: Meta fields callers may set (``None`` clears one); every other field is the store's own.
INT_FIELDS = frozenset({"last_prompt_tokens", "tokens_at_report", "compaction_count"})
FLOAT_FIELDS = frozenset({"last_activity_at"})
STR_FIELDS = frozenset(
    {
        "previous_summary",
        "model",
        "last_entry_id",
        "last_reply",
        "replied_entry_id",
        "batch_entry_ids",
        "partial_entry_id",
        "system_prompt",
    }
)
JSON_FIELDS = frozenset({"engine_state", "usage_totals", "memory_view"})
JSON_LIST_FIELDS = frozenset({"last_reply_items", "partial_items", "memory_pending"})
SETTABLE_META_FIELDS = INT_FIELDS | FLOAT_FIELDS | STR_FIELDS | JSON_FIELDS | JSON_LIST_FIELDS
#: A compaction sets its own compaction_count.
COMMIT_META_FIELDS = SETTABLE_META_FIELDS - {"compaction_count"}


def reply_meta(reply: str, items: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The meta fields recording a turn's reply: its text and its items, so a resend after a crash sends both
    (no items clears those of an earlier reply)."""
    return {"last_reply": reply, "last_reply_items": list(items) if items else None}


def _encode_value(name: str, value: Any) -> str:
    if name in INT_FIELDS:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"meta field {name!r} must be a non-negative int, got {value!r}")
        return str(value)
    if name in FLOAT_FIELDS:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"meta field {name!r} must be a unix time, got {value!r}")
        return repr(float(value))
    if name in STR_FIELDS:
        if not isinstance(value, str):
            raise ValueError(f"meta field {name!r} must be a string, got {type(value).__name__}")
        return value
    wanted = list if name in JSON_LIST_FIELDS else dict
    if not isinstance(value, wanted):
        raise ValueError(f"meta field {name!r} must be a {wanted.__name__}, got {type(value).__name__}")
    try:
        return json_codec.dumps_state(value)
    except (TypeError, ValueError) as error:
        raise ValueError(f"meta field {name!r} must be JSON-serialisable: {error}") from error


def encode_meta_fields(fields: Mapping[str, Any], allowed: frozenset[str]) -> tuple[list[str], list[str]]:
    """Meta values as hash strings: (flat field/value pairs to set, fields to delete for ``None``)."""
    sets: list[str] = []
    deletes: list[str] = []
    for name, value in fields.items():
        if name not in allowed:
            raise ValueError(f"meta field {name!r} cannot be set here; settable: {sorted(allowed)}")
        if value is None:
            deletes.append(name)
        else:
            sets += [name, _encode_value(name, value)]
    return sets, deletes


def meta_change_args(sets: list[str], deletes: list[str]) -> list[Any]:
    """Meta changes as script arguments: n pairs, the pairs, n fields to delete, the fields
    (what ``read_meta_changes`` in ``helpers.lua`` reads)."""
    return [len(sets) // 2, *sets, len(deletes), *deletes]


def hash_int(raw: Mapping[str, str], name: str, default: int | None = 0) -> int | None:
    """A Redis hash field as an int; absent or unreadable reads as ``default``."""
    value = raw.get(name)  # several fields are often absent: no exception for those
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        return default


def hash_float(raw: Mapping[str, str], name: str, default: float | None = 0.0) -> float | None:
    """A Redis hash field as a float; absent or unreadable reads as ``default``."""
    value = raw.get(name)
    if value is None:
        return default
    try:
        return float(value)
    except ValueError:
        return default


def _json_dict(sid: str, raw: Mapping[str, str], name: str) -> dict[str, Any]:
    """A JSON meta field as a dict; unreadable state is logged and starts empty rather than failing the chat."""
    decoded = _json(sid, raw, name)
    return decoded if isinstance(decoded, dict) else {}


def _json_dicts(sid: str, raw: Mapping[str, str], name: str) -> list[dict[str, Any]]:
    """A JSON meta field as a list of dicts (what is not a dict in it is dropped)."""
    decoded = _json(sid, raw, name)
    return [each for each in decoded if isinstance(each, dict)] if isinstance(decoded, list) else []


def _json(sid: str, raw: Mapping[str, str], name: str) -> Any:
    if not raw.get(name):
        return None
    try:
        return json_codec.loads(raw[name])
    except ValueError:
        log.warning("session %s: meta %s is not JSON; starting from empty", sid, name)
        return None


def _count(raw: Mapping[str, str], name: str) -> int:
    """A counter: 0 when absent or unreadable."""
    return hash_int(raw, name) or 0


def _time(raw: Mapping[str, str], name: str) -> float:
    """One of the session's own times: 0.0 when absent or unreadable."""
    return hash_float(raw, name) or 0.0


def _name(raw: Mapping[str, str], name: str) -> str | None:
    """An id or a name: an empty one is none."""
    return raw.get(name) or None


def parse_meta(sid: str, raw: Mapping[str, str]) -> SessionMeta:
    """The meta hash as read; a field that does not parse takes its default rather than failing the chat."""
    engine_state = _json_dict(sid, raw, "engine_state")
    return SessionMeta(
        session_id=sid,
        tokens=_count(raw, "tokens"),
        count=_count(raw, "count"),
        last_prompt_tokens=hash_int(raw, "last_prompt_tokens", None),
        tokens_at_report=hash_int(raw, "tokens_at_report", None),
        compaction_count=_count(raw, "compaction_count"),
        previous_summary=raw.get("previous_summary"),
        engine_state=engine_state,
        version=_count(raw, "version"),
        parent_session_id=_name(raw, "parent_session_id"),
        successor_session_id=_name(raw, "successor_session_id"),
        created_at=_time(raw, "created_at"),
        updated_at=_time(raw, "updated_at"),
        model=_name(raw, "model"),
        last_activity_at=hash_float(raw, "last_activity_at", None),
        next_id=_count(raw, "next_id"),
        fence=_count(raw, "fence"),
        last_entry_id=_name(raw, "last_entry_id"),
        last_reply=raw.get("last_reply"),
        last_reply_items=_json_dicts(sid, raw, "last_reply_items"),
        replied_entry_id=_name(raw, "replied_entry_id"),
        batch_entry_ids=_name(raw, "batch_entry_ids"),
        partial_entry_id=_name(raw, "partial_entry_id"),
        partial_items=_json_dicts(sid, raw, "partial_items"),
        usage_totals=_json_dict(sid, raw, "usage_totals"),
        system_prompt=raw.get("system_prompt") or None,
        memory_view=_json_dict(sid, raw, "memory_view"),
        memory_pending=_json_dicts(sid, raw, "memory_pending"),
    )
