"""A streamed answer: Server-Sent Events of ``chat.completion.chunk`` frames, then ``data: [DONE]``.

The response's headers (with the session) go out before the reply is written. A client that goes away
mid-stream ends only this response: the turn runs in whichever worker holds the session, and is committed
there whatever became of the request. An error after the headers went out is an ``error`` frame, which
OpenAI's clients raise as an error. The calls of the client's tools the reply ends with follow its text.
"""

from __future__ import annotations

import logging

from aiohttp import web

from agent import json_codec
from gateway.api.completions import (
    Deltas,
    PromptTokens,
    call_deltas,
    chunk,
    completion_id,
    finish_reason,
    usage,
    usage_chunk,
)
from gateway.api.errors import ApiError, internal
from gateway.api.replies import ReplyReader
from gateway.api.requests import ChatCompletionRequest

log = logging.getLogger(__name__)


def _frame(data: object) -> bytes:
    return b"data: " + json_codec.dumps(data) + b"\n\n"


async def stream_reply(
    request: web.Request,
    asked: ChatCompletionRequest,
    model: str,
    reply: ReplyReader,
    headers: dict[str, str],
    counted: PromptTokens,
) -> web.StreamResponse:
    """Stream the reply to the request's message as it is written."""
    response = web.StreamResponse(
        headers={**headers, "Content-Type": "text/event-stream", "Cache-Control": "no-cache"},
    )
    await response.prepare(request)
    try:
        await _write_reply(response, asked, model, reply, counted)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
    except ConnectionError:  # the client went away: the turn goes on in its worker all the same
        log.debug("api: a client left its stream before the end")
    return response


async def _write_reply(
    response: web.StreamResponse, asked: ChatCompletionRequest, model: str, reply: ReplyReader, counted: PromptTokens
) -> None:
    """The frames of one reply: the role, each new piece of text, the client calls it ends with, the finish, the
    usage when asked for; an error frame in their place when the turn is refused or fails."""
    cid = completion_id()
    try:
        await response.write(_frame(chunk(cid, model, {"role": "assistant", "content": ""})))
        deltas, text = Deltas(), ""
        async for event in reply.events():
            new = deltas.new_text(event.text, final=event.final)
            if new:
                await response.write(_frame(chunk(cid, model, {"content": new})))
            text = event.text
        for delta in call_deltas(reply.calls):
            await response.write(_frame(chunk(cid, model, delta)))
        await response.write(_frame(chunk(cid, model, {}, finish=finish_reason(reply.calls))))
        if asked.include_usage:
            await response.write(_frame(usage_chunk(cid, model, usage(await counted(), text, reply.calls))))
    except ApiError as error:
        await response.write(_frame(error.body()))
    except (ConnectionError, OSError):
        raise
    except Exception:
        log.exception("api: a streamed answer failed")
        await response.write(_frame(internal().body()))
