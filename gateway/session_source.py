"""One chat's messages as the recovery tools see them: its conversations, their archives and ancestors.

With in-place compaction a conversation keeps one session and its archive holds everything
folded away; with rotation (``in_place: false``) its history lives in the chain of parent
sessions. ``/new`` starts another conversation and ``/resume`` goes back to one; the chat's
session index (:meth:`gateway.store.SessionStore.indexed_sessions`) lists them all, so
nothing said in a chat is out of reach of ``session_search`` — and nothing of another chat
is ever in it: every read goes through the chat's own keys.

Message ids count per conversation, so two conversations of one chat hold the same ids.
The current conversation's messages keep their plain ids (summaries and stubs cite those);
another conversation's are qualified with the session it continues in: ``<sid>:<id>``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agent.messages import Message, is_real_user_message, text_of
from agent.search import DEFAULT_HITS, Neighbour
from agent.tools.recovery import KeptPart, KeptPieces, SearchPiece, conversation_pieces, search_source
from gateway.store import Lock, SessionStore, UnknownSession

#: Sessions followed at most along one chain (a bound against a corrupted, cyclic chain).
MAX_CHAIN = 1_000
#: Between a conversation's session id and a message id in a qualified id.
ID_SEPARATOR = ":"
#: Oldest messages of a conversation read to find the line it started with.
FIRST_LINE_SCAN = 40


@dataclass(frozen=True)
class Conversation:
    """One conversation: the sessions from the one it started in to the one it continues in."""

    sessions: tuple[str, ...]
    started_at: float

    @property
    def head(self) -> str:
        """The session the conversation continues in: the one the chat points at when it is current."""
        return self.sessions[-1]


async def _parents(store: SessionStore, chat: str, sid: str) -> list[str]:
    """Session ids from the oldest ancestor to ``sid`` (rotation links each to its parent)."""
    chain = [sid]
    while len(chain) < MAX_CHAIN:
        try:
            parent = (await store.meta(chat, chain[-1])).parent_session_id
        except UnknownSession:
            break
        if not parent or parent in chain:
            break
        chain.append(parent)
    return list(reversed(chain))


async def _successors(store: SessionStore, chat: str, sid: str) -> list[str]:
    """``sid`` and the sessions rotation continued it in, oldest first; empty for an unknown session."""
    chain: list[str] = []
    current: str | None = sid
    while current and current not in chain and len(chain) < MAX_CHAIN:
        try:
            meta = await store.meta(chat, current)
        except UnknownSession:
            break
        chain.append(current)
        current = meta.successor_session_id
    return chain


async def conversations(store: SessionStore, chat: str, current: str | None = None) -> list[Conversation]:
    """The chat's conversations, oldest first; the one ``current`` belongs to is always among them."""
    found: list[Conversation] = []
    seen: set[str] = set()
    for sid, started in await store.indexed_sessions(chat):
        if sid in seen:
            continue
        chain = await _successors(store, chat, sid)
        if chain:
            seen.update(chain)
            found.append(Conversation(tuple(chain), started))
    if current and current not in seen:  # started while an older chat's index was being built
        chain = [sid for sid in await _parents(store, chat, current) if sid not in seen]
        try:
            started = (await store.meta(chat, chain[0])).created_at
        except UnknownSession:
            started = time.time()
        found.append(Conversation(tuple(chain), started))
        found.sort(key=lambda conversation: conversation.started_at)
    return found


async def _messages_of(store: SessionStore, chat: str, chain: Sequence[str]) -> list[Message]:
    """Every message of a conversation: each session's archive, the ancestors' live lists, the head's live list."""
    messages: list[Message] = []
    for sid in chain:
        try:
            messages += await store.archive(chat, sid)
            if sid != chain[-1]:  # an ancestor's active list is history too
                messages += await store.active(chat, sid)
        except UnknownSession:
            continue
    try:
        messages += await store.active(chat, chain[-1])
    except UnknownSession:
        pass
    # Rotation copies kept messages into the new session under the same ids: show each once.
    unique = {str(m.get("_id")): m for m in messages}
    return list(unique.values())


async def _by_id(store: SessionStore, chat: str, chain: Sequence[str], ids: Sequence[str]) -> dict[str, Message]:
    """Stored messages of a conversation by plain id, looked up from its newest session back."""
    found: dict[str, Message] = {}
    for sid in reversed(chain):
        missing = [i for i in ids if i not in found]
        if not missing:
            break
        for message in await store.get_messages(chat, sid, missing):
            found[str(message["_id"])] = message
    return found


