"""A session's messages: appending a turn, the live transcript and the archive read back, and the
quarantine of stored entries that cannot be used (moved aside, never raised)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from agent import json_codec
from agent.messages import InvalidMessage, Message
from agent.tokens import count_message
from agent.transcript_repair import Placement
from gateway.store import scripts
from gateway.store.bodies import Unreadable, decode_entries, decode_stored, prepare_new
from gateway.store.errors import UnknownSession
from gateway.store.keys import ChatKeys
from gateway.store.locks import Lock, lock_key
from gateway.store.meta import SETTABLE_META_FIELDS, encode_meta_fields, meta_change_args
from gateway.store.routes import Routes

log = logging.getLogger(__name__)

#: How long an archived long message is remembered by its inbox entry, so a retried turn reuses it.
ORIGINAL_MARKER_TTL_SECONDS = 7 * 86_400


class ArchivedMessage(Message, total=False):
    """A message read back from a session's archive, marked for listings as out of the live transcript."""

    active: int  # 0: no longer in the live transcript
    compacted: int  # 1: a compaction folded it away


async def append(
    routes: Routes, keys: ChatKeys, sid: str, messages: Sequence[Message], lock: Lock, meta: Mapping[str, Any] | None
) -> list[str]:
    now = time.time()
    bodies: list[Message] = []
    tails: list[bytes] = []
    for index, message in enumerate(messages):
        if isinstance(message, dict) and "_id" in message:
            raise InvalidMessage(
                f"message {index} is already stored as id {message['_id']!r}; store an edited copy "
                "(agent.messages.with_content) instead of appending it again"
            )
        body, tail = prepare_new(message, index, now)
        bodies.append(body)
        tails.append(tail)
    sets, deletes = encode_meta_fields(meta or {}, SETTABLE_META_FIELDS)
    if not tails and not sets and not deletes:
        return []
    total = sum(body["_tok"] for body in bodies)
    ids = await routes.script(
        scripts.APPEND,
        [lock_key(keys, lock), keys.meta(sid), keys.msg(sid), keys.active(sid)],
        [lock.token, lock.fence, repr(now), total, *meta_change_args(sets, deletes), *tails],
    )
    ids = [str(message_id) for message_id in ids]
    for message, body, message_id in zip(messages, bodies, ids):
        message.update({"_id": message_id, "_ts": body["_ts"], "_tok": body["_tok"]})
    return ids


async def archive_original(
    routes: Routes, keys: ChatKeys, sid: str, message: Message, lock: Lock, entry_id: str
) -> str:
    if isinstance(message, dict) and "_id" in message:
        raise InvalidMessage(f"message is already stored as id {message['_id']!r}")
    now = time.time()
    _body, tail = prepare_new(message, 0, now)
    message_id = await routes.script(
        scripts.ARCHIVE_ORIGINAL,
        [lock_key(keys, lock), keys.meta(sid), keys.msg(sid), keys.archive(sid), keys.original(sid, entry_id)],
        [lock.token, lock.fence, repr(now), ORIGINAL_MARKER_TTL_SECONDS, tail],
    )
    return str(message_id)


async def read_active(routes: Routes, keys: ChatKeys, sid: str) -> tuple[str, list[Message], list[Unreadable]]:
    """The live transcript once: the version read, the usable messages in order, the unreadable ones."""
    reply = await routes.script(scripts.READ_ACTIVE, [keys.meta(sid), keys.active(sid), keys.msg(sid)], [])
    if reply[0] is None:
        raise UnknownSession(f"{keys.chat} has no session {sid!r}")
    version, ids, bodies = reply
    good, bad = decode_entries(ids, bodies)
    return version, good, bad


async def quarantine(
    routes: Routes, keys: ChatKeys, sid: str, version: str, good: Sequence[Message], bad: Sequence[Unreadable]
) -> bool:
    """Move ``bad`` out of the live list if the session is still at ``version``; ``good`` is the rest."""
    now = time.time()
    args: list[Any] = [version, sum(count_message(m) for m in good), repr(now), *_quarantine_args(sid, bad, now)]
    applied = await routes.script(scripts.QUARANTINE, [keys.meta(sid), keys.active(sid), keys.quarantine], args)
    if applied:
        _log_quarantined(keys, sid, bad)
    return bool(applied)


