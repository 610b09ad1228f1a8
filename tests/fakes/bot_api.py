"""A fake Telegram Bot API: a real aiohttp server on 127.0.0.1 serving ``/bot<token>/<method>``.

Point the real aiogram client at it — ``TelegramAPIServer.from_base(server.base_url)``, which
builds ``{base}/bot{token}/{method}``, or ``platforms.telegram.api_server`` — and script it::

    async with FakeBotAPI() as api:
        api.push(api.private_message(42, "hello"), api.group_message(-100, 7, "@foldgate_bot hi"))
        api.rate_limit_sends(1, retry_after=2)   # the next sendMessage gets a 429
        ...
        assert [m.text for m in api.sent] == ["..."]

Methods: getMe; getUpdates with Telegram's offset/limit/timeout semantics (updates below the
offset are confirmed and forgotten, at most ``limit`` returned, a long poll waits up to
``timeout`` seconds for new ones; a second poller terminates the waiting one with 409, and
``conflict`` or an active webhook make every call a 409); sendMessage (records chat_id and
text, refuses empty text and text over 4096 UTF-16 units like Telegram, answers a Message;
scripted 429s and 5xx answers); sendChatAction; setWebhook / deleteWebhook. Update builders
produce the JSON Telegram sends, entities included (offsets in UTF-16 units).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from aiohttp import web

MESSAGE_LIMIT = 4096
_COMMAND = re.compile(r"^/[A-Za-z0-9_]{1,32}(?:@[A-Za-z0-9_]{3,32})?")
_MENTION = re.compile(r"(?<![\w@])@[A-Za-z0-9_]{5,32}\b")
TERMINATED = "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"
WEBHOOK_ACTIVE = "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first"


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def entities_for(text: str) -> list[dict[str, Any]]:
    """The bot_command and mention entities Telegram attaches to ``text``."""
    found = []
    command = _COMMAND.match(text)
    if command:
        found.append({"type": "bot_command", "offset": 0, "length": utf16_len(command.group())})
    for mention in _MENTION.finditer(text):
        found.append({"type": "mention", "offset": utf16_len(text[: mention.start()]), "length": utf16_len(mention.group())})
    return sorted(found, key=lambda entity: entity["offset"])


@dataclass
class SendAttempt:
    """One sendMessage request, answered or refused."""

    chat_id: str
    text: str
    status: int
    at: float
    params: dict[str, str] = field(default_factory=dict)


@dataclass
class SentMessage:
    """A message the fake accepted."""

    chat_id: str
    text: str
    message_id: int
    params: dict[str, str]


@dataclass
class GetUpdatesCall:
    offset: Optional[int]
    limit: int
    timeout: int


class FakeBotAPI:
    """A scriptable Bot API for one bot token."""

    def __init__(self, token: str = "123456789:fake-token-for-tests", *, username: str = "foldgate_bot",
                 first_name: str = "Foldgate") -> None:
        self.token = token
        self.bot_id = int(token.split(":", 1)[0])
        self.username = username
        self.first_name = first_name
        self.conflict: Optional[str] = None
        self.webhook: Optional[dict[str, str]] = None
        self.sent: list[SentMessage] = []
        self.send_attempts: list[SendAttempt] = []
        self.chat_actions: list[tuple[str, str]] = []
        self.get_updates_calls: list[GetUpdatesCall] = []
        self.calls: list[str] = []
        #: Called with the offset of every getUpdates request before it is answered.
        self.on_get_updates: Optional[Callable[[Optional[int]], None]] = None
        self._pending: list[dict[str, Any]] = []
        self._send_script: list[tuple[int, dict[str, Any]]] = []
        self._update_ids = iter(range(500_000_001, 10**10))
        self._message_ids = iter(range(1, 10**9))
        self._changed: Optional[asyncio.Event] = None
        self._waiting_poll: Optional[asyncio.Event] = None
        self._runner: Optional[web.AppRunner] = None
        self._closing = False
        self.port = 0

    # ------------------------------------------------------------------ server

    async def start(self) -> "FakeBotAPI":
        self._changed = asyncio.Event()
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def stop(self) -> None:
        self._closing = True
        self._notify()
        if self._runner is not None:
            await self._runner.cleanup()

    async def __aenter__(self) -> "FakeBotAPI":
        return await self.start()

    async def __aexit__(self, *_exc: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()

    async def wait_until(self, predicate: Callable[[], bool], timeout: float = 30.0) -> None:
        """Wait until ``predicate()`` holds (checked whenever the fake is called or fed)."""
        assert self._changed is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate():
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(f"condition not met within {timeout}s")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), min(remaining, 0.05))
            except asyncio.TimeoutError:
                pass

    # ------------------------------------------------------------------ scripting

    def push(self, *updates: dict[str, Any]) -> None:
        """Make updates available to getUpdates."""
        self._pending.extend(updates)
        self._notify()

    @property
    def pending_updates(self) -> int:
        """Updates not yet confirmed by a getUpdates offset."""
        return len(self._pending)

    def rate_limit_sends(self, count: int = 1, *, retry_after: int = 2) -> None:
        """Answer the next ``count`` sendMessage calls with 429 Too Many Requests."""
        body = {"ok": False, "error_code": 429, "description": f"Too Many Requests: retry after {retry_after}",
                "parameters": {"retry_after": retry_after}}
        self._send_script.extend([(429, body)] * count)

    def fail_sends(self, count: int = 1, *, status: int = 502) -> None:
        """Answer the next ``count`` sendMessage calls with a server error."""
        body = {"ok": False, "error_code": status, "description": "Bad Gateway" if status == 502 else "Internal Server Error"}
        self._send_script.extend([(status, body)] * count)

    # ------------------------------------------------------------------ update builders

    def bot_user(self) -> dict[str, Any]:
        return {"id": self.bot_id, "is_bot": True, "first_name": self.first_name, "username": self.username}

    @staticmethod
    def user(user_id: int, first_name: str = "Ann", last_name: Optional[str] = None) -> dict[str, Any]:
        user: dict[str, Any] = {"id": user_id, "is_bot": False, "first_name": first_name}
        if last_name:
            user["last_name"] = last_name
        return user

    def _update(self, key: str, message: dict[str, Any]) -> dict[str, Any]:
        return {"update_id": next(self._update_ids), key: message}

    def _message(self, chat: dict[str, Any], sender: dict[str, Any], text: Optional[str], **extra: Any) -> dict[str, Any]:
        message: dict[str, Any] = {"message_id": next(self._message_ids), "date": int(time.time()), "chat": chat,
                                   "from": sender, **extra}
        if text is not None:
            message["text"] = text
            if entities := entities_for(text):
                message["entities"] = entities
        return message

    def private_message(self, user_id: int, text: str, *, first_name: str = "Ann") -> dict[str, Any]:
        chat = {"id": user_id, "type": "private", "first_name": first_name}
        return self._update("message", self._message(chat, self.user(user_id, first_name), text))

    def group_message(self, chat_id: int, user_id: int, text: str, *, first_name: str = "Ann",
                      reply_to_bot: bool = False, reply_to_user: Optional[int] = None) -> dict[str, Any]:
        chat = {"id": chat_id, "type": "supergroup", "title": "Ops room"}
        extra: dict[str, Any] = {}
        if reply_to_bot or reply_to_user:
            author = self.bot_user() if reply_to_bot else self.user(reply_to_user or 0, "Bob")
            extra["reply_to_message"] = self._message(chat, author, "an earlier message")
        return self._update("message", self._message(chat, self.user(user_id, first_name), text, **extra))

    def photo_message(self, chat_id: int, user_id: int, caption: Optional[str] = None) -> dict[str, Any]:
        chat = {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup", "first_name": "Ann"}
        extra: dict[str, Any] = {"photo": [{"file_id": "AgAD", "file_unique_id": "u1", "width": 90, "height": 90}]}
        if caption is not None:
            extra["caption"] = caption
        return self._update("message", self._message(chat, self.user(user_id), None, **extra))

    def edited_message(self, user_id: int, text: str) -> dict[str, Any]:
        chat = {"id": user_id, "type": "private", "first_name": "Ann"}
        return self._update("edited_message", self._message(chat, self.user(user_id), text, edit_date=int(time.time())))

    def member_joined(self, chat_id: int, user_id: int) -> dict[str, Any]:
        chat = {"id": chat_id, "type": "supergroup", "title": "Ops room"}
        joined = self.user(user_id, "Newcomer")
        return self._update("message", self._message(chat, joined, None, new_chat_members=[joined]))

    # ------------------------------------------------------------------ HTTP

    @staticmethod
    def _answer(result: Any) -> web.Response:
        return web.json_response({"ok": True, "result": result})

    @staticmethod
    def _error(status: int, description: str, **extra: Any) -> web.Response:
        return web.json_response({"ok": False, "error_code": status, "description": description, **extra}, status=status)

    async def _handle(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return self._error(401, "Unauthorized")
        method = request.match_info["method"].lower()
        if request.content_type == "application/json":
            params = {key: value if isinstance(value, str) else json.dumps(value) for key, value in (await request.json()).items()}
        else:
            params = {key: str(value) for key, value in (await request.post()).items()}
        self.calls.append(method)
        handler = getattr(self, f"_method_{method}", None)
        try:
            if handler is None:
                return self._error(404, "Not Found: method not found")
            return await handler(params)
        finally:
            self._notify()

    async def _method_getme(self, params: dict[str, str]) -> web.Response:
        return self._answer({**self.bot_user(), "can_join_groups": True, "can_read_all_group_messages": False,
                             "supports_inline_queries": False})

    async def _method_getupdates(self, params: dict[str, str]) -> web.Response:
        offset = int(params["offset"]) if params.get("offset") else None
        limit = min(max(int(params.get("limit") or 100), 1), 100)
        timeout = int(params.get("timeout") or 0)
        self.get_updates_calls.append(GetUpdatesCall(offset, limit, timeout))
        if self.on_get_updates is not None:
            self.on_get_updates(offset)
        if self.webhook is not None:
            return self._error(409, WEBHOOK_ACTIVE)
        if self.conflict:
            return self._error(409, self.conflict)
        if self._waiting_poll is not None:  # a second poller: Telegram ends the first one's request
            self._waiting_poll.set()
        if offset is not None:
            self._pending = [update for update in self._pending if update["update_id"] >= offset]
        terminated = asyncio.Event()
        self._waiting_poll = terminated
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            while not self._pending and not self._closing and not terminated.is_set():
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                assert self._changed is not None
                self._changed.clear()
                with_terminate = asyncio.ensure_future(terminated.wait())
                with_change = asyncio.ensure_future(self._changed.wait())
                done, pending = await asyncio.wait({with_terminate, with_change}, timeout=remaining,
                                                   return_when=asyncio.FIRST_COMPLETED)
                for waiter in pending:
                    waiter.cancel()
        finally:
            if self._waiting_poll is terminated:
                self._waiting_poll = None
        if terminated.is_set():
            return self._error(409, TERMINATED)
        return self._answer(self._pending[:limit])

    async def _method_sendmessage(self, params: dict[str, str]) -> web.Response:
        chat_id, text = params.get("chat_id", ""), params.get("text", "")
        loop = asyncio.get_running_loop()
        if self._send_script:
            status, body = self._send_script.pop(0)
            self.send_attempts.append(SendAttempt(chat_id, text, status, loop.time(), params))
            return web.json_response(body, status=status)
        if not text.strip():
            status, response = 400, self._error(400, "Bad Request: message text is empty")
        elif utf16_len(text) > MESSAGE_LIMIT:
            status, response = 400, self._error(400, "Bad Request: message is too long")
        else:
            message_id = next(self._message_ids)
            self.sent.append(SentMessage(chat_id, text, message_id, params))
            numeric = int(chat_id) if chat_id.lstrip("-").isdigit() else 0
            chat = {"id": numeric, "type": "private", "first_name": "Ann"} if numeric > 0 else \
                {"id": numeric, "type": "supergroup", "title": "Ops room"}
            status, response = 200, self._answer({"message_id": message_id, "date": int(time.time()), "chat": chat,
                                                  "from": self.bot_user(), "text": text})
        self.send_attempts.append(SendAttempt(chat_id, text, status, loop.time(), params))
        return response

    async def _method_sendchataction(self, params: dict[str, str]) -> web.Response:
        self.chat_actions.append((params.get("chat_id", ""), params.get("action", "")))
        return self._answer(True)

    async def _method_setwebhook(self, params: dict[str, str]) -> web.Response:
        self.webhook = dict(params)
        return self._answer(True)

    async def _method_deletewebhook(self, params: dict[str, str]) -> web.Response:
        self.webhook = None
        return self._answer(True)
