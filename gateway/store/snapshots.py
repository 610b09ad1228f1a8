"""The snapshot: a chat's current session id, meta and live transcript in one round trip, decoded
against the transcript this process holds so only newer messages cross the wire."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.messages import Message
from gateway.store import scripts
from gateway.store.bodies import Unreadable, decode_entries, in_order
from gateway.store.caches import HeldTranscript, TranscriptCache, held_args
from gateway.store.keys import ChatKeys
from gateway.store.meta import SessionMeta, parse_meta
from gateway.store.routes import Routes


@dataclass(frozen=True)
class SessionRead:
    """What ``read_snapshot`` returned for a session that exists."""

    sid: str
    raw_meta: dict[str, str]
    meta: SessionMeta
    ids: list[str]  # the active list
    wanted: list[str]  # the ids whose bodies came along (those the held transcript cannot have)
    bodies: list[str | None]


@dataclass(frozen=True)
class Transcript:
    good: list[Message]  # the live transcript in order (the held messages themselves, not copies)
    bad: list[Unreadable]
    fresh: list[Message]  # the messages decoded from this read
    appended: bool  # every held message is still there and only newer ones came: extend, no rebuild


async def read(
    routes: Routes, keys: ChatKeys, transcripts: TranscriptCache, messages: bool
) -> tuple[Any, HeldTranscript | None]:
    """The snapshot script's reply, and the held transcript it was read against."""
    held = transcripts.get(keys.chat) if messages else None
    reply = await routes.script(
        scripts.SNAPSHOT, [keys.session], [keys.base, "1" if messages else "0", *held_args(held)]
    )
    return reply, held


def parse(reply: Any) -> SessionRead | None:
    """The session read, or None when the chat has none (see :func:`dangling`)."""
    if reply[0] is None:
        return None
    sid, pairs, ids, wanted, bodies = reply
    raw = dict(zip(pairs[::2], pairs[1::2]))
    return SessionRead(sid, raw, parse_meta(sid, raw), ids, wanted, bodies)


def dangling(reply: Any) -> str | None:
    """For a reply without a session: the id the chat's pointer names although it does not exist."""
    return str(reply[1]) if len(reply) > 1 and reply[1] else None


async def assemble(routes: Routes, keys: ChatKeys, read: SessionRead, held: HeldTranscript | None) -> Transcript:
    """The live transcript from the bodies just read and the held ones, reading any id in neither."""
    fresh, bad = decode_entries(read.wanted, read.bodies)
    known = held.messages if held is not None and held.session_id == read.sid else {}
    found = {message["_id"]: message for message in fresh}
    good, missing = in_order(read.ids, found, known)
    if missing:  # an old message back in the list (a compaction may keep any stored id): read it
        more, more_bad = decode_entries(missing, await routes.channel.call("HMGET", keys.msg(read.sid), *missing))
        found.update((message["_id"], message) for message in more)
        bad += more_bad
        good, _ = in_order(read.ids, found, known)
    appended = held is not None and bool(known) and not missing and len(read.ids) == len(known) + len(found)
    return Transcript(good, bad, fresh, appended)


def remember(
    transcripts: TranscriptCache, chat: str, held: HeldTranscript | None, read: SessionRead, transcript: Transcript
) -> None:
    """Hold what was read for the chat's next snapshot."""
    if not (
        transcript.appended and held is not None and transcripts.extend(chat, held, read.meta.next_id, transcript.fresh)
    ):
        transcripts.put(chat, read.sid, read.meta.next_id, transcript.good)
