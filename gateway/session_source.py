"""One chat's messages as the recovery tools see them: the session, its archive, and its ancestors.

With in-place compaction a chat keeps one session and its archive holds everything folded
away; with rotation (``in_place: false``) the history lives in the chain of parent
sessions. Either way ``session_search`` sees all of it, and only this chat's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.store import SessionStore, UnknownSession

#: Parent sessions followed at most (a bound against a corrupted, cyclic chain).
MAX_CHAIN = 1_000


class ChatHistory:
    """``agent.tools.MessageSource`` over a chat's current session and its parent chain."""

    def __init__(self, store: SessionStore, chat: str, session_id: str) -> None:
        self.store = store
        self.chat = chat
        self.session_id = session_id

    async def _chain(self) -> list[str]:
        """Session ids from the oldest ancestor to the current session."""
        chain = [self.session_id]
        while len(chain) < MAX_CHAIN:
            try:
                parent = (await self.store.meta(self.chat, chain[-1])).parent_session_id
            except UnknownSession:
                break
            if not parent or parent in chain:
                break
            chain.append(parent)
        return list(reversed(chain))

    async def all_messages(self) -> Sequence[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        chain = await self._chain()
        for sid in chain:
            messages += await self.store.archive(self.chat, sid)
            if sid != self.session_id:  # an ancestor's active list is history too
                messages += await self.store.active(self.chat, sid)
        messages += await self.store.active(self.chat, self.session_id)
        # Rotation copies kept messages into the new session under the same ids: show each once.
        unique = {str(m.get("_id")): m for m in messages}
        return list(unique.values())

    async def messages_by_id(self, ids: Sequence[str]) -> Sequence[dict[str, Any]]:
        wanted = [str(i) for i in ids]
        found: dict[str, dict[str, Any]] = {}
        for sid in reversed(await self._chain()):
            missing = [i for i in wanted if i not in found]
            if not missing:
                break
            for message in await self.store.get_messages(self.chat, sid, missing):
                found[str(message["_id"])] = message
        return [found[i] for i in wanted if i in found]
