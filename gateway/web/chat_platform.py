"""The web chat as a platform: what the runner sends to a browser chat goes out as live events.

Messages come in through the web chat's own page (:mod:`gateway.web.chat_pages`), which hands
them to the gateway's intake like any platform does. Replies go out through
:class:`~gateway.store.live.LiveHub`, so the page that asked sees them stream in whichever process
runs the turn: every gateway process has this adapter (it needs only Redis), whether or not it
serves the page. Each event names the message it answers (``reply_to``): a preview replaces the
last one, the final text replaces the preview.

A file sent from the page is stored in the chat's media store as it arrives (the page reads it
with a byte limit), so the item the page hands in names bytes already kept: its ``file_id`` is
``upload:<chat id>/<sha256>`` (the chat is part of it because a fetch is asked for the item alone,
and the store keeps each chat's bytes apart), and :meth:`WebChatAdapter.fetch` reads them back.
"""

from __future__ import annotations

import hashlib

from gateway.media.units import size_text
from gateway.platforms.base import (
    ApprovalPrompt,
    OutgoingFile,
)
from gateway.web.live_adapter import LiveAdapter
from gateway.web.media_files import SHOWN_TYPES

#: The platform's prefix in chat keys: ``web:<id>``, one chat per browser.
PLATFORM = "web"


def chat_key(chat_id: str) -> str:
    """The store's key of the browser chat ``chat_id``."""
    return f"{PLATFORM}:{chat_id}"


class WebChatAdapter(LiveAdapter):
    """Sends a web chat's replies as live events; receives nothing by itself (the page posts to the intake)."""

    platform = PLATFORM

    async def send(self, chat_id: str, text: str, *, reply_to: str | None = None) -> None:
        await self.publish(chat_id, {"type": "final", "reply_to": reply_to, "text": text})

    async def send_file(self, chat_id: str, file: OutgoingFile, *, reply_to: str | None = None) -> None:
        """The page shows the file under the reply: the bytes are in the chat's media store already, under their
        content hash, so the event names them by it (the page loads them from its own ``/media/``)."""
        shown = file.kind == "image" and file.mime in SHOWN_TYPES
        await self.publish(
            chat_id,
            {
                "type": "file",
                "reply_to": reply_to,
                "kind": file.kind,
                "name": file.name,
                "about": size_text(len(file.data)),
                "sha": hashlib.sha256(file.data).hexdigest() if shown else "",
            },
        )

    async def ask_approval(self, chat_id: str, prompt: ApprovalPrompt, *, reply_to: str | None = None) -> str | None:
        """The page shows the question under the reply it belongs to, with an approve and a refuse button (each
        sends ``/approve <id>`` or ``/refuse <id>`` as the page sends any message)."""
        await self.publish(
            chat_id, {"type": "approval", "reply_to": reply_to, "id": prompt.approval_id, "question": prompt.question}
        )
        return prompt.approval_id

    async def settle_approval(self, chat_id: str, message_id: str | None, prompt: ApprovalPrompt, outcome: str) -> None:
        await self.publish(chat_id, {"type": "approval_settled", "id": prompt.approval_id, "outcome": outcome})
