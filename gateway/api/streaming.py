"""A streamed answer: Server-Sent Events of ``chat.completion.chunk`` frames, then ``data: [DONE]``.

The response's headers (with the session) go out before the reply is written. A client that goes away
mid-stream ends only this response: the turn runs in whichever worker holds the session, and is committed
there whatever became of the request. An error after the headers went out is an ``error`` frame, which
OpenAI's clients raise as an error.
"""

from __future__ import annotations

import logging

from aiohttp import web

from agent import json_codec
from gateway.api.completions import Deltas, chunk, completion_id, usage, usage_chunk
from gateway.api.errors import ApiError, internal
from gateway.api.requests import ChatCompletionRequest
from gateway.api.turns import Listen, events

log = logging.getLogger(__name__)


def _frame(data: object) -> bytes:
    return b"data: " + json_codec.dumps(data) + b"\n\n"


async def stream_reply(
    request: web.Request, asked: ChatCompletionRequest, model: str, next_event: Listen, headers: dict[str, str]
) -> web.StreamResponse:
    """Stream the reply to the request's message as it is written."""
    response = web.StreamResponse(
        headers={**headers, "Content-Type": "text/event-stream", "Cache-Control": "no-cache"},
    )
    await response.prepare(request)
    try:
        await _write_reply(response, asked, model, next_event)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
    except ConnectionError:  # the client went away: the turn goes on in its worker all the same
        log.debug("api: a client left its stream before the end")
    return response


async def _write_reply(
    response: web.StreamResponse, asked: ChatCompletionRequest, model: str, next_event: Listen
) -> None:
    """The frames of one reply: the role, each new piece of text, the finish, the usage when asked for; an
    error frame in their place when the turn is refused or fails."""
    cid = completion_id()
    try:
        await response.write(_frame(chunk(cid, model, {"role": "assistant", "content": ""})))
        deltas, reply = Deltas(), ""
        async for event in events(next_event):
            new = deltas.new_text(event.text, final=event.final)
            if new:
                await response.write(_frame(chunk(cid, model, {"content": new})))
            reply = event.text
        await response.write(_frame(chunk(cid, model, {}, finish="stop")))
        if asked.include_usage:
            await response.write(_frame(usage_chunk(cid, model, usage(asked.messages, reply))))
    except ApiError as error:
        await response.write(_frame(error.body()))
    except (ConnectionError, OSError):
        raise
    except Exception:
        log.exception("api: a streamed answer failed")
        await response.write(_frame(internal().body()))
