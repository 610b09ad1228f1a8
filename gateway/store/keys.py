"""Names of a chat's Redis keys.

Every key of one chat carries the chat as its Redis Cluster hash tag, so every multi-key step of
the store is one Lua script on one slot::

    {prefix}:{<chat>}:session              current session id of the chat (string)
    {prefix}:{<chat>}:sessions             sorted set: the chat's conversations by start time (sid -> created_at)
    {prefix}:{<chat>}:s:<sid>:meta         session meta hash (counters, summary, guard state)
    {prefix}:{<chat>}:s:<sid>:msg          hash  message id -> JSON body, every version ever stored
    {prefix}:{<chat>}:s:<sid>:active       list of message ids: the live transcript, in order
    {prefix}:{<chat>}:s:<sid>:archive      list of message ids folded away by compactions, in order
    {prefix}:{<chat>}:s:<sid>:original:<entry id>  id of a long message archived whole for that entry (EX 7 days)
    {prefix}:{<chat>}:lock                 chat lock (random token, PX expiry)
    {prefix}:{<chat>}:fence                fencing counter, +1 per lock acquisition
    {prefix}:{<chat>}:quarantine           list of JSON records of unreadable stored messages
    {prefix}:{<chat>}:seen:<update_id>     platform update dedupe marker (EX >= 24 h)
    {prefix}:{<chat>}:inbox                list of incoming messages not yet answered (gateway.store.inbox)
    {prefix}:{<chat>}:stop                 when a ``/stop`` arrived, until a running turn honours it (EX 10 min)
    {prefix}:{<chat>}:outage               the chat's outage record: since when, how many tries (gateway.store.outages)
    {prefix}:{<chat>}:reply:<entry id>     the messages a streamed reply posted (gateway.store.journal)
    {prefix}:{<chat>}:budget:<name>        a send-budget token bucket of the chat (gateway.store.buckets); bot-wide
                                           buckets use a scope such as ``tg:bot`` in place of the chat
    {prefix}:{<chat>}:compaction:<cid>     result of compaction ``cid`` (EX 7 days), for idempotent retries
    {prefix}:{<chat>}:activity             stream of the chat's turns, compactions and errors, the newest ~1,000
                                           (gateway.store.activity)
    {prefix}:{<chat>}:totals               hash: what the chat has spent since it was first recorded
                                           (gateway.store.activity)
    {prefix}:{<chat>}:live                 pub/sub channel of a web chat's streamed replies (gateway.store.live)
    {prefix}:{<chat>}:media:<sha256>       hash: one item the chat sent, stored once by content hash: its bytes
                                           (dropped when the chat's allowance is full), mime, name, file id
                                           (gateway.store.media)
    {prefix}:{<chat>}:media:held           sorted set: the items whose bytes are kept, by when they were stored
    {prefix}:{<chat>}:media:bytes          the bytes those items take, together (bounded by media.max_total_bytes)
    {prefix}:{<chat>}:told                 hash: notices the chat was given once, by when (gateway.store.told)
    {prefix}:{<chat>}:taken:<entry id>     a message's items as taken in, for the turn's retries (gateway.store.taken)
    {prefix}:{<chat>}:emb:<part>           the messages' vectors for the search by meaning, what waits to be
                                           embedded, the embedder's lock (gateway.store.embeddings)
    {prefix}:{<chat>}:memory:<part>        a group's own memory: entries, their texts, the next number
                                           (gateway.store.memory)

and keys of no one chat::

    {prefix}:ready                         sorted set: chats with pending entries, by when they are due
                                           (gateway.store.inbox)
    {prefix}:chats                         sorted set: every chat that ever sent a message, by its latest one
    {prefix}:chats:backfilled              marks that chats stored before that index existed were added to it
    {prefix}:embeddings:due                sorted set: chats whose new messages wait to be embedded, by when
                                           (gateway.store.embeddings)
    {prefix}:{mem:<person>}:<part>         a person's memory, every scope: entries, their texts, the next number
                                           (gateway.store.memory; the person's own hash tag, one slot a call)
    {prefix}:lease:<what>                  which process holds a lease, e.g. ``poll:tg:<bot id>``
                                           (gateway.store.leases); under the deployment's own prefix, not a
                                           bot's: a token is the cluster's

Message bodies are written once and never rewritten: the active and archive lists hold
ids only, so a compaction moves ids between lists and stores just the messages it
creates (the summary, stubs, edited copies) — it never re-inserts the transcript.

What grows, by design: the ``msg`` hash and the ``archive`` list of a session grow with
everything ever said in it and are never trimmed (every original stays retrievable by id,
however many compactions folded it away); so do the ``media:<sha256>`` hashes of a chat's
items, but an item's bytes are dropped, oldest first, when the chat's ``media:bytes`` would
pass its allowance (what stays is its name, mime and file id, a few hundred bytes).
Everything else is bounded: ``activity`` by its length, ``active`` by the context window
(compaction keeps it there), ``meta`` by the summary cap, ``quarantine`` by the number of
corrupted entries, and the lock, ``seen`` and ``compaction`` keys expire.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from typing import Any


def text_of(value: object) -> str:
    """A Redis reply's bytes (or text) as text."""
    return value.decode() if isinstance(value, bytes) else str(value)


