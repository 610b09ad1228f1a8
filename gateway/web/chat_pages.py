"""The browser chat (``platforms.local.web: true``): talk to the bot, watch replies stream, search.

Each browser is its own chat (``web:<id>``), named by an HttpOnly cookie holding a random id: a
page reads only its own chat's sessions and archive, and that id is never shown to another
chat. Everything works without JavaScript — a message is a form post whose answer is the page
with the reply (the post waits for it, up to a minute), the page shows the conversation as
stored — except the live part: with it, a sent message and its streamed reply appear without a
reload, over a WebSocket fed by :class:`~gateway.store.live.LiveHub`.

The chat commands are messages like any other (``/compress``, ``/new``, ``/sessions``,
``/resume N``, ``/usage``): the runner answers them in the chat's turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
import uuid
from dataclasses import dataclass, field

from aiohttp import WSCloseCode, WSMsgType, web
from redis.exceptions import RedisError

from agent.search import SearchError
from gateway.platforms.base import IncomingMessage, Intake
from gateway.session_source import conversation_messages, search_conversations
from gateway.store import SessionStore
from gateway.store.inbox import Inbox
from gateway.store.live import LiveHub
from gateway.web import transcript
from gateway.web.chat_platform import PLATFORM, chat_key
from gateway.web.pages import render

#: The cookie naming a browser's chat.
CHAT_COOKIE = "fg_chat"
_CHAT_ID = re.compile(r"[A-Za-z0-9_-]{16,64}")
#: A sent message's id, made by the page (so a form sent twice is taken in once).
_NONCE = re.compile(r"[A-Za-z0-9_-]{8,64}")
#: Newest live messages the chat page shows (older ones: search, or the message pages).
SHOWN_MESSAGES = 200
#: Sent messages not answered yet that the page shows.
WAITING_SHOWN = 50
#: How long a form post (no JavaScript) waits for its reply before showing the page anyway.
FORM_WAIT_SECONDS = 60.0
#: Messages shown on each side of a search hit.
CONTEXT_RADIUS = 6
#: Longest message the page takes, in characters (a longer one is refused, not cut).
MAX_TEXT_CHARS = 1_000_000
SEARCH_LIMIT = 20


def new_nonce() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True)
class WebChat:
    """The web chat's pages over the gateway's store, inbox, intake and live events."""

    store: SessionStore
    inbox: Inbox
    intake: Intake
    hub: LiveHub
    #: Open live sockets, closed when the server shuts down (a page would otherwise hold it open).
    sockets: set[web.WebSocketResponse] = field(default_factory=set)

    def add_routes(self, app: web.Application) -> None:
        app.on_shutdown.append(self._close_sockets)
        app.router.add_get("/", self.page)
        app.router.add_post("/send", self.send)
        app.router.add_get("/live", self.live)
        app.router.add_get("/search", self.search)
        app.router.add_get("/m/{session}/{message}", self.message)

    async def page(self, request: web.Request) -> web.Response:
        chat_id, fresh = _chat_id(request)
        chat = chat_key(chat_id)
        sid = await self.store.stored_session(chat)
        messages = await self.store.active(chat, sid) if sid else []
        shown = transcript.bubbles(messages)
        waiting = transcript.waiting(await self.inbox.waiting(chat, WAITING_SHOWN))
        response = render("chat.html", session_id=sid or "", bubbles=shown[-SHOWN_MESSAGES:],
                          earlier=max(0, len(shown) - SHOWN_MESSAGES), waiting=waiting, nonce=new_nonce(),
                          query="")
        if fresh:  # Lax: a link from elsewhere must find the chat (cross-site writes are refused anyway)
            response.set_cookie(CHAT_COOKIE, chat_id, httponly=True, samesite="Lax", secure=request.secure,
                                max_age=10 * 365 * 86_400)
        return response

    async def send(self, request: web.Request) -> web.StreamResponse:
        chat_id = _known_chat_id(request)
        form = await request.post()
        text, nonce = str(form.get("text") or "").strip(), str(form.get("nonce") or "")
        if not text:
            raise web.HTTPBadRequest(text="the message is empty\n")
        if len(text) > MAX_TEXT_CHARS:
            raise web.HTTPRequestEntityTooLarge(MAX_TEXT_CHARS, len(text), text="the message is too long\n")
        if not _NONCE.fullmatch(nonce):
            raise web.HTTPBadRequest(text="the form is out of date: reload the page\n")
        message = IncomingMessage(platform=PLATFORM, chat_id=chat_id, user_id="web", user_name="you",
                                  update_id=nonce, text=text)
        if "application/json" in request.headers.get("Accept", ""):
            return web.json_response({"update_id": nonce, "queued": await self._take_in(message)})
        # Without JavaScript the reply comes with the page: the post waits for it (listening before the
        # message is taken in, so a quick reply is not missed).
        async with self.hub.listen(message.chat) as events:
            if await self._take_in(message):
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(FORM_WAIT_SECONDS):
                        while (await events.get()).get("type") != "final":
                            pass
        raise web.HTTPSeeOther("/#end")

    async def _take_in(self, message: IncomingMessage) -> bool:
        """Hand the message to the intake; False for one taken in before (the same form sent twice)."""
        try:
            return await self.intake(message)
        except (RedisError, OSError) as error:  # nothing was taken in: the person can send it again
            raise web.HTTPServiceUnavailable(text=f"the message could not be stored ({type(error).__name__});"
                                                  " please send it again in a moment\n") from error

    async def live(self, request: web.Request) -> web.WebSocketResponse:
        chat_id = _known_chat_id(request)
        socket = web.WebSocketResponse(heartbeat=30)
        await socket.prepare(request)
        async with self.hub.listen(chat_key(chat_id)) as events:
            self.sockets.add(socket)
            closed = asyncio.create_task(_until_closed(socket))
            try:
                while not closed.done():
                    getting = asyncio.create_task(events.get())
                    await asyncio.wait((getting, closed), return_when=asyncio.FIRST_COMPLETED)
                    if not getting.done():
                        getting.cancel()
                        break
                    await socket.send_json(getting.result())
            except (ConnectionError, RuntimeError):  # the page went away mid-send
                pass
            finally:
                self.sockets.discard(socket)
                closed.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await closed
        return socket

    async def _close_sockets(self, _app: web.Application) -> None:
        for socket in list(self.sockets):
            await socket.close(code=WSCloseCode.GOING_AWAY, message=b"foldgate is stopping")

    async def search(self, request: web.Request) -> web.Response:
        chat_id, _fresh = _chat_id(request)
        chat = chat_key(chat_id)
        query = request.query.get("q", "").strip()
        hits, problem = [], ""
        sid = await self.store.stored_session(chat)
        if query and sid:
            try:
                hits = await search_conversations(self.store, chat, sid, query, SEARCH_LIMIT)
            except SearchError as error:
                problem = str(error)
        return render("search.html", query=query, hits=hits, problem=problem, searched=bool(query and sid))

    async def message(self, request: web.Request) -> web.Response:
        chat_id = _known_chat_id(request)
        chat = chat_key(chat_id)
        session_id, message_id = request.match_info["session"], request.match_info["message"]
        found = transcript.around(await conversation_messages(self.store, chat, session_id), message_id,
                                  CONTEXT_RADIUS)
        if found is None:
            return render("not_found.html", status=404, what=f"message {message_id}", back="/")
        shown, position = found
        return render("message.html", bubbles=shown, position=position, session_id=session_id,
                      message_id=message_id, back="/", title=f"Message {message_id}")


def _chat_id(request: web.Request) -> tuple[str, bool]:
    """The browser's chat id, and whether it is new (no valid cookie yet)."""
    known = request.cookies.get(CHAT_COOKIE, "")
    if _CHAT_ID.fullmatch(known):
        return known, False
    return secrets.token_urlsafe(18), True


def _known_chat_id(request: web.Request) -> str:
    known = request.cookies.get(CHAT_COOKIE, "")
    if not _CHAT_ID.fullmatch(known):
        raise web.HTTPForbidden(text="no chat here yet: open the chat page first\n")
    return known


async def _until_closed(socket: web.WebSocketResponse) -> None:
    """Read (and ignore) what the page sends until it closes the socket."""
    async for message in socket:
        if message.type == WSMsgType.ERROR:
            break
