"""What a request hears of its turn besides the reply's text: the calls of the client's own tools the reply ends
with, and the refusal of the client's tools or tool results.

The turn tells both ahead of the reply's final text (:class:`gateway.api.adapter.ApiAdapter` publishes them as
``tool_calls`` and ``refused`` events). The calls are kept for the answer's end; a refusal is the request's
answer, a 400 naming the field (the reply's text that follows it is for platforms without such an answer).
A reply that is only calls may have no text at all: that final text is the reply, not a turn that said nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from gateway.api.errors import invalid
from gateway.api.turns import Listen, ReplyEvent, read_event


@dataclass
class ReplyReader:
    """The reply events of one request, with the client calls heard among them."""

    next_event: Listen
    #: The calls of the client's tools the reply ends with (OpenAI ``tool_calls``), in order.
    calls: list[dict[str, Any]] = field(default_factory=list)
    _ahead: dict[str, Any] | None = None

    async def first(self) -> None:
        """Wait for the reply's first event before anything is sent, so a refusal is still the answer's status."""
        if self._ahead is None:
            self._ahead = await self._next()

    async def _next(self) -> dict[str, Any]:
        while True:
            event = await self.next_event()
            kind = event.get("type")
            if kind == "tool_calls":
                self.calls = [dict(call) for call in event.get("calls") or ()]
            elif kind == "refused":
                raise invalid(str(event.get("param") or "messages"), str(event.get("text") or "Refused."))
            else:
                return event

    async def events(self) -> AsyncIterator[ReplyEvent]:
        """The reply's previews and then its final text (the last event)."""
        while True:
            event, self._ahead = (self._ahead if self._ahead is not None else await self._next()), None
            if self.calls and event.get("type") != "preview" and not str(event.get("text") or "").strip():
                yield ReplyEvent(True, "")
                return
            reply = read_event(event)
            yield reply
            if reply.final:
                return