def check_key_part(name: str, value: Any) -> str:
    """Braces would move or break the hash tag that keeps a chat on one cluster slot."""
    if not isinstance(value, str) or not value or "{" in value or "}" in value:
        raise ValueError(f"{name} must be a non-empty string without braces, got {value!r}")
    return value


def chat_index_key(prefix: str) -> str:
    """``{prefix}:chats``: every chat that ever sent a message, scored by when its latest one arrived
    (the one key that lists chats; written by the intake, read by the operator view)."""
    return f"{prefix}:chats"


def chat_index_backfilled_key(prefix: str) -> str:
    """``{prefix}:chats:backfilled``: set once the chats stored before the index existed were added to it."""
    return f"{prefix}:chats:backfilled"


def ready_key(prefix: str) -> str:
    """``{prefix}:ready``: the chats with pending inbox entries, scored by when a worker may take them."""
    return f"{prefix}:ready"


def glob_escape(text: str) -> str:
    """``text`` as a literal in a Redis SCAN ``MATCH`` pattern."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def every_key_pattern(prefix: str) -> str:
    """A SCAN ``MATCH`` pattern for every key under ``prefix`` (to clear a test or benchmark run away)."""
    return glob_escape(prefix) + ":*"


#: Around the chat in every chat's ``session`` key (see :class:`ChatKeys`).
_SESSION_HEAD, _SESSION_TAIL = ":{", "}:session"


def session_keys_pattern(prefix: str) -> str:
    """A SCAN ``MATCH`` pattern for every chat's ``session`` key under ``prefix``."""
    return glob_escape(prefix + _SESSION_HEAD) + "*" + glob_escape(_SESSION_TAIL)


def chat_of_session_key(prefix: str, key: str) -> str | None:
    """The chat whose ``session`` key ``key`` is, or None for another key."""
    head = prefix + _SESSION_HEAD
    if len(key) > len(head) + len(_SESSION_TAIL) and key.startswith(head) and key.endswith(_SESSION_TAIL):
        return key[len(head) : -len(_SESSION_TAIL)]
    return None


def new_session_id() -> str:
    return secrets.token_hex(6)


@dataclass(frozen=True)
class ChatKeys:
    """Names of one chat's keys; all share the hash tag ``{<chat>}``."""

    prefix: str
    chat: str
    base: str = field(init=False, repr=False, compare=False)  # every key starts with it

    def __post_init__(self) -> None:
        object.__setattr__(self, "base", f"{self.prefix}:{{{self.chat}}}")

    @property
    def session(self) -> str:
        return f"{self.base}:session"

    @property
    def sessions(self) -> str:
        return f"{self.base}:sessions"

    @property
    def lock(self) -> str:
        return f"{self.base}:lock"

    @property
    def fence(self) -> str:
        return f"{self.base}:fence"

    @property
    def quarantine(self) -> str:
        return f"{self.base}:quarantine"

    def seen(self, update_id: str | int) -> str:
        return f"{self.base}:seen:{update_id}"

    @property
    def inbox(self) -> str:
        return f"{self.base}:inbox"

    @property
    def stop(self) -> str:
        return f"{self.base}:stop"

    @property
    def outage(self) -> str:
        return f"{self.base}:outage"

    @property
    def activity(self) -> str:
        return f"{self.base}:activity"

    @property
    def totals(self) -> str:
        return f"{self.base}:totals"

    @property
    def live(self) -> str:
        return f"{self.base}:live"

    def media(self, sha: str) -> str:
        return f"{self.base}:media:{sha}"

    @property
    def media_held(self) -> str:
        return f"{self.base}:media:held"

    @property
    def media_bytes(self) -> str:
        return f"{self.base}:media:bytes"

    @property
    def told(self) -> str:
        return f"{self.base}:told"

    def taken(self, entry_id: str) -> str:
        return f"{self.base}:taken:{entry_id}"

    def reply(self, entry_id: str) -> str:
        return f"{self.base}:reply:{entry_id}"

    def approval(self, approval_id: str) -> str:
        return f"{self.base}:approval:{approval_id}"

    def spent(self, period: str) -> str:
        return f"{self.base}:spent:{period}"

    def reserved(self, period: str) -> str:
        return f"{self.base}:reserved:{period}"

    def budget(self, name: str) -> str:
        return f"{self.base}:budget:{name}"

    def compaction(self, compaction_id: str) -> str:
        return f"{self.base}:compaction:{compaction_id}"

    def meta(self, sid: str) -> str:
        return f"{self.base}:s:{sid}:meta"

    def msg(self, sid: str) -> str:
        return f"{self.base}:s:{sid}:msg"

    def active(self, sid: str) -> str:
        return f"{self.base}:s:{sid}:active"

    def archive(self, sid: str) -> str:
        return f"{self.base}:s:{sid}:archive"

    def original(self, sid: str, entry_id: str) -> str:
        return f"{self.base}:s:{sid}:original:{entry_id}"
