"""SessionStore: the one facade over the store's concerns, as everybody uses it.

Its methods check names, drop what a write outdates in this process's caches (every write drops
the chat's read-ahead: it no longer stands for the session), and hand the work to the concern
modules (sessions, locks, entries, snapshots, transcript, compaction). The store is its own
:class:`~gateway.store.routes.Routes`: the concern modules reach Redis through it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from redis.asyncio import Redis

from agent.messages import Message
from agent.transcript_repair import Placement
from gateway.store import compaction, entries, figures, locks, sessions, snapshots, transcript
from gateway.store.bodies import Unreadable
from gateway.store.caches import ReadAhead, TranscriptCache
from gateway.store.channel import RedisChannel
from gateway.store.compaction import COMMIT_RECORD_TTL_SECONDS, CompactionCommit
from gateway.store.entries import MIN_SEEN_TTL_SECONDS
from gateway.store.figures import ChatFigures
from gateway.store.keys import ChatKeys, check_key_part, text_of
from gateway.store.locks import Lock
from gateway.store.meta import SessionMeta
from gateway.store.routes import Routes
from gateway.store.sessions import SessionOutline

log = logging.getLogger(__name__)


class SessionStore(Routes):
    """Chats' sessions in Redis (a ``redis.asyncio`` client with ``decode_responses=True``).

    The scripts (every step of the message path) go through ``channel``; the gateway passes
    :func:`gateway.store.channel.channel_for`, the default sends them through ``redis`` itself
    (:mod:`gateway.store.routes` says which operation takes which route).
    """

    #: How many times :meth:`active` re-reads when a write races its quarantine of bad entries.
    QUARANTINE_ATTEMPTS = 3

    def __init__(
        self,
        redis: Redis,
        prefix: str = "fg",
        *,
        commit_record_ttl_seconds: int = COMMIT_RECORD_TTL_SECONDS,
        channel: RedisChannel | None = None,
        transcript_cache_tokens: int = 0,
    ) -> None:
        super().__init__(redis, channel)
        self.prefix = check_key_part("prefix", prefix)
        self.commit_record_ttl_seconds = int(commit_record_ttl_seconds)
        self.transcripts = TranscriptCache(transcript_cache_tokens)
        self._read_ahead = ReadAhead(self.transcripts)

    def keys(self, chat: str) -> ChatKeys:
        """Key names of ``chat`` (e.g. ``"tg:123456"``)."""
        return ChatKeys(self.prefix, check_key_part("chat", chat))

    # ----------------------------------------------------------------- sessions

    async def stored_session(self, chat: str) -> str | None:
        """The chat's current session id, or None for a chat nothing was ever stored for (reads only)."""
        return await sessions.stored_session(self, self.keys(chat))

    async def current_session(self, chat: str) -> str:
        """The chat's current session id, creating the first session when there is none."""
        keys = self.keys(chat)
        if sid := await self.stored_session(chat):
            return sid
        return await sessions.create(self, keys, current=True)

    async def new_session(self, chat: str, *, parent: str | None = None, lock: Lock | None = None) -> str:
        """Start a new session and point the chat at it (``/new``); the old one stays stored.

        With ``parent`` the new session links to it, continues its message ids and keeps its model.
        With ``lock`` the switch is fenced: a holder whose lock expired cannot move the pointer
        away from what the next holder committed (:class:`StaleLock`).
        """
        self._read_ahead.drop(chat)
        return await sessions.create(self, self.keys(chat), current=False, parent=parent, lock=lock)

    async def indexed_sessions(self, chat: str) -> list[tuple[str, float]]:
        """The chat's conversations as ``(session it started in, start time)``, oldest first.

        :meth:`new_session` and the chat's first :meth:`current_session` index what they create;
        a rotating compaction's continuation is not indexed, it is reached from its predecessor's
        ``successor_session_id``. A chat stored before the index existed gets it built here, once,
        from the sessions stored under the chat's keys. A session started while that build runs
        may be missing from it; callers add the chat's current conversation themselves.
        """
        return await sessions.indexed(self, self.keys(chat))

    async def switch_session(self, chat: str, sid: str, *, lock: Lock) -> str:
        """Point the chat at its stored session ``sid`` (``/resume``); the session it leaves stays as it is.

        Fenced like :meth:`new_session`. Refuses a session that does not exist (:class:`UnknownSession`)
        or that a rotating compaction continued elsewhere (:class:`VersionConflict`): only the newest
        session of a conversation is ever written to.
        """
        self._read_ahead.drop(chat)
        keys = self.keys(chat)
        return await sessions.point_at(self, keys, check_key_part("session id", sid), lock)

    async def figures(self, chats: Sequence[str]) -> list[ChatFigures | None]:
        """Each chat's current conversation in numbers (None where nothing is stored), in two round trips."""
        return await figures.figures(self, [self.keys(chat) for chat in chats])

    async def session_outline(self, chat: str, sid: str) -> SessionOutline:
        """The session's message ids (live and archived) and their stored sizes, without reading bodies."""
        keys = self.keys(chat)
        return await sessions.outline(self, keys, check_key_part("session id", sid))

    # ----------------------------------------------------------------- locks

    async def acquire_lock(self, chat: str, ttl_seconds: float) -> Lock | None:
        """Try once to take the chat's lock; ``None`` when another worker holds it.

        Timing semantics: the lock exists from the moment Redis runs the acquiring script
        until ``ttl_seconds`` later by the server's clock, unless it is extended or released
        first. That moment lies somewhere inside the call, so a holder must count its
        ``ttl_seconds`` from *before* it called (the earliest possible start) and stop
        relying on the lock once they have elapsed on its own monotonic clock (only the
        clocks' rate drift matters, both sides measure a duration).

        Every write that takes ``lock=`` checks the token inside the same script that
        writes: a write Redis runs after the lock expired or was taken over is refused with
        :class:`StaleLock` and writes nothing, even if the holder believed it had time left;
        a write Redis runs before expiry succeeds even when its reply arrives after expiry.
        Each acquisition increments the chat's fence counter; the returned ``fence`` is
        larger than that of every earlier holder, and a session written by a newer holder
        refuses writes carrying an older fence.
        """
        lock, _head = await locks.acquire(self, self.keys(chat), ttl_seconds, self._read_ahead, peek_inbox=False)
        return lock

    async def claim(self, chat: str, ttl_seconds: float, *, token: str | None = None) -> tuple[Lock | None, str | None]:
        """:meth:`acquire_lock` plus the oldest inbox entry of the chat, in one round trip.

        The same step reads the session ahead for that entry, so its :meth:`snapshot` costs no round trip.
        ``token`` (:func:`~gateway.store.locks.new_token`) lets a caller whose claim got no answer give back
        the lock the claim may have taken.
        """
        return await locks.acquire(self, self.keys(chat), ttl_seconds, self._read_ahead, peek_inbox=True, token=token)

    async def extend_lock(self, lock: Lock, ttl_seconds: float) -> None:
        """Make the lock expire ``ttl_seconds`` from when Redis runs this (replaces the remaining TTL).

        The same timing rule as :meth:`acquire_lock` applies, counted from before this call.

        :raises StaleLock: the lock had already expired or belongs to another worker; it is
            not re-taken (a holder that lost its lock must start over under a new one).
        """
        await locks.extend(self, self.keys(lock.chat), lock, ttl_seconds)

    async def release_lock(self, lock: Lock) -> bool:
        """Release the lock if this token still holds it; ``False`` when it had expired or moved on."""
        self._read_ahead.drop(lock.chat)
        return await locks.release(self, self.keys(lock.chat), lock)

    async def release_if_idle(self, lock: Lock) -> str | None:
        """Release the lock unless an inbox entry is waiting; then keep it and return that entry."""
        self._read_ahead.drop(lock.chat)
        return await locks.release_if_idle(self, self.keys(lock.chat), lock)

    # ----------------------------------------------------------------- inbox entries

    async def finish_entry(
        self, lock: Lock, sid: str, entry: str, *, ahead_for_next: bool = True, **meta: Any
    ) -> str | None:
        """Set ``meta`` fields, remove the handled ``entry`` from the inbox, return the next entry (fenced).

        The same step reads the session ahead for that next entry, so its :meth:`snapshot` costs no
        round trip — unless ``ahead_for_next`` is False, for a batch whose next entry is finished too.
        """
        return await entries.finish(
            self, self.keys(lock.chat), self._read_ahead, lock, sid, entry, meta, ahead_for_next=ahead_for_next
        )

    async def seen(self, chat: str, update_id: str | int, ttl_seconds: int = MIN_SEEN_TTL_SECONDS) -> bool:
        """True the first time a platform update id is offered for the chat, False for a redelivery."""
        if ttl_seconds < MIN_SEEN_TTL_SECONDS:
            raise ValueError(f"dedupe ttl must be at least {MIN_SEEN_TTL_SECONDS} s, got {ttl_seconds}")
        key = self.keys(chat).seen(update_id)
        return bool(await self.redis.set(key, "1", nx=True, ex=int(ttl_seconds)))

    # ----------------------------------------------------------------- snapshot

    async def snapshot(self, chat: str, *, messages: bool = True) -> tuple[str, SessionMeta, list[Message]]:
        """The chat's current session id, meta and (with ``messages``) live transcript in one round trip.

        Messages this process read before come from :class:`TranscriptCache`; only newer ones
        cross the wire and are decoded. A session is created when the chat has none;
        unreadable entries are quarantined as in :meth:`active`.
        """
        keys = self.keys(chat)
        ahead = self._read_ahead.take(chat)  # read by the step that handed out the entry: no round trip
        for _attempt in range(self.QUARANTINE_ATTEMPTS):
            reply, held = ahead or await snapshots.read(self, keys, self.transcripts, messages)
            ahead = None
            read = snapshots.parse(reply)
            if read is None:
                await self._give_chat_a_session(chat, snapshots.dangling(reply))
                continue
            if not messages:
                return read.sid, read.meta, []
            live = await snapshots.assemble(self, keys, read, held)
            if not live.bad:
                snapshots.remember(self.transcripts, chat, held, read, live)
                return read.sid, read.meta, [message.copy() for message in live.good]  # the cache stays as stored
            self.transcripts.drop(chat)
            if await self._quarantine_entries(chat, read.sid, read.raw_meta.get("version", "0"), live.good, live.bad):
                return read.sid, await self.meta(chat, read.sid), live.good
        sid = await self.current_session(chat)
        return sid, await self.meta(chat, sid), await self.active(chat, sid)

    async def _give_chat_a_session(self, chat: str, dangling: str | None) -> None:
        """A chat without a session gets its first; one whose pointer names a session that does not
        exist (its meta lost or deleted by hand) gets a new one rather than every message refused."""
        if dangling is None:
            await self.current_session(chat)
            return
        self._read_ahead.drop(chat)
        self.transcripts.drop(chat)
        await sessions.replace_missing(self, self.keys(chat), dangling)

    # ----------------------------------------------------------------- messages

    async def append(
        self, chat: str, sid: str, messages: Sequence[Message], *, lock: Lock, meta: Mapping[str, Any] | None = None
    ) -> list[str]:
        """Store ``messages`` at the end of the active transcript; return their new ids.

        All or nothing: any invalid message raises :class:`InvalidMessage` naming it and
        nothing is written. A message that already carries an ``_id`` is refused (it is
        stored already; appending it again would duplicate it). ``meta`` fields (as in
        :meth:`update_meta`) are set in the same atomic step, so a turn's messages and its
        bookkeeping land together. On success the given dicts receive their ``_id``,
        ``_ts`` and ``_tok``.
        """
        self._read_ahead.drop(chat)
        keys = self.keys(chat)
        return await transcript.append(self, keys, check_key_part("session id", sid), messages, lock, meta)

    async def archive_original(self, chat: str, sid: str, message: Message, *, lock: Lock, entry_id: str) -> str:
        """Store ``message`` whole in the session's archive, not in the live transcript; return its id.

        For a message too long to reach the model whole: the live transcript gets an excerpt that
        names this id. Once per ``entry_id``: a retried turn gets the id stored the first time.
        """
        self._read_ahead.drop(chat)
        keys = self.keys(chat)
        return await transcript.archive_original(self, keys, check_key_part("session id", sid), message, lock, entry_id)

    async def active(self, chat: str, sid: str) -> list[Message]:
        """The live transcript in order, read in one round trip.

        A stored entry that is not JSON or not a valid message is quarantined (moved out
        of the active list into the chat's quarantine list with its raw text and the
        reason, meta totals corrected) and the rest is returned; bad data never raises.
        """
        keys = self.keys(chat)
        check_key_part("session id", sid)
        for _attempt in range(self.QUARANTINE_ATTEMPTS):
            version, good, bad = await transcript.read_active(self, keys, sid)
            if not bad or await self._quarantine_entries(chat, sid, version, good, bad):
                return good
        log.warning("%s/%s: kept unreadable entries in place; the session changed during every attempt", chat, sid)
        return good

    async def _quarantine_entries(
        self, chat: str, sid: str, version: str, good: list[Message], bad: list[Unreadable]
    ) -> bool:
        self._read_ahead.drop(chat)
        return await transcript.quarantine(self, self.keys(chat), sid, version, good, bad)

    async def store_repair(
        self,
        chat: str,
        sid: str,
        version: int,
        keep: Sequence[Message],
        moved: Sequence[Message],
        reason: str,
        placements: Sequence[Placement],
    ) -> bool:
        """Store a turn's repair of the live transcript in one atomic step, so later reads need none:
        stand-ins (for tool results never stored) go in at their places, ``moved`` (stored, well-formed
        messages that break the transcript, as an orphan tool result) go to the quarantine, their bodies
        kept so they stay retrievable by id.

        Applies only if the session is still at ``version`` and each placement's message is still
        followed by the one read after it (False otherwise, nothing written); ``keep`` is the rest of
        the live transcript. On success the stand-ins receive their ``_id``, ``_ts`` and ``_tok``.
        """
        self._read_ahead.drop(chat)
        self.transcripts.drop(chat)  # the held copy lists neither the stand-ins nor the moves
        keys = self.keys(chat)
        bad = transcript.quarantine_records(moved, reason)
        return await transcript.store_repair(
            self, keys, check_key_part("session id", sid), str(version), list(keep), bad, placements
        )

    async def quarantined(self, chat: str) -> list[dict[str, Any]]:
        """Records of entries taken out of active transcripts: session_id, id, raw, reason, ts."""
        return await transcript.quarantined(self, self.keys(chat))

    async def get_messages(self, chat: str, sid: str, ids: Iterable[str]) -> list[Message]:
        """Stored messages by id (any version, active or archived), in the order asked.

        Ids the session does not hold, and bodies that cannot be read, are skipped with a warning.
        """
        keys = self.keys(chat)
        return await transcript.get_messages(self, keys, check_key_part("session id", sid), ids)

    async def archive_marks(self, chat: str, sid: str, at: int) -> tuple[int, str | None, str | None] | None:
        """The archive's length, its first id and its id at position ``at``, in one round trip; None when the
        session does not exist. An archive is only appended to, so these tell a reader holding its first ``at + 1``
        ids whether what it holds is still the archive's beginning."""
        keys = self.keys(chat)
        archive = keys.archive(check_key_part("session id", sid))
        exists, length, first, found = await self.channel.call_in_order(
            ("EXISTS", keys.meta(sid)), ("LLEN", archive), ("LINDEX", archive, 0), ("LINDEX", archive, at)
        )
        if not exists:
            return None
        return int(length), None if first is None else text_of(first), None if found is None else text_of(found)

    async def archive_ids(self, chat: str, sid: str, start: int = 0) -> list[str]:
        """The ids of the session's archive from position ``start`` on, in archive order."""
        keys = self.keys(chat)
        return [
            text_of(i)
            for i in await self.channel.call("LRANGE", keys.archive(check_key_part("session id", sid)), start, -1)
        ]

    async def archive(self, chat: str, sid: str) -> list[transcript.ArchivedMessage]:
        """Messages compactions folded away, in archive order, each marked ``active=0, compacted=1``."""
        keys = self.keys(chat)
        return await transcript.read_archive(self, keys, check_key_part("session id", sid))

    # ----------------------------------------------------------------- meta

    async def meta(self, chat: str, sid: str) -> SessionMeta:
        """The session's meta in one HGETALL (its size does not depend on the transcript's)."""
        return await sessions.read_meta(self, self.keys(chat), sid)

    async def update_meta(self, chat: str, sid: str, *, lock: Lock, **fields: Any) -> int:
        """Set meta fields (``None`` clears one) under the lock; return the new version.

        Settable: ``last_prompt_tokens``, ``tokens_at_report``, ``compaction_count``,
        ``previous_summary``, ``engine_state`` (dict), ``usage_totals`` (dict), ``model``,
        ``last_activity_at``, ``last_entry_id``, ``last_reply``, ``replied_entry_id``, ``batch_entry_ids``,
        ``system_prompt``.
        Token and message totals, ids and versions are the store's own.
        """
        self._read_ahead.drop(chat)
        keys = self.keys(chat)
        return await sessions.update_meta(self, keys, check_key_part("session id", sid), lock, fields)

    # ----------------------------------------------------------------- compaction

    async def commit_compaction(
        self,
        chat: str,
        sid: str,
        new_messages: Sequence[Message],
        *,
        lock: Lock,
        in_place: bool,
        compaction_id: str,
        expected_version: int | None = None,
        meta: Mapping[str, Any] | None = None,
        archive_new: Sequence[Message] = (),
    ) -> CompactionCommit:
        """Replace the session's active transcript with ``new_messages`` in one atomic step.

        Messages carrying an ``_id`` of this session are kept as stored (never re-inserted);
        messages without one are new versions (summary, stubs, edited copies) and get ids.
        In place, every id leaving the active list is appended to the archive and the
        session id stays; rotated (``in_place=False``), a new session linked by
        ``parent_session_id`` takes the new list and the chat's pointer, and the old
        session is left whole (marked with its successor so nothing writes to it again).
        Meta: tokens and count recomputed, ``compaction_count`` + 1, the reported prompt
        usage cleared, then ``meta`` fields applied.

        All checks — lock, ``expected_version``, the chat still pointing at ``sid`` when
        rotating, kept ids, key types — run before the first write, so a refusal leaves
        the old state whole. Committing the same ``compaction_id`` again (for instance
        after the reply was lost) writes nothing and returns the first result with
        ``replayed`` set, but only to a caller that still holds the lock: a holder whose lock
        expired gets :class:`StaleLock` even then, so it never takes another worker's commit
        for its own. On success the new dicts receive their ``_id``, ``_ts`` and ``_tok``.

        ``archive_new`` are messages that were never stored but are not in ``new_messages``
        either — created during a turn and folded by a compaction within it; they are stored
        straight into the archive (of the old session when rotating) so none is lost.
        """
        self._read_ahead.drop(chat)
        keys = self.keys(chat)
        return await compaction.commit(
            self,
            keys,
            check_key_part("session id", sid),
            new_messages,
            lock=lock,
            in_place=in_place,
            compaction_id=compaction_id,
            expected_version=expected_version,
            meta=meta,
            archive_new=archive_new,
            record_ttl_seconds=self.commit_record_ttl_seconds,
        )
