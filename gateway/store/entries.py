"""Inbox entries: finishing one (its meta recorded, the entry removed, the next handed out), and the
dedupe window of platform updates.

The entries themselves are written by :mod:`gateway.store.inbox` (intake); the store finishes them
because finishing is a fenced write to the session's meta in the same atomic step.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from gateway.store import scripts
from gateway.store.caches import ReadAhead, held_args
from gateway.store.keys import ChatKeys, check_key_part
from gateway.store.locks import Lock, lock_key
from gateway.store.meta import SETTABLE_META_FIELDS, encode_meta_fields, meta_change_args
from gateway.store.routes import Routes

#: Platforms redeliver updates for up to a day; a shorter dedupe window would let duplicates through.
MIN_SEEN_TTL_SECONDS = 86_400


async def finish(
    routes: Routes,
    keys: ChatKeys,
    read_ahead: ReadAhead,
    lock: Lock,
    sid: str,
    entry: str,
    meta: Mapping[str, Any],
    *,
    ahead_for_next: bool = True,
) -> str | None:
    """Set ``meta``, remove ``entry`` from the inbox and return the next entry, keeping the session
    read for that one in ``read_ahead`` (its snapshot then costs no round trip). Without
    ``ahead_for_next`` nothing is read ahead: the caller finishes the next entry too (a batch)."""
    sets, deletes = encode_meta_fields(meta, SETTABLE_META_FIELDS)
    held = read_ahead.transcripts.get(keys.chat)
    sent = time.monotonic()
    base, held_sid_and_next = (keys.base, held_args(held)) if ahead_for_next else ("", ("", 0))
    head, ahead = await routes.script(
        scripts.FINISH_ENTRY,
        [lock_key(keys, lock), keys.meta(check_key_part("session id", sid)), keys.inbox, keys.session],
        [lock.token, lock.fence, entry, *meta_change_args(sets, deletes), base, *held_sid_and_next],
    )
    read_ahead.keep(keys.chat, ahead, held, sent=sent)
    return head or None
