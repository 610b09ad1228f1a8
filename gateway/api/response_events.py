"""A streamed response: the Responses API's Server-Sent Events, as OpenAI's clients assemble them.

Each event is ``event: <type>`` and ``data:`` its JSON, which repeats the type and numbers the event
(``sequence_number``, from 0). A reply is written as::

    response.created, response.in_progress        the response, in progress, with no output yet
    response.output_item.added                    the reply's message, in progress, with no content
    response.content_part.added                   its one output_text part, empty
    response.output_text.delta ...                each new piece of text (:class:`gateway.api.completions.Deltas`)
    response.output_text.done, response.content_part.done, response.output_item.done   the whole text
    for each call of the client's tools the reply ends with:
      response.output_item.added                  the function_call item, in progress, with no arguments
      response.function_call_arguments.delta      its arguments (whole: the turn tells them at once)
      response.function_call_arguments.done, response.output_item.done
    response.completed                            the response as ``POST /v1/responses`` answers it

The message starts with the reply's first text: a reply that is only calls has none, as its response has none.

The whole text in the closing events is the reply's final text, also when a preview was rewritten and the deltas
stopped short of it: a client's assembled text comes from them. A refusal or failure after the headers went out is
an ``error`` event carrying OpenAI's error object, which the clients raise; a client that leaves ends only its
stream, the turn goes on in its worker.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from agent import json_codec
from gateway.api.completions import Deltas
from gateway.api.errors import ApiError, internal
from gateway.api.replies import ReplyReader
from gateway.api.response_shapes import ResponseHead, output_message, output_text

log = logging.getLogger(__name__)

#: Builds the completed response from the reply's final text and calls (and keeps it, when the client asked to).
Complete = Callable[[str, Sequence[Mapping[str, Any]]], Awaitable[dict[str, Any]]]


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
    deltas, text, started = Deltas(), "", False
    async for event in reply.events():
        new = deltas.new_text(event.text, final=event.final)
        if new and not started:
            started = await _start_message(writer, head)
        if new:
            await writer.write("response.output_text.delta", **place, delta=new, logprobs=[])
        text = event.text
    body = await complete(text, reply.calls)
    for index, item in enumerate(body["output"]):
        if item["type"] == "message":
            if not started:
                await _start_message(writer, head)
            await _end_message(writer, head, text)
        else:
            await _write_call(writer, index, item)
    await writer.write("response.completed", response=body)


async def _start_message(writer: EventWriter, head: ResponseHead) -> bool:
    """The reply's message, in progress with an empty part, as its first text comes."""
    item = output_message(head.item_id, None, "in_progress")
    await writer.write("response.output_item.added", output_index=0, item=item)
    await writer.write(
        "response.content_part.added", item_id=head.item_id, output_index=0, content_index=0, part=output_text("")
    )
    return True


async def _end_message(writer: EventWriter, head: ResponseHead, text: str) -> None:
    place = {"item_id": head.item_id, "output_index": 0, "content_index": 0}
    await writer.write("response.output_text.done", **place, text=text, logprobs=[])
    await writer.write("response.content_part.done", **place, part=output_text(text))
    await writer.write("response.output_item.done", output_index=0, item=output_message(head.item_id, text))


async def _write_call(writer: EventWriter, index: int, item: dict[str, Any]) -> None:
    """One call of the client's tools, as the completed response holds it (the same item id)."""
    await writer.write(
        "response.output_item.added", output_index=index, item={**item, "arguments": "", "status": "in_progress"}
    )
    place = {"item_id": item["id"], "output_index": index}
    await writer.write("response.function_call_arguments.delta", **place, delta=item["arguments"])
    await writer.write("response.function_call_arguments.done", **place, arguments=item["arguments"])
    await writer.write("response.output_item.done", output_index=index, item=item)
