"""A chat's sessions: the pointer to the current one, creating and switching, the index of its
conversations, a session's meta and outline."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from redis.asyncio.cluster import RedisCluster

from gateway.store import scripts
from gateway.store.errors import UnknownSession
from gateway.store.keys import ChatKeys, check_key_part, glob_escape, new_session_id
from gateway.store.locks import Lock, lock_key
from gateway.store.meta import SETTABLE_META_FIELDS, SessionMeta, encode_meta_fields, meta_change_args, parse_meta
from gateway.store.routes import Routes

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SessionOutline:
    """A session's message ids and their stored sizes in bytes (what ``/sessions`` shows, no bodies read)."""

    active: list[str]
    archived: list[str]
    sizes: dict[str, int]


async def stored_session(routes: Routes, keys: ChatKeys) -> str | None:
    sid = await routes.redis.get(keys.session)
    return str(sid) if sid else None


async def create(
    routes: Routes, keys: ChatKeys, *, current: bool, parent: str | None = None, lock: Lock | None = None
) -> str:
    """Create a session and point the chat at it (``current``: unless the chat has one by now)."""
    new_sid = new_session_id()
    key_list = [keys.session, keys.meta(new_sid), lock_key(keys, lock) if lock is not None else keys.lock]
    if parent:
        key_list.append(keys.meta(check_key_part("parent", parent)))
    key_list.append(keys.sessions)  # the script records the session in the chat's index
    args = [new_sid, repr(time.time()), "current" if current else "new", parent or "", lock.token if lock else ""]
    return str(await routes.script(scripts.CREATE_SESSION, key_list, args))


async def replace_missing(routes: Routes, keys: ChatKeys, missing: str) -> None:
    """Start a new session for a chat whose pointer names one that does not exist (unless another
    worker did meanwhile); the keys stored under the missing id are left alone."""
    new_sid = new_session_id()
    replaced = await routes.script(
        scripts.REPLACE_MISSING,
        [keys.session, keys.meta(check_key_part("session id", missing)), keys.meta(new_sid), keys.sessions],
        [missing, new_sid, repr(time.time())],
    )
    if replaced:
        log.warning(
            "%s: its session %s does not exist; started session %s (keys stored under %s are kept)",
            keys.chat,
            missing,
            new_sid,
            missing,
        )


async def point_at(routes: Routes, keys: ChatKeys, sid: str, lock: Lock) -> str:
    return str(
        await routes.script(
            scripts.POINT_AT, [lock_key(keys, lock), keys.session, keys.meta(sid)], [lock.token, lock.fence, sid]
        )
    )


async def outline(routes: Routes, keys: ChatKeys, sid: str) -> SessionOutline:
    key_list = [keys.meta(sid), keys.active(sid), keys.archive(sid), keys.msg(sid)]
    reply = await routes.script(scripts.OUTLINE, key_list, [])
    if reply[0] is None:
        raise UnknownSession(f"{keys.chat} has no session {sid!r}")
    active, archived, sizes = ([str(i) for i in part] for part in reply)
    return SessionOutline(active, archived, {i: int(n) for i, n in zip(active + archived, sizes)})


async def read_meta(routes: Routes, keys: ChatKeys, sid: str) -> SessionMeta:
    raw = await routes.redis.hgetall(keys.meta(check_key_part("session id", sid)))
    if not raw:
        raise UnknownSession(f"{keys.chat} has no session {sid!r}")
    return parse_meta(sid, cast("dict[str, str]", raw))  # the client decodes replies (decode_responses=True)


async def update_meta(routes: Routes, keys: ChatKeys, sid: str, lock: Lock, fields: Mapping[str, Any]) -> int:
    sets, deletes = encode_meta_fields(fields, SETTABLE_META_FIELDS)
    version = await routes.script(
        scripts.UPDATE_META,
        [lock_key(keys, lock), keys.meta(sid)],
        [lock.token, lock.fence, repr(time.time()), *meta_change_args(sets, deletes)],
    )
    return int(version)


async def indexed(routes: Routes, keys: ChatKeys) -> list[tuple[str, float]]:
    # With scores, every member comes back as a (member, score) pair.
    indexed = cast("list[tuple[str, float]]", await routes.redis.zrange(keys.sessions, 0, -1, withscores=True))
    if not indexed:  # an empty sorted set does not exist: the index was never built
        indexed = await _build_index(routes, keys)
    return [(str(sid), float(score)) for sid, score in indexed]


async def _build_index(routes: Routes, keys: ChatKeys) -> list[tuple[str, float]]:
    """Index every stored session that started a conversation (is not a rotation's continuation)."""
    sids = set(await _stored_session_ids(routes, keys))
    current = await routes.redis.get(keys.session)
    if current:
        sids.add(str(current))
    metas: dict[str, SessionMeta] = {}
    for sid in sids:
        try:
            metas[sid] = await read_meta(routes, keys, sid)
        except (UnknownSession, ValueError):
            continue

    def continues(meta: SessionMeta) -> bool:
        parent = metas.get(meta.parent_session_id or "")
        return parent is not None and parent.successor_session_id == meta.session_id

    started = {meta.session_id: meta.created_at for meta in metas.values() if not continues(meta)}
    if not started:
        return []
    await routes.redis.zadd(keys.sessions, started, nx=True)
    return cast("list[tuple[str, float]]", list(await routes.redis.zrange(keys.sessions, 0, -1, withscores=True)))


async def _stored_session_ids(routes: Routes, keys: ChatKeys) -> list[str]:
    """Every session id with a meta hash under the chat's keys, by SCAN (a one-time fallback).

    On a cluster only the node owning the chat's hash tag is scanned: all its keys live there.
    """
    head = f"{keys.base}:s:"
    pattern = glob_escape(head) + "*:meta"
    options: dict[str, Any] = {}
    if isinstance(routes.redis, RedisCluster):
        options["target_nodes"] = routes.redis.get_node_from_key(keys.session)
    found: list[str] = []
    async for key in routes.redis.scan_iter(match=pattern, count=1000, **options):
        name = key.decode() if isinstance(key, bytes) else str(key)
        found.append(name[len(head) : -len(":meta")])
    return [sid for sid in found if sid]
