"""The browser chat (``platforms.local.web: true``): talk to the bot, watch replies stream, search.

Each browser is its own chat (``web:<id>``), named by an HttpOnly cookie holding a random id: a
page reads only its own chat's sessions and archive, and that id is never shown to another
chat. Everything works without JavaScript — a message is a form post whose answer is the page
with the reply (the post waits for it, up to a minute), the page shows the conversation as
stored — except the live part: with it, a sent message and its streamed reply appear without a
reload, over a WebSocket fed by :class:`~gateway.store.live.LiveHub`.

Files come with a message as a multipart form (a file input, or files dropped on the chat): each
one is read with ``media.max_bytes`` as its limit (:mod:`gateway.web.uploads`), kept in the chat's
media store, and handed in as an item naming those bytes; the runner's intake reads them back
through :class:`~gateway.web.chat_platform.WebChatAdapter`. A message's images are shown from
``/media/<sha>``, which serves the browser's own chat's images only.

The chat commands are messages like any other (``/compress``, ``/new``, ``/sessions``,
``/resume N``, ``/usage``): the runner answers them in the chat's turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import secrets
import uuid
from dataclasses import dataclass, field

from aiohttp import WSCloseCode, WSMsgType, web
from redis.exceptions import RedisError

from agent.search import SearchError
from gateway.media.errors import MediaTooLarge
from gateway.media.units import size_text
from gateway.platforms.base import IncomingMessage, Intake, MediaItem
from gateway.session_source import MeaningSearch, conversation_messages, search_conversations
from gateway.store import SessionStore
from gateway.store.inbox import Inbox
from gateway.store.live import LiveHub
from gateway.store.media import MediaStore
from gateway.web import transcript
from gateway.web.chat_platform import PLATFORM, chat_key
from gateway.web.live_adapter import upload_file_id
from gateway.web.media_files import image_response
from gateway.web.pages import render
from gateway.web.uploads import FormError, SentForm, Upload, is_multipart, media_item, read_send_form

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
#: The most bytes a message's text takes in a form (UTF-8, form-encoded).
MAX_TEXT_BYTES = 4 * MAX_TEXT_CHARS
#: Where the chat's images are served; the image's sha follows.
MEDIA_PATH = "/media/"
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
    #: Every chat's files (``media.max_bytes`` is the most one upload may be).
    media: MediaStore
    #: Open live sockets, closed when the server shuts down (a page would otherwise hold it open).
    sockets: set[web.WebSocketResponse] = field(default_factory=set)
    #: The chat's search by meaning, fused with the keywords as in ``session_search`` (None: keywords alone).
    meaning: MeaningSearch | None = None

    def add_routes(self, app: web.Application) -> None:
        app.on_shutdown.append(self._close_sockets)
        app.router.add_get("/", self.page)
        app.router.add_post("/send", self.send)
        app.router.add_get("/live", self.live)
        app.router.add_get("/search", self.search)
        app.router.add_get("/m/{session}/{message}", self.message)
        app.router.add_get(MEDIA_PATH + "{sha}", self.image)

    async def page(self, request: web.Request) -> web.Response:
        chat_id, fresh = _chat_id(request)
        chat = chat_key(chat_id)
        sid = await self.store.stored_session(chat)
        messages = await self.store.active(chat, sid) if sid else []
        shown = transcript.bubbles(messages)
        waiting = transcript.waiting(await self.inbox.waiting(chat, WAITING_SHOWN))
        response = render(
            "chat.html",
            session_id=sid or "",
            bubbles=shown[-SHOWN_MESSAGES:],
            earlier=max(0, len(shown) - SHOWN_MESSAGES),
            waiting=waiting,
            nonce=new_nonce(),
            query="",
            max_file_size=size_text(self.media.max_bytes),
        )
        if fresh:  # Lax: a link from elsewhere must find the chat (cross-site writes are refused anyway)
            response.set_cookie(
                CHAT_COOKIE, chat_id, httponly=True, samesite="Lax", secure=request.secure, max_age=10 * 365 * 86_400
            )
        return response

    async def send(self, request: web.Request) -> web.StreamResponse:
        chat_id = _known_chat_id(request)
        form = await self._read_form(request)
        if not form.text and not form.files:
            raise web.HTTPBadRequest(text="the message is empty\n")
        if len(form.text) > MAX_TEXT_CHARS:
            raise web.HTTPRequestEntityTooLarge(MAX_TEXT_CHARS, len(form.text), text="the message is too long\n")
        if not _NONCE.fullmatch(form.nonce):
            raise web.HTTPBadRequest(text="the form is out of date: reload the page\n")
        nonce = form.nonce
        items = await self._keep(chat_id, form.files)
        form.files.clear()  # the bytes are in the store now: the wait for the reply below must not hold them too
        # Each browser is a chat of one person: its budget, its rate and its block are its own (``web:<chat id>``).
        message = IncomingMessage(
            platform=PLATFORM,
            chat_id=chat_id,
            user_id=chat_id,
            user_name="you",
            update_id=nonce,
            text=form.text,
            items=items,
        )
        if "application/json" in request.headers.get("Accept", ""):
            return web.json_response(
                {
                    "update_id": nonce,
                    "queued": await self._take_in(message),
                    "items": [_item_json(item) for item in items],
                }
            )
        # Without JavaScript the reply comes with the page: the post waits for it (listening before the
        # message is taken in, so a quick reply is not missed).
        async with self.hub.listen(message.chat) as events:
            if await self._take_in(message):
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(FORM_WAIT_SECONDS):
                        while (await events.get()).get("type") != "final":
                            pass
        raise web.HTTPSeeOther("/#end")

    async def _read_form(self, request: web.Request) -> SentForm:
        """The sent message: a plain form's text, or a multipart form's text and files (each read with
        ``media.max_bytes`` as its limit, and refused as soon as it passes it)."""
        if not is_multipart(request):
            form = await request.post()
            return SentForm(str(form.get("text") or "").strip(), str(form.get("nonce") or ""))
        try:
            return await read_send_form(request, max_file_bytes=self.media.max_bytes, max_text_bytes=MAX_TEXT_BYTES)
        except MediaTooLarge as error:
            raise web.HTTPRequestEntityTooLarge(error.limit, error.size, text=f"{error}: nothing was sent\n") from error
        except FormError as error:
            raise web.HTTPBadRequest(text=f"{error}\n") from error

    async def _keep(self, chat_id: str, files: list[Upload]) -> tuple[MediaItem, ...]:
        """Store the files in the chat's media store; the items that name them."""
        items = []
        try:
            for upload in files:
                file_id = upload_file_id(chat_id, hashlib.sha256(upload.data).hexdigest())
                await self.media.put(
                    chat_key(chat_id), upload.data, mime=upload.mime, name=upload.name, file_id=file_id
                )
                items.append(media_item(upload, file_id))
        except (RedisError, OSError) as error:
            raise _not_stored(error) from error
        return tuple(items)

    async def _take_in(self, message: IncomingMessage) -> bool:
        """Hand the message to the intake; False for one taken in before (the same form sent twice)."""
        try:
            return await self.intake(message)
        except (RedisError, OSError) as error:  # nothing was taken in: the person can send it again
            raise _not_stored(error) from error

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
                hits = await search_conversations(self.store, chat, sid, query, SEARCH_LIMIT, meaning=self.meaning)
            except SearchError as error:
                problem = str(error)
        return render("search.html", query=query, hits=hits, problem=problem, searched=bool(query and sid))

    async def message(self, request: web.Request) -> web.Response:
        chat_id = _known_chat_id(request)
        chat = chat_key(chat_id)
        session_id, message_id = request.match_info["session"], request.match_info["message"]
        found = transcript.around(await conversation_messages(self.store, chat, session_id), message_id, CONTEXT_RADIUS)
        if found is None:
            return render("not_found.html", status=404, what=f"message {message_id}", back="/")
        shown, position = found
        return render(
            "message.html",
            bubbles=shown,
            position=position,
            session_id=session_id,
            message_id=message_id,
            back="/",
            title=f"Message {message_id}",
            media=MEDIA_PATH,
        )

    async def image(self, request: web.Request) -> web.Response:
        """An image of this browser's chat, by its sha (never another chat's: the store keeps each chat's apart)."""
        return await image_response(self.media, chat_key(_known_chat_id(request)), request.match_info["sha"])


def _not_stored(error: Exception) -> web.HTTPServiceUnavailable:
    return web.HTTPServiceUnavailable(
        text=f"the message could not be stored ({type(error).__name__}); please send it again in a moment\n"
    )


def _item_json(item: MediaItem) -> dict[str, object]:
    """An item as the page's script shows it at once (the same view the page renders)."""
    view = transcript.sent_item_view(item)
    return {"kind": view.kind, "name": view.name, "about": view.about, "sha": view.sha}


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
