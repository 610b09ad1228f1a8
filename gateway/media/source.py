"""One chat's stored items, as the agent reads them (``agent.items.MediaSource``: ``read(sha)``).

The agent never sees a chat or the store: the gateway hands it this view of one chat, so a turn
can only read the bytes of the chat it answers. An image whose bytes the chat's allowance dropped
is fetched again from its platform when ``again`` is given (see ``ItemIntake.fetch_again``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from gateway.store.media import MediaStore

#: Fetches a chat's dropped image again: (chat, sha) -> (bytes, mime) or None.
FetchAgain = Callable[[str, str], Awaitable[tuple[bytes, str] | None]]


class ChatMedia:
    """:class:`MediaStore` narrowed to one chat: ``read(sha)`` -> ``(bytes, mime)`` or None."""

    def __init__(self, store: MediaStore, chat: str, again: FetchAgain | None = None) -> None:
        self.store = store
        self.chat = chat
        self.again = again

    async def read(self, sha: str) -> tuple[bytes, str] | None:
        found = await self.store.get(self.chat, sha)
        if found is None and self.again is not None:
            return await self.again(self.chat, sha)
        return found
