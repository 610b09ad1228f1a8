"""The session store: every chat's transcript, archive, meta, lock and dedupe keys in Redis.

:class:`SessionStore` is the one facade; its concerns live in one module each:

- :mod:`~gateway.store.keys` — key names (one hash tag per chat) and the key layout
- :mod:`~gateway.store.scripts` — the Lua scripts, one ``.lua`` file each
- :mod:`~gateway.store.routes` — the two routes to Redis (pipelined channel, redis-py) and which
  operation takes which
- :mod:`~gateway.store.errors` — what a refused operation raises
- :mod:`~gateway.store.meta` — the session meta hash: fields and encoding
- :mod:`~gateway.store.bodies` — message bodies: validation, ``_id``/``_ts``/``_tok``, decoding
- :mod:`~gateway.store.caches` — the transcript cache and the read-ahead
- :mod:`~gateway.store.locks` — the fenced chat lock
- :mod:`~gateway.store.entries` — finishing inbox entries, the dedupe window
- :mod:`~gateway.store.sessions` — the session pointer, creation, /resume, the index, meta
- :mod:`~gateway.store.snapshots` — a chat's session in one round trip
- :mod:`~gateway.store.transcript` — appends, the live list, the archive, the quarantine,
  stored repairs of the live list
- :mod:`~gateway.store.compaction` — the atomic, fenced, idempotent compaction commit
- :mod:`~gateway.store.figures` — many chats' current conversations in numbers, in two round trips

Beside the facade, the store's other Redis records, each on its own chat's (or scope's) slot:

- :mod:`~gateway.store.inbox` — the durable intake: inbox lists, dedupe, the ready set, ``/stop``
- :mod:`~gateway.store.journal` — what a reply has put on the platform, for the attempt after a crash
- :mod:`~gateway.store.outages` — each chat's outage record (since when, how many tries)
- :mod:`~gateway.store.buckets` — the send budget's token buckets
- :mod:`~gateway.store.activity` — every chat's turns, compactions and errors, for the operator view
- :mod:`~gateway.store.live` — a web chat's streamed replies, published to every process's pages
- :mod:`~gateway.store.channel` — the pipelined connection every script goes through
"""

from __future__ import annotations

from gateway.store.caches import READ_AHEAD_SECONDS, TranscriptCache
from gateway.store.compaction import COMMIT_RECORD_TTL_SECONDS, CompactionCommit
from gateway.store.entries import MIN_SEEN_TTL_SECONDS
from gateway.store.errors import StaleLock, StoreError, UnknownSession, VersionConflict, WrongKeyType
from gateway.store.figures import ChatFigures
from gateway.store.keys import ChatKeys, chat_index_key, check_key_part
from gateway.store.locks import Lock
from gateway.store.meta import COMMIT_META_FIELDS, SETTABLE_META_FIELDS, SessionMeta, reply_meta
from gateway.store.session_store import SessionStore
from gateway.store.sessions import SessionOutline
from gateway.store.transcript import ORIGINAL_MARKER_TTL_SECONDS

__all__ = [
    "COMMIT_META_FIELDS",
    "COMMIT_RECORD_TTL_SECONDS",
    "MIN_SEEN_TTL_SECONDS",
    "ORIGINAL_MARKER_TTL_SECONDS",
    "READ_AHEAD_SECONDS",
    "SETTABLE_META_FIELDS",
    "ChatFigures",
    "ChatKeys",
    "CompactionCommit",
    "Lock",
    "SessionMeta",
    "SessionOutline",
    "SessionStore",
    "StaleLock",
    "StoreError",
    "TranscriptCache",
    "UnknownSession",
    "VersionConflict",
    "WrongKeyType",
    "chat_index_key",
    "check_key_part",
    "reply_meta",
]
