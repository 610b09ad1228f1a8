"""The model's ``memory`` and ``memory_search`` (:mod:`agent.tools.memory`) bound to one turn: the person whose
message it answers, where the chat is, and the message an entry is learned from.

Every write is told to the event bus like any tool call (the audit trail in the chat's activity, the
``tool_calls`` and ``memory_writes_tool`` counters); the model's own call was metered with its answer.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence

from agent.tools.memory import KeptEntry, MemoryChange
from gateway.access.roles import person_of
from gateway.events import EventBus, MemoryAction, MemoryWriteEvent, ToolCallEvent
from gateway.memory.scopes import is_private, scope_of
from gateway.platforms.base import IncomingMessage
from gateway.store.memory import Added, MemoryEntry, MemoryStore

_WORD = re.compile(r"\w+")
#: Why a write to the group's own memory is refused in a private chat.
NO_GROUP = "this is a private chat: there is no group memory here"


def _kept(entry: MemoryEntry, owner: str) -> KeptEntry:
    return KeptEntry(entry.number, entry.text, "group" if owner == "" else "person")


class TurnMemory:
    """``agent.tools.memory.PersonMemory`` of the person a turn answers, in the turn's chat."""

    def __init__(self, store: MemoryStore, events: EventBus, message: IncomingMessage, chat: str, session_id: str):
        self.store = store
        self.events = events
        self.message = message
        self.chat = chat
        self.session_id = session_id
        self.person = person_of(message)
        self.scope = scope_of(message)
        self.private = is_private(message)

    def _owner(self, group: bool, text: str | None, what: str = "the text") -> tuple[str | None, str]:
        """Whose entries a write changes (the person's, or the group's own ``""``), or None with why it cannot:
        no group in a private chat, or a text the store refuses."""
        if group and self.private:
            return None, NO_GROUP
        refused = None if text is None else self.store.refusal(text)
        if refused is not None:
            return None, f"{what} is {refused}"
        return ("" if group else self.person), ""

    async def add(self, text: str, *, group: bool) -> MemoryChange:
        owner, why = self._owner(group, text)
        if owner is None:
            return await self._refused("add", why)
        added = await self.store.add(
            owner, self.scope, text, source="tool", chat=self.chat, message_id=self.message.update_id
        )
        return await self._changed("add", owner, added, "that text is kept already")

    async def replace(self, old_text: str, text: str, *, group: bool) -> MemoryChange:
        owner, why = self._owner(group, text, "the new text")
        if owner is None:
            return await self._refused("replace", why)
        added = await self.store.replace(owner, self.scope, old_text, text)
        if added.entry is None:
            return await self._refused("replace", "no kept entry has that old_text")
        return await self._changed("replace", owner, added, "the new text is kept already as another entry")

    async def remove(self, old_text: str, *, group: bool) -> MemoryChange:
        owner, why = self._owner(group, None)
        if owner is None:
            return await self._refused("remove", why)
        removed = await self.store.remove(owner, old_text, self.scope)
        if removed is None:
            return await self._refused("remove", "no kept entry has that text")
        await self._wrote("remove", owner)
        return await self._told("remove", True, MemoryChange(True, _kept(removed, owner)))

    async def _refused(self, action: MemoryAction, reason: str) -> MemoryChange:
        """A call that changed nothing, audited as refused, with why."""
        return await self._told(action, False, MemoryChange(False, reason=reason))

    async def search(self, query: str, limit: int) -> Sequence[KeptEntry]:
        """Entries sharing the most words with ``query`` (newest and most used first among equals); every kept
        entry of the person here, and of the group's own, when the query is empty."""
        found = [(entry, self.person) for entry in await self.store.entries(self.person, self.scope)]
        if not self.private:
            found += [(entry, "") for entry in await self.store.entries("", self.scope)]
        words = {word.lower() for word in _WORD.findall(query)}
        scored = [(len(words & {w.lower() for w in _WORD.findall(e.text)}), e, owner) for e, owner in found]
        if words:
            scored = [item for item in scored if item[0] > 0]
        scored.sort(key=lambda item: (-item[0], item[1].order()))
        return [_kept(entry, owner) for _, entry, owner in scored[:limit]]

    async def _changed(self, action: MemoryAction, owner: str, added: Added, same: str) -> MemoryChange:
        assert added.entry is not None
        if not added.changed:
            return await self._told(action, True, MemoryChange(False, _kept(added.entry, owner), reason=same))
        await self._wrote(action, owner)
        return await self._told(action, True, MemoryChange(True, _kept(added.entry, owner)))

    async def _wrote(self, action: MemoryAction, owner: str) -> None:
        await self.events.emit(
            MemoryWriteEvent(platform=self.message.platform, chat=self.chat, person=owner, source="tool", action=action)
        )

    async def _told(self, action: MemoryAction, answered: bool, change: MemoryChange) -> MemoryChange:
        """The call, into the chat's activity like every tool call: answered, or refused (nothing it named)."""
        await self.events.emit(
            ToolCallEvent(
                platform=self.message.platform,
                chat=self.chat,
                session_id=self.session_id,
                user_id=self.message.user_id,
                server="foldgate",
                tool=f"memory.{action}",
                argument_bytes=0,
                outcome="ok" if answered else "error",
                seconds=0.0,
                ts=time.time(),
            )
        )
        return change
