"""The API as a platform: what the runner sends to an API session goes out as live events.

Requests come in through the API's HTTP server (:mod:`gateway.api.server`), which hands them to the gateway's
intake like any platform does and waits for the answer. Any process may run the session's turn, so the answer
travels as :class:`~gateway.store.live.LiveHub` events on the session's channel (as the web chat's do): every
process has this adapter, and the one holding the HTTP request hears the previews and the final text.

Each event names the message it answers (``reply_to``, the request's update id). A reply's previews and its
final text come through :class:`ApiReply`; anything else the turn sends (a command's answer, a notice that the
provider is away or that the person sends too fast) comes through :meth:`ApiAdapter.send` as a ``notice``.
"""

from __future__ import annotations

from gateway.platforms.base import Intake, Journal, PlatformAdapter, SendGate
from gateway.store.live import LiveHub

#: The platform's prefix in chat keys: ``api:<key name>/<session id>``.
PLATFORM = "api"


def chat_key(chat_id: str) -> str:
    return f"{PLATFORM}:{chat_id}"


class ApiAdapter(PlatformAdapter):
    """Sends an API session's replies as live events; receives nothing by itself (the server posts to the
    intake)."""

    platform = PLATFORM
    max_message_length = 1_000_000

    def __init__(self, hub: LiveHub) -> None:
        self.hub = hub

    async def start(self, intake: Intake) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def publish(self, chat_id: str, event: dict[str, object]) -> None:
        await self.hub.publish(chat_key(chat_id), event)

    async def send(self, chat_id: str, text: str, *, reply_to: str | None = None) -> None:
        await self.publish(chat_id, {"type": "notice", "reply_to": reply_to, "text": text})

    def reply_surface(
        self, chat_id: str, gate: SendGate, *, reply_to: str | None = None, journal: Journal | None = None
    ) -> ApiReply:
        return ApiReply(self, chat_id, reply_to)


class ApiReply:
    """One streamed reply: each preview is the whole text so far, then the final text."""

    interval = 0.05

    def __init__(self, adapter: ApiAdapter, chat_id: str, reply_to: str | None) -> None:
        self.adapter = adapter
        self.chat_id = chat_id
        self.reply_to = reply_to

    async def preview(self, text: str) -> bool:
        await self.adapter.publish(self.chat_id, {"type": "preview", "reply_to": self.reply_to, "text": text})
        return True

    async def finish(self, text: str) -> None:
        await self.adapter.publish(self.chat_id, {"type": "final", "reply_to": self.reply_to, "text": text})