@dataclass(frozen=True)
class _Read:
    """A session's archive as far as it was read: how many ids, the first and the last, its messages made ready.
    An archive only grows (its list is appended to, never trimmed; a body is written once, under a fresh id):
    one whose length did not go down and whose first id and id at the length read are those read is what was
    read plus newer ids, all that is then read; anything else is read again whole."""

    length: int
    first: str | None
    last: str | None
    part: KeptPart


#: Sessions' archives read in this process (by store prefix, chat, conversation, session and label), up to
#: 40M characters of search text over every chat.
ARCHIVES: KeptPieces[_Read] = KeptPieces(40_000_000, lambda read: read.part.piece)
#: How :meth:`ChatHistory.all_messages` labels a conversation's messages: with which session, and whether their
#: ids are qualified with it (another conversation's); None: not labelled.
Label = tuple[str, bool] | None


def _labelled(messages: Sequence[Message], label: Label) -> list[Message]:
    if label is None:
        return list(messages)
    sid, qualified = label
    if qualified:
        return [{**m, "_id": f"{sid}{ID_SEPARATOR}{m.get('_id')}", "_session": sid} for m in messages]
    return [{**m, "_session": sid} for m in messages]


async def _archive_read(store: SessionStore, chat: str, sid: str, key: Hashable, label: Label) -> _Read | None:
    """Session ``sid``'s archive ready for searching, reading what it gained since last read; None: no session."""
    kept = ARCHIVES.get(key)
    marks = await store.archive_marks(chat, sid, max(0, kept.length - 1) if kept else 0)
    if marks is None:
        return None
    length, first, at = marks
    if kept is not None and length >= kept.length and (kept.length == 0 or (first, at) == (kept.first, kept.last)):
        if length == kept.length:
            return kept
        ids = await store.archive_ids(chat, sid, kept.length)
        newer = await _archived(store, chat, sid, ids)
        part = kept.part.extended(newer, _labelled(newer, label)) if ids else None
        if part is not None:
            return ARCHIVES.put(key, _Read(kept.length + len(ids), kept.first or ids[0], ids[-1], part))
    ids = await store.archive_ids(chat, sid)
    messages = await _archived(store, chat, sid, ids)
    part = KeptPart.of(messages, _labelled(messages, label))
    return ARCHIVES.put(key, _Read(len(ids), ids[0] if ids else None, ids[-1] if ids else None, part))


async def _pieces(store: SessionStore, chat: str, chain: Sequence[str], label: Label) -> list[SearchPiece] | None:
    """What :func:`_messages_of` reads (labelled) as pieces, archives kept between searches; None: read it all."""
    parts: list[KeptPart | Sequence[Message]] = []
    for sid in chain:
        read = await _archive_read(store, chat, sid, (store.prefix, chat, tuple(chain), sid, label), label)
        if read is None:
            continue
        parts.append(read.part)
        if sid != chain[-1]:  # an ancestor's live list is history too
            with contextlib.suppress(UnknownSession):
                parts.append(await store.active(chat, sid))
    with contextlib.suppress(UnknownSession):
        parts.append(await store.active(chat, chain[-1]))
    return conversation_pieces(parts, lambda messages: _labelled(messages, label))


async def _archived(store: SessionStore, chat: str, sid: str, ids: Sequence[str]) -> list[Any]:
    """The archived messages with these ids, marked as :meth:`gateway.store.SessionStore.archive` marks them."""
    return [{**message, "active": 0, "compacted": 1} for message in await store.get_messages(chat, sid, ids)]


class TurnArchive:
    """``agent.loop.ResultArchive`` over a chat's session: a tool result too long for the request is stored whole in
    the session's archive, once per inbox entry and call (a turn tried again gets the id stored the first time)."""

    def __init__(self, store: SessionStore, chat: str, session_id: str, lock: Lock, entry_id: str) -> None:
        self.store = store
        self.chat = chat
        self.session_id = session_id
        self.lock = lock
        self.entry_id = entry_id

    async def keep_whole(self, message: Message, key: str) -> str:
        return await self.store.archive_original(
            self.chat, self.session_id, message, lock=self.lock, entry_id=f"{self.entry_id}:{key}"
        )


