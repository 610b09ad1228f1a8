"""The OpenAI-compatible HTTP API: ``POST /v1/chat/completions`` and ``GET /v1/models``, for OpenAI's clients.

Every request names its key (``Authorization: Bearer <key>``), compared with each configured key in constant
time; the key's name is the person (``api:<name>``) whose access rules, budget and rate apply. A request's
last user message is handed to the gateway's intake as the message of an API session (a chat of its own,
:mod:`gateway.api.sessions`), and the answer is the reply the turn gives it, whole or streamed. The session's
history is foldgate's transcript, not what the client resends: a client continues a session by sending the
``X-Foldgate-Session`` header every answer carries, or by resending the conversation it had. The request's
images are stored as it comes (:mod:`gateway.api.images`), its function tools are offered to the model beside
the bot's own, and the results of their calls that end a request continue the session
(:func:`gateway.api.requests.new_turn`).
"""

from __future__ import annotations

import functools
import hmac
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web
from redis.exceptions import RedisError

from gateway.api.adapter import PLATFORM, chat_key
from gateway.api.completions import PromptTokens, completion, completion_id, prompt_tokens, usage
from gateway.api.errors import (
    ApiError,
    bad_key,
    internal,
    not_answered,
    not_stored,
    too_fast,
    too_large,
    unknown_model,
)
from gateway.api.images import Download, image_download, keep_images
from gateway.api.replies import ReplyReader
from gateway.api.requests import ChatCompletionRequest, new_turn, parse_request
from gateway.api.responses import ResponsesApi
from gateway.api.sessions import SESSION_HEADER, ApiSessions, chat_id, system_prompt_of
from gateway.api.streaming import stream_reply
from gateway.api.turns import STORE_RETRY_SECONDS, asked, hand_in
from gateway.metrics import ApiRequests
from gateway.platforms.base import IncomingMessage, Intake
from gateway.store.approvals import Approvals
from gateway.store.inbox import Inbox
from gateway.store.live import LiveHub
from gateway.store.media import MediaStore

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class ApiBot:
    """What the API needs of one running bot: its intake, its live events, the id clients name it by, and its
    own system prompt (the one a client's system message may repeat)."""

    model_id: str
    intake: Intake
    hub: LiveHub
    #: The bot's inboxes: where a request sees that its message's turn ended without a reply.
    inbox: Inbox
    #: Which session a request goes to, and the record of what its client will resend.
    sessions: ApiSessions
    #: Whether the bot answers a message's sender (``access``: blocked, or not among those allowed).
    answers: Callable[[IncomingMessage], Awaitable[bool]]
    #: Seconds until the sender's next message would be answered (``access.messages_per_minute``; 0.0 now).
    rate_wait: Callable[[IncomingMessage], Awaitable[float]]
    #: Where a request's images are kept for its turn (``media.max_bytes`` each); None: images are refused.
    media: MediaStore | None = None
    #: The questions the bot's tools ask (policy ``ask``): a request answering one hears the reply of the turn
    #: that asked. None: such a request hears only its own.
    approvals: Approvals | None = None


