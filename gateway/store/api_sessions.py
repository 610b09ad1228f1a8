"""Which API session a stateless client's request continues, found through an index of its conversations.

A client without the session header resends its whole conversation every time. After each answered turn
the gateway records the conversation as the client will resend it (the request's messages and the reply)
as a chain hash (:mod:`gateway.api.matching`); a later request is matched by looking its own chain up, per
API key, in two hashes under the key's hash tag (one Redis Cluster slot per API key)::

    {prefix}:api:{<key name>}:chains    hash  chain hash (16 raw bytes) -> "<position>:<session id>"
    {prefix}:api:{<key name>}:heads     hash  session id -> the position of its latest answered turn

A position counts the messages the client sees, so nothing here reads a transcript: a lookup costs the
same against a session of ten messages and one of 100,000 compacted into its archive. The fast path (a
request that continues where its session stands, or resends the same history to have the last answer
again) is one script, one round trip. Only a request whose history was edited further back, or that no
session reached, makes a second: one HMGET of the request's earlier answered points. A request found
that way always forks: its history is not where any session stands, and appending what it holds past the
point found could store a message twice (an answer whose record a crash lost is in the session already).

How it grows: one ``chains`` field per answered turn (entries are recorded only where an answer ends, never
per message) and one ``heads`` field per session; about a hundred bytes a turn, a small fraction of what the
session itself stores, and like the session's archive it is kept. :meth:`ApiSessionIndex.forget` drops a
key's index whole (its sessions stay; a client of the key then starts new ones).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from agent.messages import Message
from gateway.store.channel import RedisChannel
from gateway.store.errors import VersionConflict
from gateway.store.keys import check_key_part, text_of
from gateway.store.routes import run
from gateway.store.scripts import load
from gateway.store.session_store import SessionStore

LOOKUP = load("api_lookup", helpers=None)
RECORD = load("api_record")

MatchKind = Literal["continues", "forks", "new"]


@dataclass(frozen=True)
class Match:
    """What a request is to the sessions of its API key.

    - ``continues``: it extends ``session_id`` where that session stands; its messages from ``position`` on
      are new to the session.
    - ``forks``: it shares its first ``position`` messages with ``session_id`` and then differs (an edited
      message, a regenerated answer): a new session starts, and ``session_id`` is left as it is.
    - ``new``: it extends no known session (``session_id`` None, ``position`` 0).
    """

    session_id: str | None
    position: int
    kind: MatchKind


NO_MATCH = Match(None, 0, "new")


class ChainPoints(Protocol):
    """A request's answered points as ``(position, chain hash)`` (:class:`gateway.api.matching.Conversation`)."""

    @property
    def prefix(self) -> tuple[int, bytes]:
        """The history before the new turn: the one point the fast path looks up."""
        ...

    def earlier(self) -> Sequence[tuple[int, bytes]]:
        """The answered points before :attr:`prefix`, newest first."""
        ...


@dataclass(frozen=True)
class ApiKeyKeys:
    """Names of one API key's index keys; both share the hash tag ``{<key name>}``."""

    chains: str
    heads: str

    @classmethod
    def of(cls, prefix: str, key_name: str) -> ApiKeyKeys:
        base = f"{prefix}:api:{{{check_key_part('API key name', key_name)}}}"
        return cls(f"{base}:chains", f"{base}:heads")


def _entry(entry: object) -> tuple[int, str]:
    """A ``chains`` value as ``(position, session id)``."""
    position, _, session_id = text_of(entry).partition(":")
    return int(position), session_id


def _judged(position: int, session_id: str, head: object) -> Match:
    """A request that reached ``session_id`` at ``position`` continues it when that is where the session
    stands (or no head is known), and forks from it when the session has gone further."""
    if head in (None, "") or int(text_of(head)) <= position:
        return Match(session_id, position, "continues")
    return Match(session_id, position, "forks")


