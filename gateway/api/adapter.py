"""The API as a platform: what the runner sends to an API session goes out as live events.

Requests come in through the API's HTTP server (:mod:`gateway.api.server`), which hands them to the gateway's
intake like any platform does and waits for the answer. Any process may run the session's turn, so the answer
travels as :class:`~gateway.store.live.LiveHub` events on the session's channel (as the web chat's do): every
process has this adapter, and the one holding the HTTP request hears the previews and the final text.

Each event names the message it answers (``reply_to``, the request's update id). A reply's previews and its
final text come through :class:`~gateway.web.live_adapter.LiveReply` (the final text as a ``final`` event);
anything else the turn sends (a command's answer, a notice that the provider is away or that the person sends
too fast) comes through :meth:`ApiAdapter.send` as a ``notice``.
Ahead of the reply's final text come the calls of the client's own tools it ends with (``tool_calls``), or the
refusal of the client's tools or tool results (``refused``), which the request answers as a 400; ahead of a
notice that the message is kept unanswered comes its kind (``refusal``: the provider away, a budget used up, a
sender too fast), which the request answers as 503 or 429.

A tool whose policy is ``ask`` asks in a notice (the question, naming ``/approve <id>`` and ``/refuse <id>``):
that is the request's answer. The client's next message answering it is taken by the intake for the waiting turn,
and its request waits for the rest of that turn's reply (:func:`gateway.api.turns.answered_turn`).

A request's images are stored by the server as the request comes (:mod:`gateway.api.images`), named
``upload:<chat id>/<sha256>``; :meth:`ApiAdapter.fetch` reads them back for the turn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gateway.platforms.base import ApprovalPrompt, TurnRefusal
from gateway.web.live_adapter import LiveAdapter

#: The platform's prefix in chat keys: ``api:<key name>/<session id>``.
PLATFORM = "api"


def chat_key(chat_id: str) -> str:
    return f"{PLATFORM}:{chat_id}"


class ApiAdapter(LiveAdapter):
    """Sends an API session's replies as live events; receives nothing by itself (the server posts to the
    intake)."""

    platform = PLATFORM
    upload_noun = "the image"

    async def send(self, chat_id: str, text: str, *, reply_to: str | None = None) -> None:
        await self.publish(chat_id, {"type": "notice", "reply_to": reply_to, "text": text})

    async def client_tool_calls(
        self, chat_id: str, calls: Sequence[Mapping[str, Any]], *, reply_to: str | None = None
    ) -> None:
        """The calls the reply ends with, for the request to end its answer with (before the reply's text)."""
        await self.publish(chat_id, {"type": "tool_calls", "reply_to": reply_to, "calls": [dict(c) for c in calls]})

    async def client_request_refused(
        self, chat_id: str, param: str, reason: str, *, reply_to: str | None = None
    ) -> None:
        """The request's tools or tool results were refused: it answers 400 naming ``param``."""
        await self.publish(chat_id, {"type": "refused", "reply_to": reply_to, "param": param, "text": reason})

    async def settle_approval(self, chat_id: str, message_id: str | None, prompt: ApprovalPrompt, outcome: str) -> None:
        """Nothing to edit: the question was a request's whole answer, and what became of it shows in the reply
        the answering request gets (the tool's result, or its refusal, in the model's words)."""

    async def turn_refused(self, chat_id: str, refusal: TurnRefusal, *, reply_to: str | None = None) -> None:
        """The message is kept unanswered for now: the request answers with the status its kind stands for."""
        await self.publish(
            chat_id,
            {
                "type": "refusal",
                "reply_to": reply_to,
                "kind": refusal.kind,
                "text": refusal.text,
                "retry_after": refusal.retry_after,
                "resets_at": refusal.resets_at,
            },
        )

    async def finish_reply(self, chat_id: str, text: str, *, reply_to: str | None) -> None:
        """The reply's final text, told as such: the request ends its answer with it."""
        await self.publish(chat_id, {"type": "final", "reply_to": reply_to, "text": text})
