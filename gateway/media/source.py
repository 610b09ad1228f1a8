"""One chat's stored items, as the agent reads them (``agent.items.MediaSource``: ``read(sha)``).

The agent never sees a chat or the store: the gateway hands it this view of one chat, so a turn
can only read the bytes of the chat it answers.
"""

from __future__ import annotations

from gateway.store.media import MediaStore


class ChatMedia:
    """:class:`MediaStore` narrowed to one chat: ``read(sha)`` -> ``(bytes, mime)`` or None."""

    def __init__(self, store: MediaStore, chat: str) -> None:
        self.store = store
        self.chat = chat

    async def read(self, sha: str) -> tuple[bytes, str] | None:
        return await self.store.get(self.chat, sha)