class ApiSessionIndex:
    """Per API key, the conversations its sessions' clients will resend, for finding a session by history."""

    def __init__(self, channel: RedisChannel, prefix: str = "fg") -> None:
        self.channel = channel
        self.prefix = check_key_part("prefix", prefix)

    def keys(self, key_name: str) -> ApiKeyKeys:
        return ApiKeyKeys.of(self.prefix, key_name)

    async def record(self, key_name: str, session_id: str, point: tuple[int, bytes]) -> int:
        """Record that ``session_id``'s client will next resend the conversation ``point`` stands for
        (:meth:`gateway.api.matching.Conversation.after_reply`); call it once the turn's answer is stored.
        Returns the session's head (its latest recorded position)."""
        position, chain_hash = point
        keys = self.keys(key_name)
        sid = check_key_part("session id", session_id)
        head = await run(RECORD, self.channel, [keys.chains, keys.heads], [chain_hash, int(position), sid])
        return int(head)

    async def lookup(self, key_name: str, request: ChainPoints) -> Match:
        """The session ``request`` continues or forks from, or :data:`NO_MATCH`.

        First the request's whole history (one round trip); only when no session holds it, the longest
        earlier point a session holds (one HMGET), which the request forks from.
        """
        position, chain_hash = request.prefix
        if position == 0:  # no answer in the history: nothing recorded can match, and Redis is not asked
            return NO_MATCH
        found = await self.continued(key_name, position, chain_hash)
        return found if found is not None else await self.longest(key_name, request.earlier())

    async def continued(self, key_name: str, position: int, chain_hash: bytes) -> Match | None:
        """The fast path: the match of the history ``chain_hash`` (of ``position`` messages), None if unknown."""
        keys = self.keys(key_name)
        reply = await run(LOOKUP, self.channel, [keys.chains, keys.heads], [chain_hash])
        if not reply:
            return None
        position, session_id = _entry(reply[0])
        return _judged(position, session_id, reply[1])

    async def longest(self, key_name: str, points: Sequence[tuple[int, bytes]]) -> Match:
        """The fork from the longest of ``points`` (newest first) a session holds, or :data:`NO_MATCH`."""
        if not points:
            return NO_MATCH
        keys = self.keys(key_name)
        entries = await self.channel.call("HMGET", keys.chains, *(chain_hash for _, chain_hash in points))
        entry = next((entry for entry in entries if entry is not None), None)
        if entry is None:
            return NO_MATCH
        position, session_id = _entry(entry)
        return Match(session_id, position, "forks")

    async def forget(self, key_name: str) -> None:
        """Drop the key's whole index (a revoked key); its sessions stay stored."""
        keys = self.keys(key_name)
        await self.channel.call("DEL", keys.chains, keys.heads)


# --------------------------------------------------------------------------- a new session's history

#: Messages per append when a session is seeded: each append is one script, and Redis runs nothing else
#: meanwhile, so a long history goes in several short steps.
SEED_CHUNK = 500


async def seed_session(
    store: SessionStore, chat: str, messages: Sequence[Message], *, lock_ttl_seconds: float = 30.0
) -> str:
    """Give ``chat`` (a new API session's chat) its first session holding ``messages``; return its id.

    For a request that starts a new session with a history (a fork, or a client new to the gateway): the
    history goes in before the request's new turn reaches the intake, under the chat's lock, each chunk
    fenced by it. Refuses (:class:`VersionConflict`) a chat whose lock is held or whose session already holds
    messages, so a retried seed never doubles a history; :class:`StaleLock` if the lock ran out meanwhile.
    The given dicts receive their ``_id``, ``_ts`` and ``_tok``, as with :meth:`SessionStore.append`.
    """
    lock = await store.acquire_lock(chat, lock_ttl_seconds)
    if lock is None:
        raise VersionConflict(f"{chat}: the chat is locked; a new session's chat is seeded before it is used")
    try:
        sid = await store.current_session(chat)
        if (await store.meta(chat, sid)).count:
            raise VersionConflict(f"{chat}: session {sid} already holds messages; it is not seeded again")
        for start in range(0, len(messages), SEED_CHUNK):
            await store.append(chat, sid, messages[start : start + SEED_CHUNK], lock=lock)
            await store.extend_lock(lock, lock_ttl_seconds)
    finally:
        await store.release_lock(lock)
    return sid
