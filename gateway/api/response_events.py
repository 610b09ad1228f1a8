"""A streamed response: the Responses API's Server-Sent Events, as OpenAI's clients assemble them.

Each event is ``event: <type>`` and ``data:`` its JSON, which repeats the type and numbers the event
(``sequence_number``, from 0). A reply is written as::

    response.created, response.in_progress        the response, in progress, with no output yet
    response.output_item.added                    the reply's message, in progress, with no content
    response.content_part.added                   its one output_text part, empty
    response.output_text.delta ...                each new piece of text (:class:`gateway.api.completions.Deltas`)
    response.output_text.done, response.content_part.done, response.output_item.done   the whole text
    response.completed                            the response as ``POST /v1/responses`` answers it

The whole text in the closing events is the reply's final text, also when a preview was rewritten and the deltas
stopped short of it: a client's assembled text comes from them. A refusal or failure after the headers went out is
an ``error`` event carrying OpenAI's error object, which the clients raise; a client that leaves ends only its
stream, the turn goes on in its worker.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from agent import json_codec
from gateway.api.completions import Deltas
from gateway.api.errors import ApiError, internal
from gateway.api.replies import ReplyReader
from gateway.api.response_shapes import ResponseHead, output_message, output_text

log = logging.getLogger(__name__)

#: Builds the completed response from the reply's final text (and keeps it, when the client asked to).
Complete = Callable[[str], Awaitable[dict[str, Any]]]


@dataclass
class EventWriter:
    """Writes one stream's events, numbered in order."""

    response: web.StreamResponse
    sequence: int = 0

    async def write(self, kind: str, **fields: Any) -> None:
        data = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        await self.response.write(f"event: {kind}\n".encode() + b"data: " + json_codec.dumps(data) + b"\n\n")

    async def error(self, error: ApiError) -> None:
        """An ``error`` event: the ResponseErrorEvent fields, and the error object the clients raise."""
        body = error.body()["error"]
        await self.write("error", code=error.code, message=error.message, param=error.param, error=body)


async def stream_response(
    request: web.Request, head: ResponseHead, reply: ReplyReader, complete: Complete, headers: dict[str, str]
) -> web.StreamResponse:
    """Stream the reply to the request's message as it is written."""
    response = web.StreamResponse(
        headers={**headers, "Content-Type": "text/event-stream", "Cache-Control": "no-cache"},
    )
    await response.prepare(request)
    writer = EventWriter(response)
    try:
        try:
            await _write_reply(writer, head, reply, complete)
        except ApiError as error:
            await writer.error(error)
        except (ConnectionError, OSError):
            raise
        except Exception:
            log.exception("api: a streamed response failed")
            await writer.error(internal())
        await response.write_eof()
    except ConnectionError:  # the client went away: the turn goes on in its worker all the same
        log.debug("api: a client left its response stream before the end")
    return response


async def _write_reply(writer: EventWriter, head: ResponseHead, reply: ReplyReader, complete: Complete) -> None:
    in_progress = head.body("in_progress", [])
    await writer.write("response.created", response=in_progress)
    await writer.write("response.in_progress", response=in_progress)
    place = {"item_id": head.item_id, "output_index": 0, "content_index": 0}
    await writer.write(
        "response.output_item.added", output_index=0, item=output_message(head.item_id, None, "in_progress")
    )
    await writer.write("response.content_part.added", **place, part=output_text(""))
    deltas, text = Deltas(), ""
    async for event in reply.events():
        new = deltas.new_text(event.text, final=event.final)
        if new:
            await writer.write("response.output_text.delta", **place, delta=new, logprobs=[])
        text = event.text
    await writer.write("response.output_text.done", **place, text=text, logprobs=[])
    await writer.write("response.content_part.done", **place, part=output_text(text))
    await writer.write("response.output_item.done", output_index=0, item=output_message(head.item_id, text))
    await writer.write("response.completed", response=await complete(text))