class MeaningSearch(Protocol):
    """A chat's messages found by meaning (an embeddings index kept beside the store)."""

    async def similar(self, chat: str, query: str, limit: int) -> list[tuple[str, str]] | None:
        """``(session id, message id)`` of the chat's messages closest in meaning to ``query``, best first, at most
        ``limit``; None when the chat has no index or the embeddings endpoint cannot be reached."""


class ChatHistory:
    """``agent.tools.MessageSource`` over a chat's current conversation, or with ``every_session`` all of them.

    Context engines get the current conversation (their summaries cite its plain ids); the
    recovery tools and ``foldgate search`` get every conversation of the chat, each message
    labelled with its session in ``_session``. With a ``meaning`` index, searches also go by meaning.
    """

    def __init__(
        self,
        store: SessionStore,
        chat: str,
        session_id: str,
        *,
        every_session: bool = False,
        meaning: MeaningSearch | None = None,
    ) -> None:
        self.store = store
        self.chat = chat
        self.session_id = session_id
        self.every_session = every_session
        self.meaning = meaning

    async def similar(self, query: str, limit: int) -> Sequence[str] | None:
        """The meaning index's hits as this history's ids: plain in the current conversation, ``<head>:<id>`` in
        another (left out without ``every_session``, and for a session none of this chat's conversations hold)."""
        if self.meaning is None:
            return None
        found = await self.meaning.similar(self.chat, query, limit)
        if found is None:
            return None
        own = set(await self._chain())
        heads: dict[str, str] = {}
        if self.every_session and any(sid not in own for sid, _ in found):
            for conversation in await conversations(self.store, self.chat, self.session_id):
                heads.update(dict.fromkeys(conversation.sessions, conversation.head))
        ids: list[str] = []
        for sid, message_id in found:
            if sid in own:
                ids.append(str(message_id))
            elif sid in heads:
                ids.append(f"{heads[sid]}{ID_SEPARATOR}{message_id}")
        return ids

    async def _chain(self) -> list[str]:
        """Session ids from the oldest ancestor to the current session."""
        return await _parents(self.store, self.chat, self.session_id)

    async def all_messages(self) -> Sequence[Message]:
        own = await _messages_of(self.store, self.chat, await self._chain())
        if not self.every_session:
            return own
        messages: list[Message] = []
        for conversation in await conversations(self.store, self.chat, self.session_id):
            if self.session_id in conversation.sessions:
                continue
            head = conversation.head
            for message in await _messages_of(self.store, self.chat, conversation.sessions):
                messages.append({**message, "_id": f"{head}{ID_SEPARATOR}{message.get('_id')}", "_session": head})
        return messages + [{**message, "_session": self.session_id} for message in own]

    async def search_pieces(self) -> list[SearchPiece] | None:
        """What :meth:`all_messages` returns, as pieces ready for searching; archives are kept between searches."""
        chains: list[tuple[Sequence[str], Label]] = []
        if self.every_session:
            for conversation in await conversations(self.store, self.chat, self.session_id):
                if self.session_id not in conversation.sessions:
                    chains.append((conversation.sessions, (conversation.head, True)))
        chains.append((await self._chain(), (self.session_id, False) if self.every_session else None))
        pieces: list[SearchPiece] = []
        for chain, label in chains:
            found = await _pieces(self.store, self.chat, chain, label)
            if found is None:
                return None
            pieces += found
        return pieces

    async def messages_by_id(self, ids: Sequence[str]) -> Sequence[Message]:
        wanted = [str(i) for i in ids]
        plain, qualified = self._split_ids(wanted)
        found: dict[str, Message] = {}
        if plain:
            found.update(await _by_id(self.store, self.chat, await self._chain(), plain))
        if qualified:
            found.update(await self._qualified_hits(qualified))
        return [found[i] for i in wanted if i in found]

    def _split_ids(self, wanted: Sequence[str]) -> tuple[list[str], dict[str, list[tuple[str, str]]]]:
        """The ids of the current conversation (plain), and those naming another session, by session (as
        ``(asked id, plain id)``); only ``every_session`` reads ids of the second kind as such."""
        plain: list[str] = []
        qualified: dict[str, list[tuple[str, str]]] = {}
        for asked in wanted:
            sid, separator, local = asked.partition(ID_SEPARATOR)
            if not self.every_session or not separator:
                plain.append(asked)
            else:
                qualified.setdefault(sid, []).append((asked, local))
        return plain, qualified

    async def _qualified_hits(self, qualified: dict[str, list[tuple[str, str]]]) -> dict[str, Message]:
        """The messages asked for by session-qualified id, found in that session's conversation, by asked id;
        a session that is none of this chat's own conversations' is not read."""
        chains = {
            sid: conversation.sessions
            for conversation in await conversations(self.store, self.chat, self.session_id)
            for sid in conversation.sessions
        }
        found: dict[str, Message] = {}
        for sid, pairs in qualified.items():
            chain = chains.get(sid)
            if chain is None:
                continue
            head = chain[-1]
            hits = await _by_id(self.store, self.chat, chain, [local for _, local in pairs])
            for asked, local in pairs:
                if local in hits:
                    found[asked] = {**hits[local], "_id": asked, "_session": head}
        return found


