"""The Responses API on the API's sessions: ``POST /v1/responses`` and ``GET /v1/responses/{id}``.

A request is one message of a session (:mod:`gateway.api.response_sessions` says which), handed to the intake and
answered as a chat request is (:func:`gateway.api.turns.asked`); only the shapes differ: a ``response`` object
(:mod:`gateway.api.response_shapes`), or its events when streamed (:mod:`gateway.api.response_events`). The
``X-Foldgate-Session`` header names the session on every answer.

The client's own function tools are served as for a chat request: the request's ``tools`` are offered to the
model, its ``function_call_output`` items are the results the turn takes, and a reply that ends with calls
ends with them as ``function_call`` items; a refusal of the tools or results is the request's 400 (the field
named as this API names it, ``input[i].call_id`` for a result of no pending call).

``instructions`` (with the input's system and developer items) are the session's system prompt, as a chat
request's system message is: kept by the session from that turn on, until a later request brings another. A
response kept (``store``, the default) is recorded with the point its turn left the session at, before the
client has it (:class:`Keeper`), so the client's next request can already name it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web
from redis.exceptions import RedisError

from gateway.api.adapter import PLATFORM, chat_key
from gateway.api.errors import ApiError, not_answered, not_stored, too_fast
from gateway.api.images import Download, image_download, keep_images
from gateway.api.replies import ReplyReader
from gateway.api.requests import ChatCompletionRequest, ChatMessage, new_turn
from gateway.api.response_events import stream_response
from gateway.api.response_requests import ResponseRequest, parse_response_request
from gateway.api.response_sessions import ResponseSession, choose_session, find_response, response_not_found
from gateway.api.response_shapes import ResponseHead, response_usage
from gateway.api.sessions import SESSION_HEADER, ApiSessions, chat_id, system_prompt_of
from gateway.api.turns import STORE_RETRY_SECONDS, asked, hand_in
from gateway.platforms.base import IncomingMessage, Intake
from gateway.store.api_responses import ApiResponses, StoredResponse
from gateway.store.approvals import Approvals
from gateway.store.errors import StoreError
from gateway.store.inbox import Inbox
from gateway.store.live import LiveHub
from gateway.store.media import MediaStore
from gateway.store.session_store import SessionStore

log = logging.getLogger(__name__)


class ServedBot(Protocol):
    """What the routes need of a running bot (:class:`gateway.api.server.ApiBot`; that module imports this one, so
    it is not imported here)."""

    @property
    def model_id(self) -> str: ...
    @property
    def intake(self) -> Intake: ...
    @property
    def hub(self) -> LiveHub: ...
    @property
    def inbox(self) -> Inbox: ...
    @property
    def sessions(self) -> ApiSessions: ...
    @property
    def answers(self) -> Callable[[IncomingMessage], Awaitable[bool]]: ...
    @property
    def rate_wait(self) -> Callable[[IncomingMessage], Awaitable[float]]: ...
    @property
    def media(self) -> MediaStore | None: ...
    @property
    def approvals(self) -> Approvals | None: ...


class ApiHost(Protocol):
    """What the routes need of the API server (:class:`gateway.api.server.ApiServer`): its keys and bots."""

    @property
    def bots(self) -> Callable[[], Mapping[str, ServedBot]]: ...
    def key_name(self, request: web.Request) -> str: ...
    def bot_for(self, model: str) -> ServedBot: ...
    @property
    def fetch_private_urls(self) -> Callable[[], bool]: ...


def responses_of(bot: ServedBot) -> ApiResponses:
    """The kept responses of ``bot``: in its own store, beside its sessions."""
    store = bot.sessions.store
    return ApiResponses(store.channel, store.prefix)


@dataclass
class Keeper:
    """Makes the response from the reply, once, and records where its turn left the session (kept for
    ``GET /v1/responses/{id}`` and ``previous_response_id`` when the client asked to keep it)."""

    store: SessionStore
    responses: ApiResponses
    key_name: str
    session_id: str
    head: ResponseHead
    #: The request as chat messages: what its usage counts.
    messages: list[ChatMessage]
    body: dict[str, Any] | None = None

    async def on_reply(self, reply: dict[str, Any]) -> None:
        """Told the reply before the client has it (:class:`gateway.api.turns.Telling`): its turn is stored by
        then, so the session's last message id is where this response leaves it. A store that does not answer
        costs the record only (the response is then not found later), never the answer."""
        body = await self.complete(str(reply.get("content") or ""), reply.get("tool_calls") or ())
        if not self.head.store:
            return
        chat = chat_key(chat_id(self.key_name, self.session_id))
        try:
            current = await self.store.stored_session(chat)
            if current is None:
                return
            meta = await self.store.meta(chat, current)
            stored = StoredResponse(self.head.id, self.session_id, current, meta.next_id, meta.system_prompt, body)
            await self.responses.put(self.key_name, stored)
        except (RedisError, OSError, StoreError) as error:
            log.warning("api: response %s could not be kept (%s)", self.head.id, error)

    async def complete(self, text: str, calls: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
        """The completed response for the reply's final ``text`` and the client calls it ends with (the same
        object every time it is asked for, so the calls' item ids are the same in a stream and in the store)."""
        if self.body is None:
            self.body = self.head.completed(text, response_usage(self.messages, text, calls), calls)
        return self.body


