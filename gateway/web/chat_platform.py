"""The web chat as a platform: what the runner sends to a browser chat goes out as live events.

Messages come in through the web chat's own page (:mod:`gateway.web.chat_pages`), which hands
them to the gateway's intake like any platform does. Replies go out through
:class:`~gateway.store.live.LiveHub`, so the page that asked sees them stream in whichever process
runs the turn: every gateway process has this adapter (it needs only Redis), whether or not it
serves the page. Each event names the message it answers (``reply_to``): a preview replaces the
last one, the final text replaces the preview.
"""

from __future__ import annotations

from typing import Optional

from gateway.platforms.base import Intake, Journal, PlatformAdapter, SendGate
from gateway.store.live import LiveHub

#: The platform's prefix in chat keys: ``web:<id>``, one chat per browser.
PLATFORM = "web"


def chat_key(chat_id: str) -> str:
    """The store's key of the browser chat ``chat_id``."""
    return f"{PLATFORM}:{chat_id}"


class WebChatAdapter(PlatformAdapter):
    """Sends a web chat's replies as live events; receives nothing by itself (the page posts to the intake)."""

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

    async def send(self, chat_id: str, text: str, *, reply_to: Optional[str] = None) -> None:
        await self.publish(chat_id, {"type": "final", "reply_to": reply_to, "text": text})

    def reply_surface(self, chat_id: str, gate: SendGate, *, reply_to: Optional[str] = None,
                      journal: Optional[Journal] = None) -> "WebReply":
        return WebReply(self, chat_id, reply_to)


class WebReply:
    """One streamed reply in the browser: each preview and the final text replace what the page shows
    for ``reply_to``, so a reply retried after a crash shows once."""

    interval = 0.05

    def __init__(self, adapter: WebChatAdapter, chat_id: str, reply_to: Optional[str]) -> None:
        self.adapter = adapter
        self.chat_id = chat_id
        self.reply_to = reply_to

    async def preview(self, text: str) -> bool:
        await self.adapter.publish(self.chat_id, {"type": "preview", "reply_to": self.reply_to, "text": text})
        return True

    async def finish(self, text: str) -> None:
        await self.adapter.send(self.chat_id, text, reply_to=self.reply_to)
