"""A person's chats as the recovery tools see them: ``session_search`` with scope ``my chats``.

What someone said in their private chat with the bot, or in a group, is theirs to find again from another
chat. :class:`PersonHistory` reads, one :class:`gateway.session_source.ChatHistory` each (every conversation,
``/new`` and rotations included), the chat the search is asked in and the chats of the person's list
(:class:`gateway.store.person_chats.PersonChats`, the most recent :data:`MAX_CHATS`) that they may read:

- a group the person wrote in;
- one of their own private chats (:func:`own_private_chat`), and only when the search is asked in one of them:
  what was said in private is never pulled into a group's reply;
- never a chat the list does not name, and never someone else's private chat, even one wrongly listed as
  private: a private chat is read only where its key itself says it is this person's.

The chat asked in keeps its ids as ``ChatHistory`` gives them (plain in the current conversation,
``<session>:<id>`` in another), so an id means the same in both scopes; another chat's are qualified with it:
``<chat>|<session>:<id>`` (:data:`agent.tools.recovery.CHAT_SEPARATOR`; neither a session id nor a message id
holds ``|``, so the last one splits such an id even where a chat key held one). Every message is labelled
with its chat (``_chat``) and its session (``_session``).

A question about the person asking ("what am I allergic to?") ranks their own messages (``_user``) ahead of what
others said with the same words: in a group, someone else's "Am I allergic to tofu?" answers nothing about them.
"""

from __future__ import annotations

import asyncio
import itertools
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

from agent.messages import Message
from agent.search_corpus import SearchCorpus
from agent.search_query import about_asker
from agent.tools.recovery import CHAT_SEPARATOR, SearchPiece, joined_pieces, searchable
from gateway.session_source import ID_SEPARATOR, ChatHistory, MeaningSearch
from gateway.store import SessionStore
from gateway.store.person_chats import PersonChats

#: Most chats one search reads besides the one it is asked in: those the person wrote in last.
MAX_CHATS = 200


def own_private_chat(person: str, chat: str) -> bool:
    """Whether ``chat``'s key says it is ``person``'s own private chat: on Telegram a private chat's id is its
    person's id, and each browser of the web chat is its own person; an API session's key (``api:<key>/<session>``)
    starts with its key's name; the terminal is its machine's one person. A Discord channel never is (nothing in
    its id says whose DM it is), nor is a chat of another platform than the person's."""
    platform, _, user = person.partition(":")
    where, _, chat_id = chat.partition(":")
    if where != platform or not user or not chat_id:
        return False
    if platform == "local":
        return True
    if platform == "api":
        return chat_id.startswith(f"{user}/")
    return platform in ("tg", "web") and chat_id == user


def _with(message: Message, **labels: str) -> Message:
    """``message`` with labels of this source (``_chat`` is none of a stored message's keys)."""
    return cast(Message, {**message, **labels})


def _qualified(message_id: str, chat: str, head: str | None, session: str | None = None) -> str:
    """``message_id`` as ``ChatHistory`` gave it for ``chat``, as this source gives it: as it is in the chat asked
    in (``head`` None), else ``<chat>|<session>:<id>`` (``session``, else ``head``, where it names none)."""
    if head is None:
        return message_id
    if ID_SEPARATOR not in message_id:
        message_id = f"{session or head}{ID_SEPARATOR}{message_id}"
    return f"{chat}{CHAT_SEPARATOR}{message_id}"


def _labelled(messages: Sequence[Message], chat: str, head: str | None) -> list[Message]:
    """``messages`` of ``chat`` labelled with it; with ``head`` (another chat's current session) their ids
    qualified with the chat, and those of its current conversation with that session too."""
    if head is None:
        return [_with(message, _chat=chat) for message in messages]
    return [_with(m, _id=_qualified(str(m.get("_id")), chat, head, m.get("_session")), _chat=chat) for m in messages]


#: Pieces as this module labels them, by the ``ChatHistory`` piece each was made from, for as long as that piece
#: lives (an archive's pieces are kept between searches; the labels are then not made again).
_LABELLED: dict[int, tuple[weakref.ref[SearchPiece], str, str | None, SearchPiece]] = {}


def _piece_labelled(piece: SearchPiece, chat: str, head: str | None) -> SearchPiece:
    """``piece`` labelled as :func:`_labelled` labels messages; its corpus is the same (labels are not searched)."""
    key = id(piece)
    kept = _LABELLED.get(key)
    if kept is not None and kept[0]() is piece and kept[1:3] == (chat, head):
        return kept[3]
    labelled = replace(piece, messages=_labelled(piece.messages, chat, head))

    def drop(ref: weakref.ref[SearchPiece]) -> None:
        if _LABELLED.get(key, (None,))[0] is ref:
            del _LABELLED[key]

    _LABELLED[key] = (weakref.ref(piece, drop), chat, head, labelled)
    return labelled