@dataclass
class ResponsesApi:
    """The Responses API's routes, over the API server's keys and bots."""

    server: ApiHost

    async def create(self, request: web.Request) -> web.StreamResponse:
        key = self.server.key_name(request)
        asked_for = parse_response_request(await request.read())
        bot = self.server.bot_for(asked_for.model)
        store, responses = bot.sessions.store, responses_of(bot)
        chosen = await choose_session(store, responses, key, request.headers.get(SESSION_HEADER), asked_for)
        headers = {SESSION_HEADER: chosen.session_id}
        try:
            chat_request = asked_for.as_chat()
            message = await _message(chat_request, key, chosen, bot, image_download(self.server.fetch_private_urls()))
            refusal = await _refusal(bot, message)
            if refusal is not None:  # kept, as every platform's messages are, and refused at once
                await hand_in(bot.intake, message)
                raise refusal
            head = _head(asked_for, bot.model_id)
            keeper = Keeper(store, responses, key, chosen.session_id, head, chat_request.messages)
            async with asked(
                bot.hub, bot.intake, bot.inbox, message, keeper.on_reply, approvals=bot.approvals
            ) as next_event:
                reply = ReplyReader(next_event)
                if message.client_tools or message.tool_results:  # a refusal of them is a 400, not a stream
                    await _first(reply, asked_for)
                if asked_for.stream:
                    return await stream_response(request, head, reply, keeper.complete, headers)
                text = ""
                async for event in reply.events():
                    text = event.text
                return web.json_response(await keeper.complete(text, reply.calls), headers=headers)
        except ApiError as error:
            return error.response(headers)
        except (RedisError, OSError) as error:  # the live events could not be listened to: nothing was taken in
            log.warning("api: Redis does not answer (%s); a response request was refused", error)
            return not_stored(STORE_RETRY_SECONDS).response(headers)

    async def retrieve(self, request: web.Request) -> web.Response:
        """A kept response of the request's key, looked for in each bot's store (the path names no model)."""
        key = self.server.key_name(request)
        response_id = request.match_info["response_id"]
        for bot in self.server.bots().values():
            try:
                found = await find_response(responses_of(bot), key, response_id, None)
            except ApiError as error:
                if error.status != 404:
                    raise
                continue
            return web.json_response(found.body, headers={SESSION_HEADER: found.session_id})
        raise response_not_found(response_id)


async def _first(reply: ReplyReader, asked_for: ResponseRequest) -> None:
    """Wait for the reply's first event; a refused result is named by its item (the turn names the chat field)."""
    try:
        await reply.first()
    except ApiError as error:
        if error.param != "tool_call_id":
            raise
        error.param = asked_for.result_param(error.message)
        raise


def _head(asked_for: ResponseRequest, model: str) -> ResponseHead:
    return ResponseHead(
        model=model,
        instructions=asked_for.instructions,
        previous_response_id=asked_for.previous_response_id,
        conversation=asked_for.conversation_id,
        store=asked_for.store,
        tools=tuple(asked_for.tools or ()),
        tool_choice="none" if asked_for.tool_choice == "none" else "auto",
    )


async def _message(
    chat_request: ChatCompletionRequest, key: str, chosen: ResponseSession, bot: ServedBot, fetch: Download
) -> IncomingMessage:
    """The person's new message (the input's last message, with its images kept) to the chosen session, with the
    client's tools and the results of its calls the input ends with; its system prompt is the request's
    instructions, else the one a fork carries over (None: the session's stays)."""
    chat = chat_id(key, chosen.session_id)
    turn = new_turn(chat_request)
    return IncomingMessage(
        platform=PLATFORM,
        chat_id=chat,
        user_id=key,
        user_name=key,
        update_id=uuid.uuid4().hex,
        text=turn.text(chat_request),
        items=await keep_images(chat_request, turn.user_index, bot.media, chat, fetch),
        client_tools=chat_request.client_tools,
        tool_results=turn.results,
        system_prompt=system_prompt_of(chat_request.messages) or chosen.carried_prompt,
        awaits_own_reply=True,
    )


async def _refusal(bot: ServedBot, message: IncomingMessage) -> ApiError | None:
    """Why the message will not be answered, known before it is handed in (as for chat requests)."""
    if not await bot.answers(message):
        return not_answered()
    wait = await bot.rate_wait(message)
    return too_fast(wait) if wait > 0 else None