@dataclass
class ApiServer:
    """The API's routes over the running bots (asked at every request: a reload replaces them)."""

    #: Each key's secret by its name, read at every request (a reload's keys apply at once).
    keys: Callable[[], dict[str, str]]
    bots: Callable[[], dict[str, ApiBot]]
    #: The largest body taken, in bytes.
    max_body: int
    requests: ApiRequests | None = None
    #: Whether a request's https image may come from any address (``platforms.api.fetch_private_urls``), asked
    #: at every request.
    fetch_private_urls: Callable[[], bool] = lambda: False

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._answered], client_max_size=self.max_body)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_get("/v1/models", self.models)
        responses = ResponsesApi(self)
        app.router.add_post("/v1/responses", responses.create)
        app.router.add_get("/v1/responses/{response_id}", responses.retrieve)
        return app

    @web.middleware
    async def _answered(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Every failure in OpenAI's error shape (never a traceback), and every answer counted."""
        try:
            response = await handler(request)
        except ApiError as error:
            response = error.response()
        except web.HTTPRequestEntityTooLarge:
            response = too_large(self.max_body).response()
        except web.HTTPException as error:  # no such route, or method
            response = ApiError(error.status, error.reason, code=None).response()
        except Exception:
            log.exception("api: a request failed")
            response = internal().response()
        if self.requests is not None:
            self.requests.count(_endpoint(request), response.status)
        return response

    def key_name(self, request: web.Request) -> str:
        """The name of the key the request sends (each key compared in constant time, all of them every time)."""
        sent = request.headers.get("Authorization", "").removeprefix("Bearer ").strip().encode()
        found = None
        for name, secret in self.keys().items():
            if hmac.compare_digest(sent, secret.encode()) and secret:
                found = name
        if found is None:
            raise bad_key()
        return found

    def bot_for(self, model: str) -> ApiBot:
        """The bot a request's ``model`` names: with one bot any name reaches it; with several, its id."""
        bots = self.bots()
        if len(bots) == 1:
            return next(iter(bots.values()))
        for bot in bots.values():
            if bot.model_id == model:
                return bot
        if not bots:
            raise ApiError(503, "No bot is running.", type="server_error", code="unavailable", retry_after=10)
        raise unknown_model(model, [bot.model_id for bot in bots.values()])

    async def models(self, request: web.Request) -> web.Response:
        self.key_name(request)
        listed = [
            {"id": bot.model_id, "object": "model", "created": 0, "owned_by": "foldgate"}
            for bot in self.bots().values()
        ]
        return web.json_response({"object": "list", "data": listed})

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        key = self.key_name(request)
        asked_for = parse_request(await request.read())
        bot = self.bot_for(asked_for.model)
        chosen = await bot.sessions.choose(key, request.headers.get(SESSION_HEADER), asked_for.messages)
        session = chosen.session_id
        headers = {SESSION_HEADER: session}
        try:
            fetch = image_download(self.fetch_private_urls())
            message = await _message(asked_for, key, chat_id(key, session), bot.media, fetch)
            refusal = await _refusal(bot, message)
            if refusal is not None:  # kept, as every platform's messages are, and refused at once
                await hand_in(bot.intake, message)
                raise refusal
            async with asked(
                bot.hub, bot.intake, bot.inbox, message, chosen.record, approvals=bot.approvals
            ) as next_event:
                reply = ReplyReader(next_event)
                if message.client_tools or message.tool_results:  # a refusal of them is a 400, not a stream
                    await reply.first()
                counted = functools.partial(prompt_tokens, bot.sessions.store, chat_key(chat_id(key, session)))
                if asked_for.stream:
                    return await stream_reply(request, asked_for, bot.model_id, reply, headers, counted)
                return await _whole_reply(bot.model_id, reply, headers, counted)
        except ApiError as error:
            return error.response(headers)
        except (RedisError, OSError) as error:  # the live events could not be listened to: nothing was taken in
            log.warning("api: Redis does not answer (%s); a request was refused", error)
            return not_stored(STORE_RETRY_SECONDS).response(headers)


async def _message(
    asked_for: ChatCompletionRequest, key: str, chat: str, media: MediaStore | None, fetch: Download
) -> IncomingMessage:
    """The message the request brings to session ``chat``: the person's text and images, the client's tools, and
    the results of the client's calls the request ends with."""
    turn = new_turn(asked_for)
    return IncomingMessage(
        platform=PLATFORM,
        chat_id=chat,
        user_id=key,
        user_name=key,
        update_id=uuid.uuid4().hex,
        text=turn.text(asked_for),
        items=await keep_images(asked_for, turn.user_index, media, chat, fetch),
        client_tools=asked_for.client_tools,
        tool_results=turn.results,
        system_prompt=system_prompt_of(asked_for.messages),
        awaits_own_reply=True,
    )


async def _whole_reply(model: str, reply: ReplyReader, headers: dict[str, str], counted: PromptTokens) -> web.Response:
    text = ""
    async for event in reply.events():
        text = event.text
    answer = completion(completion_id(), model, text, usage(await counted(), text, reply.calls), reply.calls)
    return web.json_response(answer, headers=headers)


async def _refusal(bot: ApiBot, message: IncomingMessage) -> ApiError | None:
    """Why the message will not be answered, known before it is handed in: its sender is not answered here (403),
    or sends faster than ``access.messages_per_minute`` (429; the intake then keeps it unanswered)."""
    if not await bot.answers(message):
        return not_answered()
    wait = await bot.rate_wait(message)
    return too_fast(wait) if wait > 0 else None


def _endpoint(request: web.Request) -> str:
    """The route a request reached, as the metric names it (``other`` for none)."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "other"
