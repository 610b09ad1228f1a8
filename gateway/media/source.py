"""One chat's stored items, as the agent reads them and keeps what the model makes (``agent.items.MediaSource``).

The agent never sees a chat or the store: the gateway hands it this view of one chat, so a turn
can only read the bytes of the chat it answers. An image whose bytes the chat's allowance dropped
is fetched again from its platform when ``again`` is given (see ``ItemIntake.fetch_again``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from gateway.store.media import MediaStore

#: Fetches a chat's dropped image again: (chat, sha) -> (bytes, mime) or None.
FetchAgain = Callable[[str, str], Awaitable[tuple[bytes, str] | None]]


class KeepMade(Protocol):
    """Keeps what the model made for a chat (``ItemIntake.keep_made``): its ref."""

    async def __call__(self, chat: str, data: bytes, *, mime: str, name: str) -> dict[str, Any]: ...


class ChatMedia:
    """:class:`MediaStore` narrowed to one chat: ``read(sha)`` -> ``(bytes, mime)`` or None."""

    def __init__(
        self, store: MediaStore, chat: str, again: FetchAgain | None = None, made: KeepMade | None = None
    ) -> None:
        self.store = store
        self.chat = chat
        self.again = again
        self.made = made

    async def read(self, sha: str) -> tuple[bytes, str] | None:
        found = await self.store.get(self.chat, sha)
        if found is None and self.again is not None:
            return await self.again(self.chat, sha)
        return found

    async def keep(self, data: bytes, *, mime: str, name: str) -> dict[str, Any]:
        if self.made is None:
            return {
                "kind": "image" if mime.startswith("image/") else "document",
                "sha": "",
                "name": name,
                "mime": mime,
                "bytes": len(data),
                "error": "this chat keeps no files",
            }
        return await self.made(self.chat, data, mime=mime, name=name)