def _quarantine_args(sid: str, bad: Sequence[Unreadable], now: float) -> list[Any]:
    """(id, record) per entry, as the scripts that quarantine take them."""
    args: list[Any] = []
    for message_id, raw, reason in bad:
        record = {"session_id": sid, "id": message_id, "raw": raw, "reason": reason, "ts": now}
        args += [message_id, json_codec.dumps(record)]
    return args


def _log_quarantined(keys: ChatKeys, sid: str, bad: Sequence[Unreadable]) -> None:
    for message_id, _raw, reason in bad:
        log.warning("%s/%s: quarantined message %s: %s", keys.chat, sid, message_id, reason)


async def store_repair(
    routes: Routes,
    keys: ChatKeys,
    sid: str,
    version: str,
    keep: Sequence[Message],
    moved: Sequence[Unreadable],
    placements: Sequence[Placement],
) -> bool:
    """Insert each placement's stand-ins and quarantine ``moved`` if the session is still at ``version``.

    ``keep`` is the rest of the live transcript (for its token total). On success the stand-in
    dicts receive their ``_id``, ``_ts`` and ``_tok``, as :func:`append` gives them.
    """
    now = time.time()
    stand_ins: list[Message] = []
    bodies: list[Message] = []
    tail_args: list[Any] = []
    for after, before, messages in placements:
        tail_args += [after, before or "", len(messages)]
        for message in messages:
            if "_id" in message:
                raise InvalidMessage(f"stand-in is already stored as id {message['_id']!r}")
            body, tail = prepare_new(message, len(stand_ins), now)
            stand_ins.append(message)
            bodies.append(body)
            tail_args.append(tail)
    tokens = sum(count_message(m) for m in keep) + sum(body["_tok"] for body in bodies)
    reply = await routes.script(
        scripts.STORE_REPAIR,
        [keys.meta(sid), keys.msg(sid), keys.active(sid), keys.quarantine],
        [version, tokens, repr(now), len(moved), *_quarantine_args(sid, moved, now), *tail_args],
    )
    if reply is None:
        return False
    for message, body, message_id in zip(stand_ins, bodies, reply):
        message.update({"_id": str(message_id), "_ts": body["_ts"], "_tok": body["_tok"]})
    _log_quarantined(keys, sid, moved)
    return True


def quarantine_records(moved: Sequence[Message], reason: str) -> list[Unreadable]:
    """Stored, well-formed messages to move aside, as the quarantine records them."""
    return [
        (str(m["_id"]), json_codec.dumps({k: v for k, v in m.items() if k != "_id"}).decode(), reason) for m in moved
    ]


async def quarantined(routes: Routes, keys: ChatKeys) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for raw in await routes.redis.lrange(keys.quarantine, 0, -1):
        try:
            records.append(json_codec.loads(raw))
        except ValueError:
            records.append({"raw": raw, "reason": "quarantine record is not JSON"})
    return records


async def get_messages(routes: Routes, keys: ChatKeys, sid: str, ids: Iterable[str]) -> list[Message]:
    wanted = [str(message_id) for message_id in ids]
    if not wanted:
        return []
    found: list[Message] = []
    bodies = cast("list[str | None]", await routes.redis.hmget(keys.msg(sid), wanted))  # decode_responses=True
    for message_id, raw in zip(wanted, bodies):
        message, reason = decode_stored(message_id, raw)
        if message is None:
            log.warning("%s/%s: cannot return message %s: %s", keys.chat, sid, message_id, reason)
        else:
            found.append(message)
    return found


async def read_archive(routes: Routes, keys: ChatKeys, sid: str) -> list[ArchivedMessage]:
    reply = await routes.script(scripts.READ_ARCHIVE, [keys.meta(sid), keys.archive(sid), keys.msg(sid)], [])
    if reply[0] is None:
        raise UnknownSession(f"{keys.chat} has no session {sid!r}")
    archived: list[ArchivedMessage] = []
    for message_id, raw in zip(*reply):
        message, reason = decode_stored(message_id, raw)
        if message is None:
            log.warning("%s/%s: archived message %s unreadable: %s", keys.chat, sid, message_id, reason)
            continue
        archived.append({**message, "active": 0, "compacted": 1})
    return archived