class PersonHistory:
    """``agent.tools.MessageSource`` over the chats ``person`` took part in (the module docstring says which),
    the chat ``chat`` (session ``session_id``) the search is asked in among them."""

    def __init__(
        self,
        store: SessionStore,
        chats: PersonChats,
        person: str,
        chat: str,
        session_id: str,
        *,
        meaning: MeaningSearch | None = None,
    ) -> None:
        self.store = store
        self.chats = chats
        self.person = person
        self.chat = chat
        self.meaning = meaning
        self.here = ChatHistory(store, chat, session_id, every_session=True, meaning=meaning)

    def ranked_first(self, query: str) -> Callable[[Mapping[str, Any]], bool] | None:
        """For a question about the person asking (:func:`agent.search_query.about_asker`), which messages rank
        ahead of the others: theirs. None for any other query: its hits rank as in the chat alone."""
        if not about_asker(query):
            return None
        person = self.person
        return lambda message: message.get("_user") == person

    async def readable(self) -> list[str]:
        """The other chats this search may read, the one written in longest ago first."""
        listed = await self.chats.chats(self.person)
        in_private = any(entry.chat == self.chat and entry.private for entry in listed) and own_private_chat(
            self.person, self.chat
        )
        chosen = [
            entry
            for entry in listed
            if entry.chat != self.chat
            and (not entry.private or (in_private and own_private_chat(self.person, entry.chat)))
        ]
        return [entry.chat for entry in reversed(chosen[:MAX_CHATS])]

    async def _histories(self) -> list[tuple[ChatHistory, str | None]]:
        """Each chat read, with its current session (None for the chat asked in, whose ids stay as they are)."""
        others = await self.readable()
        heads = await asyncio.gather(*(self.store.stored_session(chat) for chat in others))
        found: list[tuple[ChatHistory, str | None]] = [
            (ChatHistory(self.store, chat, head, every_session=True, meaning=self.meaning), head)
            for chat, head in zip(others, heads)
            if head
        ]
        return [*found, (self.here, None)]

    async def similar(self, query: str, limit: int) -> Sequence[str] | None:
        """Each chat's closest messages by meaning, taken in turns (best of every chat first, the chat asked in
        leading), as this source's ids; None without a meaning index, or when no chat's could be reached."""
        if self.meaning is None:
            return None
        read = (await self._histories())[::-1]
        answers = await asyncio.gather(*(history.similar(query, limit) for history, _ in read), return_exceptions=True)
        ranked = [
            [_qualified(str(found), history.chat, head) for found in answer]
            for (history, head), answer in zip(read, answers)
            if isinstance(answer, Sequence)
        ]
        if not ranked:
            return None
        turns = (ids[rank] for rank in range(max(map(len, ranked), default=0)) for ids in ranked if rank < len(ids))
        return list(itertools.islice(turns, limit))

    async def all_messages(self) -> Sequence[Message]:
        read = await self._histories()
        every = await asyncio.gather(*(history.all_messages() for history, _ in read))
        return [m for (history, head), messages in zip(read, every) for m in _labelled(messages, history.chat, head)]

    async def search_pieces(self) -> list[SearchPiece]:
        """One piece a chat, in :meth:`all_messages`' order; each chat made searchable by itself (a tool call's id
        means nothing in another chat), its archives' pieces kept between searches as ``ChatHistory`` keeps them."""
        read = await self._histories()
        return list(await asyncio.gather(*(self._chat_piece(history, head) for history, head in read)))

    async def _chat_piece(self, history: ChatHistory, head: str | None) -> SearchPiece:
        pieces = await history.search_pieces()
        joined = joined_pieces([_piece_labelled(p, history.chat, head) for p in pieces]) if pieces else None
        if joined is None:
            kept = _labelled(searchable(await history.all_messages()), history.chat, head)
            joined = kept, SearchCorpus.build(kept)
        # Searchable already: no call id of it reaches into another chat's piece.
        return SearchPiece(joined[0], joined[1], frozenset(), frozenset(), frozenset())

    async def messages_by_id(self, ids: Sequence[str]) -> Sequence[Message]:
        """The messages with these ids, in the order asked; an id of a chat this search may not read is missing."""
        wanted = [str(i) for i in ids]
        asked: dict[str, dict[str, list[str]]] = {}  # chat -> the id its ChatHistory knows -> the ids asked
        for message_id in wanted:
            chat, separator, local = message_id.rpartition(CHAT_SEPARATOR)
            chat, local = (chat, local) if separator else (self.chat, message_id)
            asked.setdefault(chat, {}).setdefault(local, []).append(message_id)
        readable = {self.chat, *(await self.readable() if set(asked) - {self.chat} else ())}
        found: dict[str, Message] = {}
        for chat, by_local in asked.items():
            head = await self.store.stored_session(chat) if chat in readable and chat != self.chat else None
            if chat != self.chat and head is None:
                continue
            history = self.here if chat == self.chat else ChatHistory(self.store, chat, str(head), every_session=True)
            for message in await history.messages_by_id(list(by_local)):
                for message_id in by_local.get(str(message.get("_id")), ()):
                    found[message_id] = _with(message, _id=message_id, _chat=chat)
        return [found[i] for i in wanted if i in found]
