"""The compaction commit: a session's live transcript replaced by the compacted list, atomically,
fenced and idempotent (a retried commit answers with the first result and writes nothing)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.messages import InvalidMessage, Message, validate_message
from agent.tokens import count_message
from gateway.store import scripts
from gateway.store.bodies import prepare_new
from gateway.store.keys import ChatKeys, new_session_id
from gateway.store.locks import Lock, lock_key
from gateway.store.meta import COMMIT_META_FIELDS, encode_meta_fields, meta_change_args
from gateway.store.routes import Routes

#: How long a compaction's result is kept so a retried commit (reply lost) is not applied twice.
COMMIT_RECORD_TTL_SECONDS = 7 * 86_400


@dataclass(frozen=True)
class CompactionCommit:
    """What a compaction commit did (the same value again when it is retried)."""

    session_id: str
    old_session_id: str
    archived_ids: list[str]
    active_ids: list[str]
    version: int
    #: The commit was applied before (by an earlier call of the lock's holder) and nothing was
    #: written now. Left out of equality: it is the same commit.
    replayed: bool = field(default=False, compare=False)


@dataclass
class _Plan:
    """The new list as the script takes it: ('k', id) kept, ('n', tail) new, ('a', tail) archived."""

    entries: list[str | bytes] = field(default_factory=list)
    new_bodies: list[tuple[Message, Message]] = field(default_factory=list)  # (given dict, stored body)
    total: int = 0  # tokens of the new list


def _plan(new_messages: Sequence[Message], archive_new: Sequence[Message], now: float) -> _Plan:
    """Validate every message before anything is sent; messages with an ``_id`` are kept as stored."""
    plan = _Plan()
    kept: set[str] = set()
    for index, message in enumerate(new_messages):
        message_id = message.get("_id") if isinstance(message, dict) else None
        if message_id is None:
            body, tail = prepare_new(message, index, now)
            plan.new_bodies.append((message, body))
            plan.entries += ["n", tail]
            plan.total += body["_tok"]
            continue
        try:
            validate_message(message)
        except InvalidMessage as error:
            raise InvalidMessage(f"message {index}: {error}") from error
        if not isinstance(message_id, str) or message_id in kept:
            raise InvalidMessage(f"message {index}: id {message_id!r} is not a unique stored message id")
        kept.add(message_id)
        plan.entries += ["k", message_id]
        plan.total += count_message(message)
    for index, message in enumerate(archive_new):
        if isinstance(message, dict) and "_id" in message:
            raise InvalidMessage(f"archive_new message {index} is stored already as id {message['_id']!r}")
        _body, tail = prepare_new(message, index, now)
        plan.entries += ["a", tail]
    return plan


def _keys(keys: ChatKeys, lock: Lock, sid: str, new_sid: str, compaction_id: str) -> list[str]:
    key_list = [
        lock_key(keys, lock),
        keys.session,
        keys.compaction(compaction_id),
        keys.meta(sid),
        keys.msg(sid),
        keys.active(sid),
        keys.archive(sid),
    ]
    if new_sid:
        key_list += [keys.meta(new_sid), keys.msg(new_sid), keys.active(new_sid), keys.archive(new_sid)]
    return key_list


def parse_record(record: str) -> CompactionCommit:
    session_id, old_session_id, version, archived, active = record.split("\n")
    return CompactionCommit(
        session_id=session_id,
        old_session_id=old_session_id,
        archived_ids=archived.split(",") if archived else [],
        active_ids=active.split(",") if active else [],
        version=int(version),
    )


def _give_ids(new_messages: Sequence[Message], plan: _Plan, result: CompactionCommit) -> None:
    """The new dicts receive their ``_id``, ``_ts`` and ``_tok`` (when the result lists them all)."""
    new_positions = [i for i, m in enumerate(new_messages) if not (isinstance(m, dict) and "_id" in m)]
    if len(result.active_ids) == len(new_messages):
        for position, (message, body) in zip(new_positions, plan.new_bodies):
            message.update({"_id": result.active_ids[position], "_ts": body["_ts"], "_tok": body["_tok"]})


async def commit(
    routes: Routes,
    keys: ChatKeys,
    sid: str,
    new_messages: Sequence[Message],
    *,
    lock: Lock,
    in_place: bool,
    compaction_id: str,
    expected_version: int | None,
    meta: Mapping[str, Any] | None,
    archive_new: Sequence[Message],
    record_ttl_seconds: int,
) -> CompactionCommit:
    """Validate, plan the new list, run ``commit_compaction.lua``, give the new messages their ids."""
    if not isinstance(compaction_id, str) or not compaction_id:
        raise ValueError("compaction_id must be a non-empty string")
    if not new_messages:
        raise InvalidMessage("a compaction must leave at least one message")
    sets, deletes = encode_meta_fields(meta or {}, COMMIT_META_FIELDS)
    now = time.time()
    plan = _plan(new_messages, archive_new, now)
    new_sid = "" if in_place else new_session_id()
    key_list = _keys(keys, lock, sid, new_sid, compaction_id)
    args: list[Any] = [
        lock.token,
        lock.fence,
        repr(now),
        "in_place" if in_place else "rotate",
        "" if expected_version is None else int(expected_version),
        plan.total,
        record_ttl_seconds,
        new_sid,
        sid,
        *meta_change_args(sets, deletes),
        *plan.entries,
    ]
    status, record = await routes.script(scripts.COMMIT, key_list, args)
    result = dataclasses.replace(parse_record(record), replayed=status != "applied")
    _give_ids(new_messages, plan, result)
    return result
