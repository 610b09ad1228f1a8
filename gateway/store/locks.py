"""The fenced chat lock: acquire (or claim, with the inbox's head), extend, release.

Writes that take ``lock=`` run as one Lua script that first checks the lock key still holds the
caller's token (and that no holder with a newer fence has written this session), then checks key
types and versions, and only then writes. A failed check writes nothing; see
:meth:`gateway.store.SessionStore.acquire_lock` for the timing semantics.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any

from gateway.store import scripts
from gateway.store.caches import ReadAhead, held_args
from gateway.store.errors import StaleLock
from gateway.store.keys import ChatKeys
from gateway.store.routes import Routes


@dataclass(frozen=True)
class Lock:
    """Proof of holding a chat's lock: the random token in the lock key and its fence number."""

    chat: str
    token: str
    fence: int


def lock_key(keys: ChatKeys, lock: Lock) -> str:
    """The lock key a write checks; a lock taken for another chat never authorises this one."""
    if lock.chat != keys.chat:
        raise StaleLock(f"lock belongs to chat {lock.chat!r}, not {keys.chat!r}")
    return keys.lock


def milliseconds(ttl_seconds: float) -> int:
    ms = int(ttl_seconds * 1000)
    if ms < 1:
        raise ValueError(f"lock ttl must be at least 1 ms, got {ttl_seconds!r} s")
    return ms


def new_token() -> str:
    """A lock's random token, made by the taker: one who loses the answer to a take still knows what to give back."""
    return secrets.token_hex(16)


async def acquire(
    routes: Routes,
    keys: ChatKeys,
    ttl_seconds: float,
    read_ahead: ReadAhead,
    *,
    peek_inbox: bool,
    token: str | None = None,
) -> tuple[Lock | None, str | None]:
    """Take the lock once; with ``peek_inbox`` (a claim) also return the inbox's head and keep the
    session read for it in ``read_ahead``. Either way what was read ahead before is replaced."""
    token = token or new_token()
    key_list = [keys.lock, keys.fence]
    args: list[Any] = [token, milliseconds(ttl_seconds)]
    held = read_ahead.transcripts.get(keys.chat) if peek_inbox else None  # only a claim reads ahead
    if peek_inbox:
        key_list += [keys.inbox, keys.session]
        args += [keys.base, *held_args(held)]
    sent = time.monotonic()
    reply = await routes.script(scripts.ACQUIRE, key_list, args)
    if reply is None:
        read_ahead.drop(keys.chat)
        return None, None
    fence, head, ahead = reply
    read_ahead.keep(keys.chat, ahead, held, sent=sent, lock_ttl=ttl_seconds)
    return Lock(chat=keys.chat, token=token, fence=int(fence)), head


async def extend(routes: Routes, keys: ChatKeys, lock: Lock, ttl_seconds: float) -> None:
    if not await routes.script(scripts.EXTEND, [keys.lock], [lock.token, milliseconds(ttl_seconds)]):
        raise StaleLock(f"lock of {lock.chat} (fence {lock.fence}) is no longer held")


async def release(routes: Routes, keys: ChatKeys, lock: Lock) -> bool:
    return bool(await routes.script(scripts.RELEASE, [keys.lock], [lock.token]))


async def release_if_idle(routes: Routes, keys: ChatKeys, lock: Lock) -> str | None:
    reply = await routes.script(scripts.RELEASE, [keys.lock, keys.inbox], [lock.token])
    return reply if isinstance(reply, str) else None