async def conversation_messages(store: SessionStore, chat: str, session_id: str) -> list[Message]:
    """Every stored message of the conversation ``session_id`` belongs to (in this chat), in the order
    they were written; empty when it is none of the chat's."""
    for conversation in await conversations(store, chat, await store.stored_session(chat)):
        if session_id in conversation.sessions:
            messages = await _messages_of(store, chat, conversation.sessions)
            return sorted(messages, key=lambda m: (float(m.get("_ts") or 0), _numeric(str(m.get("_id")))))
    return []


@dataclass(frozen=True)
class ChatHit:
    """One search hit in a chat: the conversation (session) and the message's own id there, and the turns
    before and after it (their ids as ``session_fetch`` takes them)."""

    session_id: str
    message_id: str
    role: str
    score: float
    snippet: str
    before: Neighbour | None = None
    after: Neighbour | None = None


async def search_conversations(
    store: SessionStore,
    chat: str,
    session_id: str,
    query: str,
    limit: int = DEFAULT_HITS,
    *,
    meaning: MeaningSearch | None = None,
) -> list[ChatHit]:
    """Search every conversation of the chat (``/new`` keeps the old ones), never another chat's, ranked
    exactly as ``session_search`` ranks them (:func:`agent.tools.recovery.search_source`). Raises
    :class:`agent.search.SearchError` for a query that cannot run."""
    history = ChatHistory(store, chat, session_id, every_session=True, meaning=meaning)
    hits, messages = await search_source(history, query, limit)
    sessions = {str(m.get("_id")): str(m.get("_session") or "") for m in messages}
    return [
        ChatHit(
            sessions.get(str(hit.message_id), ""),
            str(hit.message_id).rpartition(ID_SEPARATOR)[2],
            hit.role,
            hit.score,
            hit.snippet,
            hit.before,
            hit.after,
        )
        for hit in hits
    ]


@dataclass(frozen=True)
class ConversationOutline:
    """What ``/sessions`` says about one conversation."""

    conversation: Conversation
    first_line: str
    live: int
    archived: int
    size_bytes: int
    last_activity_at: float


def _numeric(message_id: str) -> tuple[int, str]:
    return (int(message_id), "") if message_id.isdigit() else (1 << 62, message_id)


async def outline(
    store: SessionStore, chat: str, conversation: Conversation, *, width: int = 60
) -> ConversationOutline:
    """Counts, stored size, first user line and last activity of a conversation, reading only a few bodies."""
    sizes: dict[str, int] = {}
    live: set[str] = set()
    root = conversation.sessions[0]
    root_ids: list[str] = []
    for sid in conversation.sessions:
        try:
            parts = await store.session_outline(chat, sid)
        except UnknownSession:
            continue
        for message_id, size in parts.sizes.items():
            sizes.setdefault(message_id, size)
        if sid == root:  # ids only grow, so its lowest ids are where the conversation began
            root_ids = sorted(parts.sizes, key=_numeric)[:FIRST_LINE_SCAN]
        if sid == conversation.head:
            live = set(parts.active)
    first_line = ""
    for message in await store.get_messages(chat, root, root_ids):
        if is_real_user_message(message):
            first_line = " ".join(text_of(message).split())
            break
    if len(first_line) > width:
        first_line = first_line[: width - 1].rstrip() + "…"
    try:
        meta = await store.meta(chat, conversation.head)
        last = meta.last_activity_at or meta.updated_at or meta.created_at
    except UnknownSession:
        last = conversation.started_at
    return ConversationOutline(conversation, first_line, len(live), len(set(sizes) - live), sum(sizes.values()), last)
