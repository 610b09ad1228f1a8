"""The part of a platform whose replies travel as live events: the web chat and the API both.

Neither receives anything by itself (its server hands requests to the intake), any process may run a turn, so
what the turn sends goes out on :class:`~gateway.store.live.LiveHub` under the chat's key, where the process
holding the page or the request hears it. What a request or a page sent with it (an image, a file) is kept in the
chat's media store as it arrives, named ``upload:<chat id>/<sha256>``, and read back here for the turn.
"""

from __future__ import annotations

from gateway.media.errors import MediaError, MediaTooLarge
from gateway.platforms.base import Intake, Journal, MediaItem, PlatformAdapter, SendGate, check_size
from gateway.store.live import LiveHub
from gateway.store.media import MediaStore

#: How a file kept as it arrived is named in its item: ``upload:<chat id>/<sha256>``.
UPLOAD_PREFIX = "upload:"


def upload_file_id(chat_id: str, sha: str) -> str:
    return f"{UPLOAD_PREFIX}{chat_id}/{sha}"


def uploaded(file_id: str) -> tuple[str, str] | None:
    """The chat id and sha an upload's ``file_id`` names (a chat id may hold a ``/``); None for any other file."""
    if not file_id.startswith(UPLOAD_PREFIX):
        return None
    chat_id, _, sha = file_id.removeprefix(UPLOAD_PREFIX).rpartition("/")
    return (chat_id, sha) if chat_id and sha else None


class LiveAdapter(PlatformAdapter):
    """Publishes a chat's events on the live hub and reads back the files kept as they arrived."""

    max_message_length = 1_000_000
    #: What a file this adapter reads back is called in the lines that say it cannot be read.
    upload_noun = "the file"

    def __init__(self, hub: LiveHub, media: MediaStore | None = None) -> None:
        self.hub = hub
        #: Where the server keeps what was sent with a message; None: this gateway reads none back.
        self.media = media

    async def start(self, intake: Intake) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def publish(self, chat_id: str, event: dict[str, object]) -> None:
        await self.hub.publish(f"{self.platform}:{chat_id}", event)

    async def finish_reply(self, chat_id: str, text: str, *, reply_to: str | None) -> None:
        """A streamed reply's final text (by default as any message the chat is sent)."""
        await self.send(chat_id, text, reply_to=reply_to)

    def reply_surface(
        self, chat_id: str, gate: SendGate, *, reply_to: str | None = None, journal: Journal | None = None
    ) -> LiveReply:
        return LiveReply(self, chat_id, reply_to)

    async def fetch(self, item: MediaItem, limit: int) -> bytes:
        """A file kept as it arrived, read back from the chat's media store."""
        check_size(item, limit)
        named = uploaded(item.file_id)
        if named is None or self.media is None:
            raise MediaError(f"{item.name or self.upload_noun} was not sent here")
        found = await self.media.get(f"{self.platform}:{named[0]}", named[1])
        if found is None:
            raise MediaError(f"{item.name or self.upload_noun} is no longer kept here: please send it again")
        if len(found[0]) > limit:
            raise MediaTooLarge(item.name, len(found[0]), limit)
        return found[0]


class LiveReply:
    """One streamed reply: each preview is the whole text so far, published for ``reply_to`` (a page replaces what
    it shows, a request sends what is new), then the final text (:meth:`LiveAdapter.finish_reply`)."""

    interval = 0.05

    def __init__(self, adapter: LiveAdapter, chat_id: str, reply_to: str | None) -> None:
        self.adapter = adapter
        self.chat_id = chat_id
        self.reply_to = reply_to

    async def preview(self, text: str) -> bool:
        await self.adapter.publish(self.chat_id, {"type": "preview", "reply_to": self.reply_to, "text": text})
        return True

    async def finish(self, text: str) -> None:
        await self.adapter.finish_reply(self.chat_id, text, reply_to=self.reply_to)
