"""A fake Telegram Bot API: a real aiohttp server on 127.0.0.1 serving ``/bot<token>/<method>``.

Point the real aiogram client at it — ``TelegramAPIServer.from_base(server.base_url)``, which
builds ``{base}/bot{token}/{method}``, or ``platforms.telegram.api_server`` — and script it::

    async with FakeBotAPI(limits=FloodLimits()) as api:
        api.push(api.private_message(42, "hello"), api.group_message(-100, 7, "@foldgate_bot hi"))
        api.rate_limit_sends(1, retry_after=2)   # the next sendMessage gets a 429
        ...
        assert [m.text for m in api.messages(42)] == ["..."]
        assert api.accounting().over_limit() == []

Methods: getMe; getUpdates with Telegram's offset/limit/timeout semantics (updates below the
offset are confirmed and forgotten, at most ``limit`` returned, a long poll waits up to
``timeout`` seconds for new ones; a second poller terminates the waiting one with 409, and
``conflict`` or an active webhook make every call a 409); sendMessage (records chat_id and
text, refuses empty text and text over 4096 UTF-16 units like Telegram, answers a Message whose
message_id increases per chat; scripted 429s and 5xx answers); sendMessageDraft (private chats
only — a group or channel gets 400 ``TEXTDRAFT_PEER_INVALID`` —, non-zero draft_id, text of
0–4096 UTF-16 units; logged in ``drafts``; ``current_draft`` is the latest one still shown, i.e.
younger than 30 s and not followed by a sendMessage to the chat); editMessageText (chat_id +
message_id of a message the bot sent; refuses an unknown or deleted message, a message the bot
did not send, empty or over-long text, and an edit that changes nothing with Telegram's
"message is not modified" 400; answers the edited Message; history in ``edits``);
deleteMessage (→ True, logged in ``deleted``); answerCallbackQuery (logged in ``answered_queries``;
``button_press`` builds the update a press of an inline button sends, ``buttons`` lists the buttons a
chat shows now, from ``reply_markup``); sendPhoto and sendDocument as multipart uploads
(``attach://<part>`` naming the file part, or the file in the field itself, as the real API takes
them; a photo must be an image Telegram can read — else 400 ``IMAGE_PROCESS_FAILED`` — of at
most 10 MB, width and height adding up to at most 10,000 and neither over 20 times the other —
else 400 ``PHOTO_INVALID_DIMENSIONS`` —, a document at most 50 MB; each logged in ``sent_files`` and
servable by getFile afterwards, like Telegram's own file ids); sendChatAction; setWebhook / deleteWebhook /
getWebhookInfo. Update builders produce the JSON Telegram sends, entities included (offsets in
UTF-16 units), and take their message_ids from the same per-chat counter as the bot's messages.

A group upgraded to a supergroup. ``migrate_to_supergroup(old, new)`` (optionally ``after_sends=N``:
once N more sendMessage calls to ``old`` were accepted) makes every method addressed to ``old``
answer what Telegram answers from then on — HTTP 400 ``{"ok": false, "error_code": 400,
"description": "Bad Request: group chat was upgraded to a supergroup chat", "parameters":
{"migrate_to_chat_id": new}}`` —, sendChatAction and sendMessageDraft included; messages already
in ``old`` stay there (a supergroup's message ids start afresh: an edit or a delete of one of them
at ``new`` is refused as not found). A refused sendMessage is in ``send_attempts``, every other
refusal in ``attempts``; ``chat_actions`` keeps the accepted actions only. The two service
messages Telegram sends come from ``group_migrated_to`` (in the old group, ``migrate_to_chat_id``)
and ``supergroup_migrated_from`` (in the new supergroup, ``migrate_from_chat_id``); push them when a
test wants the bot to see the upgrade.

Webhook delivery. While a webhook is set (``setWebhook`` with a ``url``), getUpdates answers 409
and every update pushed — and any still unconfirmed when the webhook was set, unless
``drop_pending_updates`` — is POSTed to that URL as JSON, with the ``secret_token`` in the
``X-Telegram-Bot-Api-Secret-Token`` header. Only a 2xx answer delivers an update; any other
status (a redirect included: it is not followed), a refused or reset connection, or no answer
within :attr:`WebhookRetry.timeout` leaves it pending, to be posted again after a wait that
doubles from :attr:`WebhookRetry.first` up to :attr:`WebhookRetry.longest` (Telegram does not
publish its schedule), for as long as the webhook is set; ``getWebhookInfo`` shows the pending
count and the last error in Telegram's words. Up to ``max_connections`` (Telegram's default 40)
updates are in flight at once, but one chat's updates go in order: the next waits until the
one before it was delivered. Like a local Bot API server (``telegram-bot-api --local``, which is
what ``platforms.telegram.api_server`` points at), it takes ``http://`` URLs on any port.
Every POST is logged in ``webhook_deliveries``.

Flood control (off unless ``limits=FloodLimits(...)`` is given; the accounting runs always).
Counted calls are the *accepted* sendMessage, editMessageText and sendMessageDraft calls (the
latter only while ``FloodLimits.count_drafts``); refusals (400s, 429s, scripted answers),
deleteMessage and sendChatAction are not counted. A call is checked after its own validation, so
a call that would be refused with a 400 gets the 400, never a 429. For a call to chat C at time
``now``, a sliding window of length W holding limit N admits the call iff fewer than N counted
calls fall in ``(now - W, now]``; the windows are:

* per chat (every chat, groups included): W = ``chat_window`` (1 s), N = ``per_chat_per_second
  + chat_burst``; with ``chat_burst`` > 0 a second per-chat window, W = ``chat_window *
  burst_horizon``, N = ``per_chat_per_second * burst_horizon``, keeps the average at the limit —
  Telegram's "short bursts" that end in 429s if kept up;
* per group (chat ids below zero: groups, supergroups, channels): W = ``group_window`` (60 s),
  N = ``per_group_per_minute``. Drafts can never count here: they are refused in groups first;
* per bot (all chats together): W = ``bot_window`` (1 s), N = ``per_bot_per_second``.

A refused call gets HTTP 429 with a ``Retry-After`` header and ``{"ok": false, "error_code":
429, "description": "Too Many Requests: retry after N", "parameters": {"retry_after": N}}``,
where N is the number of seconds, rounded up (at least 1), until every full window it hit has
room again; it is logged in ``rate_limited``. ``accounting()`` reports, per chat, per group and
for the bot, the most counted calls seen in any window of that scope's length.

Files. ``add_file(data)`` (or ``add_file(size=N)`` for a big file served as zeros, never held in
memory) registers bytes under a fresh ``file_id``; ``getFile`` answers its ``file_path`` and
``file_size`` — and, like the public Bot API, ``400 Bad Request: file is too big`` for a file over
20 MB (:data:`DOWNLOAD_LIMIT`), ``400 Bad Request: invalid file_id`` for an unknown one — and
``GET /file/bot<token>/<file_path>`` serves the bytes with a Content-Length, in chunks. A file
marked with ``break_download(file_id)`` sends half its bytes and then drops the connection.
``file_requests`` logs every getFile (file ids), ``downloads`` every download (file paths).
Builders for media updates: ``photo_message`` (several PhotoSize, the largest carrying ``data``),
``document_message``, ``voice_message``, ``audio_message``, ``video_note_message``, and ``album``
(N photos sharing a ``media_group_id``, the caption on the first); each registers its files.

Views for tests: ``messages(chat)`` (the bot's messages still in the chat, with their current
text), ``message(chat, id)``, ``edits(chat, id)``, ``drafts`` / ``drafts_in(chat)`` /
``current_draft(chat)``, ``deleted``, ``attempts`` (every send, draft, edit and delete with its
status, and every call refused because its group was upgraded), ``migrated_to(chat)``,
``counted``, ``rate_limited``, ``accounting()``; ``sent`` and ``send_attempts`` as before.
``clock`` (default ``time.monotonic``) can be a function the test advances by hand.

Answers of another server. ``answer_as(method, body, status=200, times=1)`` answers the next ``times``
calls of ``method`` (every call with ``times=None``) with ``body`` — a dict or list sent as JSON, a
string sent as it is — and ``status``, in place of the fake's own answer: an emulator's ``getMe``
without ``is_bot``, a batch that is not Telegram's, a method it does not have. Such a call is logged
in ``calls`` (and ``scripted``) and changes nothing else.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import functools
import io
import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from PIL import Image

MESSAGE_LIMIT = 4096
#: The largest file the public Bot API lets a bot download; getFile refuses bigger ones.
DOWNLOAD_LIMIT = 20 * 1024 * 1024
#: The most a bot may upload: a photo, and any other file (multipart uploads through the public Bot API).
PHOTO_LIMIT = 10 * 1024 * 1024
UPLOAD_LIMIT = 50 * 1024 * 1024
FILE_TOO_BIG = "Bad Request: file is too big"
INVALID_FILE_ID = "Bad Request: invalid file_id"
#: Bytes per chunk of a file download.
_CHUNK = 64 * 1024
_COMMAND = re.compile(r"^/[A-Za-z0-9_]{1,32}(?:@[A-Za-z0-9_]{3,32})?")
_MENTION = re.compile(r"(?<![\w@])@[A-Za-z0-9_]{5,32}\b")
TERMINATED = "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"
WEBHOOK_ACTIVE = (
    "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first"
)
NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup are exactly "
    "the same as a current content and reply markup of the message"
)
EDIT_NOT_FOUND = "Bad Request: message to edit not found"
DELETE_NOT_FOUND = "Bad Request: message to delete not found"
CANT_EDIT = "Bad Request: message can't be edited"
TOO_LONG = "Bad Request: message is too long"
TEXT_EMPTY = "Bad Request: message text is empty"
DRAFT_PEER_INVALID = "Bad Request: TEXTDRAFT_PEER_INVALID"
#: Telegram's answer to any method addressed to a group that became a supergroup (with ``migrate_to_chat_id``).
UPGRADED = "Bad Request: group chat was upgraded to a supergroup chat"
#: The sender the Bot API names for a message the supergroup itself sent (its ``migrate_from_chat_id``).
GROUP_ANONYMOUS_BOT = {"id": 1087968824, "is_bot": True, "first_name": "Group", "username": "GroupAnonymousBot"}
#: Telegram's exact wording for draft_id 0 is not published; the Bot API server passes the value on
#: unchecked and Telegram refuses it with a 400. This text is the fake's own.
DRAFT_ID_INVALID = "Bad Request: draft_id must be non-zero"
#: How long Telegram shows a draft that is not renewed ("a temporary 30-second preview").
DRAFT_LIFETIME = 30.0
#: The fields of a message edit that Telegram compares to decide "message is not modified".
_CONTENT_FIELDS = ("text", "parse_mode", "entities", "reply_markup")


def _true(value: str | None) -> bool:
    """A Bot API boolean parameter as aiogram sends it (form field or JSON)."""
    return str(value).lower() in ("true", "1")


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def entities_for(text: str) -> list[dict[str, Any]]:
    """The bot_command and mention entities Telegram attaches to ``text``."""
    found = []
    command = _COMMAND.match(text)
    if command:
        found.append({"type": "bot_command", "offset": 0, "length": utf16_len(command.group())})
    for mention in _MENTION.finditer(text):
        found.append(
            {"type": "mention", "offset": utf16_len(text[: mention.start()]), "length": utf16_len(mention.group())}
        )
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
class SentFile:
    """A photo or document the fake accepted: the method, the file's name and bytes, the call's other params."""

    chat_id: str
    method: str
    name: str
    data: bytes
    message_id: int
    params: dict[str, str]


@dataclass
class Attempt:
    """One sendMessage, sendMessageDraft, editMessageText or deleteMessage request and its answer (or any
    call refused because its group became a supergroup)."""

    method: str
    chat_id: str
    status: int
    at: float
    description: str = ""
    params: dict[str, str] = field(default_factory=dict)


@dataclass
class Draft:
    """An accepted sendMessageDraft: what the user saw streaming, and when."""

    chat_id: str
    draft_id: int
    text: str
    at: float
    params: dict[str, str] = field(default_factory=dict)


@dataclass
class MessageEdit:
    """One accepted editMessageText of a bot message."""

    text: str
    at: float
    params: dict[str, str] = field(default_factory=dict)


@dataclass
class ChatMessage:
    """A message the bot sent, as the chat shows it now: current text, edits, deletion."""

    chat_id: str
    message_id: int
    text: str
    sent_at: float
    params: dict[str, str]
    edits: list[MessageEdit] = field(default_factory=list)
    deleted_at: float | None = None
    date: int = 0

    def content(self) -> tuple[str, ...]:
        """What Telegram compares to refuse an edit as "not modified"."""
        current = self.edits[-1].params if self.edits else self.params
        return (self.text, *(current.get(name, "") for name in _CONTENT_FIELDS[1:]))


@dataclass
class DeletedMessage:
    chat_id: str
    message_id: int
    at: float


@dataclass
class RateLimited:
    """A call refused by the fake's flood control; ``scope`` is the window that was full."""

    method: str
    chat_id: str
    at: float
    retry_after: int
    scope: str


@dataclass
class CountedCall:
    """An accepted call that counts toward flood control."""

    method: str
    chat_id: str
    at: float


@dataclass(frozen=True)
class FloodLimits:
    """Telegram's published flood limits; the windows are configurable so tests can shrink them.

    ``None`` for a limit switches that window off. Defaults: 1 message per second per chat, 20 per
    minute per group, 30 per second for the bot, no burst (see the module docstring for the rule).
    """

    per_chat_per_second: int | None = 1
    per_group_per_minute: int | None = 20
    per_bot_per_second: int | None = 30
    chat_window: float = 1.0
    group_window: float = 60.0
    bot_window: float = 1.0
    chat_burst: int = 0
    burst_horizon: int = 10
    count_drafts: bool = True

    def __post_init__(self) -> None:
        limits = (self.per_chat_per_second, self.per_group_per_minute, self.per_bot_per_second)
        if any(limit is not None and limit < 1 for limit in limits) or self.chat_burst < 0 or self.burst_horizon < 1:
            raise ValueError("a limit admits at least one call (use None to switch it off); bursts are not negative")
        if min(self.chat_window, self.group_window, self.bot_window) <= 0:
            raise ValueError("flood windows must be longer than zero")

    @property
    def chat_allowance(self) -> int | None:
        """Calls admitted in one chat window: the limit plus the burst tolerance."""
        return None if self.per_chat_per_second is None else self.per_chat_per_second + self.chat_burst


@dataclass(frozen=True)
class FloodAccounting:
    """The most counted calls seen in any window: per chat, per group chat, for the whole bot."""

    limits: FloodLimits
    per_chat: dict[str, int]
    per_group: dict[str, int]
    bot: int

    def over_limit(self) -> list[str]:
        """Every window that held more calls than ``limits`` allow; empty when all stayed within."""
        found = []
        allowance = self.limits.chat_allowance
        if allowance is not None:
            found += [
                f"chat {chat}: {count} in {self.limits.chat_window}s > {allowance}"
                for chat, count in self.per_chat.items()
                if count > allowance
            ]
        if self.limits.per_group_per_minute is not None:
            found += [
                f"group {chat}: {count} in {self.limits.group_window}s > {self.limits.per_group_per_minute}"
                for chat, count in self.per_group.items()
                if count > self.limits.per_group_per_minute
            ]
        if self.limits.per_bot_per_second is not None and self.bot > self.limits.per_bot_per_second:
            found.append(f"bot: {self.bot} in {self.limits.bot_window}s > {self.limits.per_bot_per_second}")
        return found


def is_group(chat_id: str) -> bool:
    """Telegram gives groups, supergroups and channels negative ids; users positive ones."""
    return chat_id.startswith("-")


def most_in_window(times: list[float], window: float) -> int:
    """The most of the sorted ``times`` that fit in one half-open window ``(t - window, t]``."""
    most, start = 0, 0
    for end, at in enumerate(times):
        while times[start] <= at - window:
            start += 1
        most = max(most, end - start + 1)
    return most


@dataclass(frozen=True)
class WebhookRetry:
    """When the fake posts an update to the webhook again after a failed delivery, and how long one may take."""

    #: Seconds before the first retry of an update; each further failure doubles the wait.
    first: float = 1.0
    #: The longest wait between two tries of one update.
    longest: float = 60.0
    #: Seconds a delivery may take to be answered before it counts as failed ("Read timeout expired").
    timeout: float = 30.0

    def wait(self, failures: int) -> float:
        """Seconds until the next try of an update that failed ``failures`` times in a row."""
        return min(self.longest, self.first * 2 ** (failures - 1))


@dataclass
class WebhookDelivery:
    """One POST of an update to the webhook and how it ended."""

    update_id: int
    chat_id: str
    at: float
    #: The HTTP status of the answer; None when there was none (refused, reset, timed out).
    status: int | None
    error: str = ""

    @property
    def delivered(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


def update_chat(update: dict[str, Any]) -> str:
    """The chat an update belongs to (its message's chat), or "" for one without a chat."""
    for value in update.values():
        if isinstance(value, dict) and isinstance(value.get("chat"), dict):
            return str(value["chat"].get("id", ""))
    return ""


@dataclass
class FakeFile:
    """A file the fake serves: ``data``, or ``size`` zeros made as they are sent (``data`` None)."""

    file_id: str
    file_unique_id: str
    file_path: str
    size: int
    data: bytes | None = None
    broken: bool = False

    def chunks(self, upto: int) -> Any:
        """The first ``upto`` bytes, a chunk at a time."""
        for start in range(0, upto, _CHUNK):
            end = min(start + _CHUNK, upto)
            yield self.data[start:end] if self.data is not None else bytes(end - start)


@dataclass
class GetUpdatesCall:
    offset: int | None
    limit: int
    timeout: int


class FakeBotAPI:
    """A scriptable Bot API for one bot token."""

    def __init__(
        self,
        token: str = "123456789:fake-token-for-tests",
        *,
        username: str = "foldgate_bot",
        first_name: str = "Foldgate",
        limits: FloodLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
        webhook_retry: WebhookRetry = WebhookRetry(),
    ) -> None:
        self.token = token
        #: Flood control to enforce; ``None`` accepts every call (the accounting still runs).
        self.limits = limits
        #: The fake's time source for windows, drafts and logs; tests may pass one they advance (never backwards).
        self.clock = clock
        self.bot_id = int(token.split(":", 1)[0])
        self.username = username
        self.first_name = first_name
        self.conflict: str | None = None
        #: 409 answers that reached a poller still connected (one that went away, killed, never reads its 409).
        self.conflicts_seen = 0
        #: The parameters of the last setWebhook (None: no webhook, updates wait for getUpdates).
        self.webhook: dict[str, str] | None = None
        self.webhook_retry = webhook_retry
        #: Every POST of an update to the webhook, in the order they ended.
        self.webhook_deliveries: list[WebhookDelivery] = []
        self.sent: list[SentMessage] = []
        self.sent_files: list[SentFile] = []
        #: The callback queries answered (answerCallbackQuery), by id.
        self.answered_queries: list[str] = []
        self._uploads: dict[str, web.FileField] = {}
        self.send_attempts: list[SendAttempt] = []
        self.chat_actions: list[tuple[str, str]] = []
        self.get_updates_calls: list[GetUpdatesCall] = []
        self.calls: list[str] = []
        self.attempts: list[Attempt] = []
        self.drafts: list[Draft] = []
        self.deleted: list[DeletedMessage] = []
        self.rate_limited: list[RateLimited] = []
        self.counted: list[CountedCall] = []
        self._chats: dict[str, dict[int, ChatMessage]] = {}
        self._foreign: dict[str, set[int]] = {}
        self._last_message_id: dict[str, int] = {}
        self._chat_times: dict[str, list[float]] = {}
        self._bot_times: list[float] = []
        self._shown_drafts: dict[str, Draft] = {}
        #: Called with the offset of every getUpdates request before it is answered.
        self.on_get_updates: Callable[[int | None], None] | None = None
        #: Called with the method (lower case), its parameters and the status, as each answer is about to go out.
        self.on_answer: Callable[[str, dict[str, str], int], None] | None = None
        self._pending: list[dict[str, Any]] = []
        self._send_script: list[tuple[int, dict[str, Any]]] = []
        #: method (lower case) -> [answers left (None: every call), status, body], from ``answer_as``.
        self._answers_as: dict[str, list[Any]] = {}
        #: The methods (lower case) answered as ``answer_as`` said, in order.
        self.scripted: list[str] = []
        #: chat id -> (sendMessages to accept first, retry_after of the one 429 that follows).
        self._send_after: dict[str, tuple[int, int]] = {}
        #: old group id -> (its supergroup's id, accepted sendMessages to the group after which it moved).
        self._migrations: dict[str, tuple[int, int]] = {}
        self._update_ids = iter(range(500_000_001, 10**10))
        self._changed: asyncio.Event | None = None
        self._waiting_poll: asyncio.Event | None = None
        self._runner: web.AppRunner | None = None
        self._closing = False
        self.port = 0
        self._poster: asyncio.Task[None] | None = None
        self._posting: dict[int, asyncio.Task[None]] = {}
        #: update id -> (failed deliveries in a row, loop time before which it is not posted again).
        self._retry_at: dict[int, tuple[int, float]] = {}
        self._last_webhook_error: tuple[int, str] | None = None
        self._webhook_wake: asyncio.Event | None = None
        self._client: aiohttp.ClientSession | None = None
        #: file_id -> the file getFile and the download serve.
        self.files: dict[str, FakeFile] = {}
        #: The file_id of every getFile call, in order.
        self.file_requests: list[str] = []
        #: The file_path of every download request, in order.
        self.downloads: list[str] = []
        self._file_numbers = iter(range(1, 10**9))
        self._media_groups = iter(range(13_000_000_000_000_000, 10**20))

    # ------------------------------------------------------------------ server

    async def start(self) -> FakeBotAPI:
        self._changed = asyncio.Event()
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def stop(self) -> None:
        self._closing = True
        self._notify()
        tasks = [task for task in (self._poster, *self._posting.values()) if task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._client is not None:
            await self._client.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def __aenter__(self) -> FakeBotAPI:
        return await self.start()

    async def __aexit__(self, *_exc: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
        if self._webhook_wake is not None:
            self._webhook_wake.set()

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
            except TimeoutError:
                pass

    # ------------------------------------------------------------------ scripting

    def push(self, *updates: dict[str, Any]) -> None:
        """Make updates available to getUpdates, or post them to the webhook while one is set."""
        self._pending.extend(updates)
        self._notify()

    @property
    def pending_updates(self) -> int:
        """Updates not yet confirmed by a getUpdates offset or delivered to the webhook."""
        return len(self._pending)

    def rate_limit_sends(self, count: int = 1, *, retry_after: int = 2) -> None:
        """Answer the next ``count`` sendMessage calls with 429 Too Many Requests."""
        body = {
            "ok": False,
            "error_code": 429,
            "description": f"Too Many Requests: retry after {retry_after}",
            "parameters": {"retry_after": retry_after},
        }
        self._send_script.extend([(429, body)] * count)

    def rate_limit_send_after(self, chat_id: int | str, accepted: int, *, retry_after: int = 2) -> None:
        """Answer 429 once, to the first sendMessage to ``chat_id`` after ``accepted`` of them were accepted
        (so a test can refuse a given chunk of a long reply whatever the timing)."""
        self._send_after[str(chat_id)] = (accepted, retry_after)

    def migrate_to_supergroup(self, old_chat_id: int | str, new_chat_id: int, *, after_sends: int = 0) -> None:
        """Upgrade the group ``old_chat_id`` to the supergroup ``new_chat_id``: from now on (or once
        ``after_sends`` more sendMessage calls to it were accepted) every method addressed to the group
        is answered with Telegram's 400 naming the new id."""
        old = str(old_chat_id)
        self._migrations[old] = (new_chat_id, self._accepted_sends(old) + after_sends)

    def migrated_to(self, chat_id: int | str) -> int | None:
        """The supergroup ``chat_id`` became, once its upgrade took effect; None for a chat that did not move."""
        migration = self._migrations.get(str(chat_id))
        if migration is None or self._accepted_sends(str(chat_id)) < migration[1]:
            return None
        return migration[0]

    def _accepted_sends(self, chat_id: str) -> int:
        return sum(1 for sent in self.sent if sent.chat_id == chat_id)

    def answer_as(self, method: str, body: Any, *, status: int = 200, times: int | None = 1) -> None:
        """Answer the next ``times`` calls of ``method`` (every one with None) with ``body`` and ``status``: a dict
        or list as JSON, a string as it is (see the module docstring)."""
        self._answers_as[method.lower()] = [times, status, body]

    def _answer_as(self, method: str) -> web.Response | None:
        scripted = self._answers_as.get(method)
        if scripted is None:
            return None
        left, status, body = scripted
        if left is not None:
            if left <= 1:
                del self._answers_as[method]
            else:
                scripted[0] = left - 1
        self.scripted.append(method)
        if isinstance(body, str):
            return web.Response(text=body, status=status)
        return web.json_response(body, status=status)

    def fail_sends(self, count: int = 1, *, status: int = 502) -> None:
        """Answer the next ``count`` sendMessage calls with a server error."""
        body = {
            "ok": False,
            "error_code": status,
            "description": "Bad Gateway" if status == 502 else "Internal Server Error",
        }
        self._send_script.extend([(status, body)] * count)

    # ------------------------------------------------------------------ update builders

    def bot_user(self) -> dict[str, Any]:
        return {"id": self.bot_id, "is_bot": True, "first_name": self.first_name, "username": self.username}

    @staticmethod
    def user(user_id: int, first_name: str = "Ann", last_name: str | None = None) -> dict[str, Any]:
        user: dict[str, Any] = {"id": user_id, "is_bot": False, "first_name": first_name}
        if last_name:
            user["last_name"] = last_name
        return user

    def _update(self, key: str, message: dict[str, Any]) -> dict[str, Any]:
        return {"update_id": next(self._update_ids), key: message}

    def _next_message_id(self, chat_id: str) -> int:
        """Telegram numbers a chat's messages, the users' and the bot's alike, in one increasing sequence."""
        self._last_message_id[chat_id] = self._last_message_id.get(chat_id, 0) + 1
        return self._last_message_id[chat_id]

    def _message(self, chat: dict[str, Any], sender: dict[str, Any], text: str | None, **extra: Any) -> dict[str, Any]:
        chat_id = str(chat["id"])
        message_id = self._next_message_id(chat_id)
        if sender.get("id") != self.bot_id:
            self._foreign.setdefault(chat_id, set()).add(message_id)
        message: dict[str, Any] = {
            "message_id": message_id,
            "date": int(time.time()),
            "chat": chat,
            "from": sender,
            **extra,
        }
        if text is not None:
            message["text"] = text
            if entities := entities_for(text):
                message["entities"] = entities
        return message

    def button_press(
        self, chat_id: str | int, user_id: int, message_id: int, data: str, *, first_name: str = "Ann"
    ) -> dict[str, Any]:
        """A ``callback_query`` update: ``user_id`` pressed the inline button carrying ``data`` under the bot's
        message ``message_id`` in ``chat_id``."""
        message = self._chats[str(chat_id)][message_id]
        return {
            "update_id": next(self._update_ids),
            "callback_query": {
                "id": f"cq-{next(self._update_ids)}",
                "from": self.user(user_id, first_name),
                "message": self._message_json(message),
                "chat_instance": "ci-1",
                "data": data,
            },
        }

    def buttons(self, chat_id: str | int) -> list[tuple[int, list[str]]]:
        """The bot's messages in the chat that show inline buttons now: (message id, their callback data)."""
        shown = []
        for message_id, message in sorted(self._chats.get(str(chat_id), {}).items()):
            params = message.edits[-1].params if message.edits else message.params
            markup = json.loads(params.get("reply_markup") or "{}")
            data = [button.get("callback_data", "") for row in markup.get("inline_keyboard", []) for button in row]
            if data and message.deleted_at is None:
                shown.append((message_id, data))
        return shown

    def private_message(self, user_id: int, text: str, *, first_name: str = "Ann") -> dict[str, Any]:
        chat = {"id": user_id, "type": "private", "first_name": first_name}
        return self._update("message", self._message(chat, self.user(user_id, first_name), text))

    def group_message(
        self,
        chat_id: int,
        user_id: int,
        text: str,
        *,
        first_name: str = "Ann",
        reply_to_bot: bool = False,
        reply_to_user: int | None = None,
    ) -> dict[str, Any]:
        chat = {"id": chat_id, "type": "supergroup", "title": "Ops room"}
        extra: dict[str, Any] = {}
        if reply_to_bot or reply_to_user:
            author = self.bot_user() if reply_to_bot else self.user(reply_to_user or 0, "Bob")
            extra["reply_to_message"] = self._message(chat, author, "an earlier message")
        return self._update("message", self._message(chat, self.user(user_id, first_name), text, **extra))

    # ------------------------------------------------------------------ files and media updates

    def add_file(self, data: bytes | None = None, *, size: int | None = None, name: str = "file.bin") -> str:
        """Register a file to serve and return its file_id: ``data``, or ``size`` zeros made as they are sent."""
        number = next(self._file_numbers)
        file_id = f"BQACAgIAAxkBAAI{number:08d}"
        self.files[file_id] = FakeFile(
            file_id,
            f"u{number}",
            f"documents/file_{number}_{name}",
            len(data) if data is not None else int(size or 0),
            data,
        )
        return file_id

    def break_download(self, file_id: str) -> None:
        """Make the download of ``file_id`` stop halfway: half its bytes, then the connection drops."""
        self.files[file_id].broken = True

    def _media_message(
        self,
        chat_id: int,
        user_id: int,
        caption: str | None,
        media_group_id: str | None,
        first_name: str,
        **media: Any,
    ) -> dict[str, Any]:
        chat = (
            {"id": chat_id, "type": "private", "first_name": first_name}
            if chat_id > 0
            else {"id": chat_id, "type": "supergroup", "title": "Ops room"}
        )
        extra: dict[str, Any] = dict(media)
        if caption is not None:
            extra["caption"] = caption
            if entities := entities_for(caption):
                extra["caption_entities"] = entities
        if media_group_id is not None:
            extra["media_group_id"] = media_group_id
        return self._update("message", self._message(chat, self.user(user_id, first_name), None, **extra))

    def _file(self, data: bytes | None, size: int | None, name: str) -> dict[str, Any]:
        """The file fields of a media object for newly registered bytes (``size`` reported for ``data`` None)."""
        file_id = self.add_file(data, size=size, name=name)
        served = self.files[file_id]
        return {"file_id": file_id, "file_unique_id": served.file_unique_id, "file_size": served.size}

    def photo_message(
        self,
        chat_id: int,
        user_id: int,
        caption: str | None = None,
        *,
        sizes: tuple[tuple[int, int], ...] = ((90, 90), (320, 240), (1280, 960)),
        data: bytes | None = None,
        largest_size: int | None = None,
        media_group_id: str | None = None,
        first_name: str = "Ann",
    ) -> dict[str, Any]:
        """A photo as Telegram sends it: one PhotoSize per size, smallest first; the largest serves ``data``
        (or reports ``largest_size`` bytes), the others a few bytes each."""
        photo = []
        for index, (width, height) in enumerate(sizes):
            last = index == len(sizes) - 1
            chosen = data if last else None
            filler = None if last else bytes([index]) * max(1, width * height // 64)
            photo.append(
                {
                    **self._file(
                        chosen if chosen is not None else filler,
                        largest_size if last and data is None else None,
                        "photo.jpg",
                    ),
                    "width": width,
                    "height": height,
                }
            )
        return self._media_message(chat_id, user_id, caption, media_group_id, first_name, photo=photo)

    def document_message(
        self,
        chat_id: int,
        user_id: int,
        data: bytes | None = None,
        *,
        file_name: str = "file.txt",
        mime_type: str = "text/plain",
        size: int | None = None,
        caption: str | None = None,
        media_group_id: str | None = None,
        first_name: str = "Ann",
    ) -> dict[str, Any]:
        """A file sent as a document; ``size`` instead of ``data`` for a big one served as zeros."""
        document = {**self._file(data, size, file_name), "file_name": file_name, "mime_type": mime_type}
        return self._media_message(chat_id, user_id, caption, media_group_id, first_name, document=document)

    def voice_message(
        self,
        chat_id: int,
        user_id: int,
        data: bytes,
        *,
        duration: int = 3,
        caption: str | None = None,
        first_name: str = "Ann",
    ) -> dict[str, Any]:
        voice = {**self._file(data, None, "voice.oga"), "duration": duration, "mime_type": "audio/ogg"}
        return self._media_message(chat_id, user_id, caption, None, first_name, voice=voice)

    def audio_message(
        self,
        chat_id: int,
        user_id: int,
        data: bytes,
        *,
        file_name: str = "song.mp3",
        duration: int = 180,
        performer: str | None = None,
        title: str | None = None,
        caption: str | None = None,
        first_name: str = "Ann",
    ) -> dict[str, Any]:
        audio: dict[str, Any] = {
            **self._file(data, None, file_name),
            "duration": duration,
            "file_name": file_name,
            "mime_type": "audio/mpeg",
        }
        audio.update({key: value for key, value in (("performer", performer), ("title", title)) if value})
        return self._media_message(chat_id, user_id, caption, None, first_name, audio=audio)

    def video_note_message(
        self, chat_id: int, user_id: int, data: bytes, *, duration: int = 5, length: int = 240, first_name: str = "Ann"
    ) -> dict[str, Any]:
        note = {**self._file(data, None, "video_note.mp4"), "duration": duration, "length": length}
        return self._media_message(chat_id, user_id, None, None, first_name, video_note=note)

    def album(
        self, chat_id: int, user_id: int, parts: list[bytes], *, caption: str | None = None, first_name: str = "Ann"
    ) -> list[dict[str, Any]]:
        """An album of ``len(parts)`` photos: one update per photo sharing a media_group_id, the caption on the
        first."""
        group = str(next(self._media_groups))
        return [
            self.photo_message(
                chat_id,
                user_id,
                caption if index == 0 else None,
                data=data,
                media_group_id=group,
                first_name=first_name,
            )
            for index, data in enumerate(parts)
        ]

    def group_migrated_to(self, old_chat_id: int, new_chat_id: int, user_id: int = 1) -> dict[str, Any]:
        """The service message in the old group when ``user_id`` upgraded it: ``migrate_to_chat_id``, no text."""
        chat = {"id": old_chat_id, "type": "group", "title": "Ops room", "all_members_are_administrators": False}
        return self._update("message", self._message(chat, self.user(user_id), None, migrate_to_chat_id=new_chat_id))

    def supergroup_migrated_from(self, new_chat_id: int, old_chat_id: int) -> dict[str, Any]:
        """The service message that opens the new supergroup: ``migrate_from_chat_id``, sent by the chat itself."""
        chat = {"id": new_chat_id, "type": "supergroup", "title": "Ops room"}
        return self._update(
            "message",
            self._message(chat, GROUP_ANONYMOUS_BOT, None, sender_chat=chat, migrate_from_chat_id=old_chat_id),
        )

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
        return web.json_response(
            {"ok": False, "error_code": status, "description": description, **extra}, status=status
        )

    @classmethod
    def _too_many_requests(cls, retry_after: int) -> web.Response:
        """Telegram's 429: the wait in the body's parameters and in a Retry-After header."""
        response = cls._error(
            429, f"Too Many Requests: retry after {retry_after}", parameters={"retry_after": retry_after}
        )
        response.headers["Retry-After"] = str(retry_after)
        return response

    async def _handle(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return self._error(401, "Unauthorized")
        method = request.match_info["method"].lower()
        uploads: dict[str, web.FileField] = {}
        if request.content_type == "application/json":
            params = {
                key: value if isinstance(value, str) else json.dumps(value)
                for key, value in (await request.json()).items()
            }
        else:
            params = {}
            for key, value in (await request.post()).items():
                if isinstance(value, web.FileField):
                    uploads[key] = value
                else:
                    params[key] = str(value)
        self._uploads = uploads  # read by the handler below, before anything else awaits
        self.calls.append(method)
        handler = getattr(self, f"_method_{method}", None)
        if handler is not None and self.migrated_to(params.get("chat_id", "")) is not None:
            handler = functools.partial(self._upgraded, request.match_info["method"])
        try:
            scripted = self._answer_as(method)
            if scripted is not None:
                return scripted
            if handler is None:
                return self._error(404, "Not Found: method not found")
            response = await handler(params)
            if response.status == 409 and request.transport is not None and not request.transport.is_closing():
                self.conflicts_seen += 1
            if self.on_answer is not None:
                self.on_answer(method, params, response.status)
            return response
        finally:
            self._notify()

    async def _method_getfile(self, params: dict[str, str]) -> web.Response:
        file_id = params.get("file_id", "")
        self.file_requests.append(file_id)
        served = self.files.get(file_id)
        if served is None:
            return self._error(400, INVALID_FILE_ID)
        if served.size > DOWNLOAD_LIMIT:
            return self._error(400, FILE_TOO_BIG)
        return self._answer(
            {
                "file_id": served.file_id,
                "file_unique_id": served.file_unique_id,
                "file_size": served.size,
                "file_path": served.file_path,
            }
        )

    async def _download(self, request: web.Request) -> web.StreamResponse:
        """``GET /file/bot<token>/<file_path>``: the file's bytes in chunks (half of them for a broken one)."""
        if request.match_info["token"] != self.token:
            return web.Response(status=401, text="Unauthorized")
        path = request.match_info["path"]
        self.downloads.append(path)
        self._notify()
        served = next((served for served in self.files.values() if served.file_path == path), None)
        if served is None:
            return web.Response(status=404, text="Not Found")
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        response.content_length = served.size
        await response.prepare(request)
        for chunk in served.chunks(served.size // 2 if served.broken else served.size):
            await response.write(chunk)
        if served.broken:  # the connection drops before Content-Length bytes were sent
            assert request.transport is not None
            request.transport.close()
            return response
        await response.write_eof()
        return response

    async def _upgraded(self, method: str, params: dict[str, str]) -> web.Response:
        """Telegram's answer to a call addressed to a group that became a supergroup: 400 with the new id."""
        chat_id, now = params.get("chat_id", ""), self._now()
        if method.lower() == "sendmessage":
            self.send_attempts.append(SendAttempt(chat_id, params.get("text", ""), 400, now, params))
        self._attempt(method, chat_id, 400, now, UPGRADED, params)
        return self._error(400, UPGRADED, parameters={"migrate_to_chat_id": self.migrated_to(chat_id)})

    async def _method_getme(self, params: dict[str, str]) -> web.Response:
        return self._answer(
            {
                **self.bot_user(),
                "can_join_groups": True,
                "can_read_all_group_messages": False,
                "supports_inline_queries": False,
            }
        )

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
                done, pending = await asyncio.wait(
                    {with_terminate, with_change}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
                )
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
        now = self._now()
        after = self._send_after.get(chat_id)
        if after is not None and sum(1 for sent in self.sent if sent.chat_id == chat_id) >= after[0]:
            del self._send_after[chat_id]
            self.send_attempts.append(SendAttempt(chat_id, text, 429, now, params))
            self._attempt("sendMessage", chat_id, 429, now, f"Too Many Requests: retry after {after[1]}", params)
            self.rate_limited.append(RateLimited("sendMessage", chat_id, now, after[1], "scripted"))
            return self._too_many_requests(after[1])
        if self._send_script:
            status, body = self._send_script.pop(0)
            self.send_attempts.append(SendAttempt(chat_id, text, status, now, params))
            self._attempt("sendMessage", chat_id, status, now, str(body.get("description", "")), params)
            response = web.json_response(body, status=status)
            if status == 429:
                response.headers["Retry-After"] = str(body["parameters"]["retry_after"])
            return response
        if not text.strip():
            status, description = 400, TEXT_EMPTY
        elif utf16_len(text) > MESSAGE_LIMIT:
            status, description = 400, TOO_LONG
        else:
            status, description = 200, ""
        response = self._error(status, description) if status != 200 else self._flood("sendMessage", chat_id, now)
        if response is not None:
            self.send_attempts.append(SendAttempt(chat_id, text, response.status, now, params))
            self._attempt("sendMessage", chat_id, response.status, now, self._description(response), params)
            return response
        message_id = self._next_message_id(chat_id)
        message = ChatMessage(chat_id, message_id, text, now, params, date=int(time.time()))
        self._chats.setdefault(chat_id, {})[message_id] = message
        self.sent.append(SentMessage(chat_id, text, message_id, params))
        self._shown_drafts.pop(chat_id, None)  # sending a message ends the chat's draft
        self._count("sendMessage", chat_id, now)
        self.send_attempts.append(SendAttempt(chat_id, text, 200, now, params))
        self._attempt("sendMessage", chat_id, 200, now, "", params)
        return self._answer(self._message_json(message))

    async def _method_sendphoto(self, params: dict[str, str]) -> web.Response:
        return self._send_file("sendPhoto", "photo", params)

    async def _method_senddocument(self, params: dict[str, str]) -> web.Response:
        return self._send_file("sendDocument", "document", params)

    def _send_file(self, method: str, field_name: str, params: dict[str, str]) -> web.Response:
        """A file sent as Telegram takes one: ``attach://<part>`` naming a multipart file part."""
        chat_id, now = params.get("chat_id", ""), self._now()
        uploads, self._uploads = self._uploads, {}
        reference = params.get(field_name, "")
        # the file as a part of its own, named by attach://<part>, or as the field itself
        part = (
            uploads.get(reference.removeprefix("attach://"))
            if reference.startswith("attach://")
            else uploads.get(field_name)
        )
        if part is None:
            status, description = 400, f"Bad Request: there is no {field_name} in the request"
        else:
            data = part.file.read()
            status, description = self._file_problem(field_name, data)
        if status != 200:
            self._attempt(method, chat_id, status, now, description, params)
            return self._error(status, description)
        assert part is not None
        message_id = self._next_message_id(chat_id)
        file_id = self.add_file(data, name=part.filename or field_name)
        self.sent_files.append(SentFile(chat_id, method, part.filename or "", data, message_id, params))
        self._attempt(method, chat_id, 200, now, "", params)
        served = self.files[file_id]
        about = {"file_id": file_id, "file_unique_id": served.file_unique_id, "file_size": len(data)}
        if field_name == "photo":
            width, height = Image.open(io.BytesIO(data)).size
            media: Any = [{**about, "width": width, "height": height}]
        else:
            media = {**about, "file_name": part.filename, "mime_type": part.content_type}
        return self._answer(
            {
                "message_id": message_id,
                "date": int(time.time()),
                "from": self.bot_user(),
                "chat": self._chat_json(chat_id),
                field_name: media,
            }
        )

    @staticmethod
    def _file_problem(field_name: str, data: bytes) -> tuple[int, str]:
        """Telegram's refusal of an upload (status 200 when it takes it): a photo it cannot read or too big."""
        if field_name == "photo":
            if len(data) > PHOTO_LIMIT:
                return 400, "Bad Request: PHOTO_SAVE_FILE_INVALID"
            try:
                with Image.open(io.BytesIO(data)) as image:
                    image.verify()
                    width, height = image.size
            except Exception:
                return 400, "Bad Request: IMAGE_PROCESS_FAILED"
            if width + height > 10_000 or max(width, height) > 20 * min(width, height):
                return 400, "Bad Request: PHOTO_INVALID_DIMENSIONS"
        elif len(data) > UPLOAD_LIMIT:
            return 413, "Request Entity Too Large"
        return 200, ""

    async def _method_answercallbackquery(self, params: dict[str, str]) -> web.Response:
        query_id = params.get("callback_query_id", "")
        if not query_id:
            return self._error(400, "Bad Request: query is too old and response timeout expired or query ID is invalid")
        self.answered_queries.append(query_id)
        return self._answer(True)

    async def _method_sendmessagedraft(self, params: dict[str, str]) -> web.Response:
        chat_id, text = params.get("chat_id", ""), params.get("text", "")
        now = self._now()
        try:
            draft_id = int(params.get("draft_id") or 0)
        except ValueError:
            draft_id = 0
        if not chat_id.lstrip("-").isdigit():
            response: web.Response | None = self._error(400, "Bad Request: chat not found")
        elif is_group(chat_id):
            response = self._error(400, DRAFT_PEER_INVALID)
        elif draft_id == 0:
            response = self._error(400, DRAFT_ID_INVALID)
        elif utf16_len(text) > MESSAGE_LIMIT:
            response = self._error(400, TOO_LONG)
        else:
            response = self._flood("sendMessageDraft", chat_id, now) if self._drafts_count() else None
        if response is not None:
            self._attempt("sendMessageDraft", chat_id, response.status, now, self._description(response), params)
            return response
        draft = Draft(chat_id, draft_id, text, now, params)
        self.drafts.append(draft)
        self._shown_drafts[chat_id] = draft
        if self._drafts_count():
            self._count("sendMessageDraft", chat_id, now)
        self._attempt("sendMessageDraft", chat_id, 200, now, "", params)
        return self._answer(True)

    async def _method_editmessagetext(self, params: dict[str, str]) -> web.Response:
        chat_id, text = params.get("chat_id", ""), params.get("text", "")
        now = self._now()
        message = self._find(chat_id, params.get("message_id", ""))
        if not text.strip():
            description = TEXT_EMPTY
        elif message is None:
            description = CANT_EDIT if self._is_foreign(chat_id, params.get("message_id", "")) else EDIT_NOT_FOUND
        elif utf16_len(text) > MESSAGE_LIMIT:
            description = TOO_LONG
        elif message.content() == (text, *(params.get(name, "") for name in _CONTENT_FIELDS[1:])):
            description = NOT_MODIFIED
        else:
            description = ""
        response = self._error(400, description) if description else self._flood("editMessageText", chat_id, now)
        if response is not None:
            self._attempt("editMessageText", chat_id, response.status, now, self._description(response), params)
            return response
        assert message is not None
        message.text = text
        message.edits.append(MessageEdit(text, now, params))
        self._count("editMessageText", chat_id, now)
        self._attempt("editMessageText", chat_id, 200, now, "", params)
        return self._answer({**self._message_json(message), "edit_date": int(time.time())})

    async def _method_deletemessage(self, params: dict[str, str]) -> web.Response:
        chat_id, raw_id = params.get("chat_id", ""), params.get("message_id", "")
        now = self._now()
        message = self._find(chat_id, raw_id)
        if message is None and not self._is_foreign(chat_id, raw_id):
            self._attempt("deleteMessage", chat_id, 400, now, DELETE_NOT_FOUND, params)
            return self._error(400, DELETE_NOT_FOUND)
        if message is not None:
            message.deleted_at = now
        else:
            self._foreign[chat_id].discard(int(raw_id))
        self.deleted.append(DeletedMessage(chat_id, int(raw_id), now))
        self._attempt("deleteMessage", chat_id, 200, now, "", params)
        return self._answer(True)

    async def _method_sendchataction(self, params: dict[str, str]) -> web.Response:
        self.chat_actions.append((params.get("chat_id", ""), params.get("action", "")))
        return self._answer(True)

    async def _method_setwebhook(self, params: dict[str, str]) -> web.Response:
        url = params.get("url", "")
        if url and not url.startswith(("http://", "https://")):  # the wording is the fake's own
            return self._error(400, "Bad Request: bad webhook: the URL must be http:// or https://")
        if _true(params.get("drop_pending_updates")):
            self._pending.clear()
        self.webhook = dict(params) if url else None  # an empty url removes the webhook, as deleteWebhook
        self._retry_at.clear()
        self._last_webhook_error = None
        if self.webhook is not None:
            self._start_posting()
        return self._answer(True)

    async def _method_deletewebhook(self, params: dict[str, str]) -> web.Response:
        self.webhook = None
        if _true(params.get("drop_pending_updates")):
            self._pending.clear()
        return self._answer(True)

    async def _method_getwebhookinfo(self, params: dict[str, str]) -> web.Response:
        info: dict[str, Any] = {"url": "", "has_custom_certificate": False, "pending_update_count": len(self._pending)}
        if self.webhook is not None:
            info.update(url=self.webhook["url"], max_connections=self._max_connections())
            if self.webhook.get("allowed_updates"):
                info["allowed_updates"] = json.loads(self.webhook["allowed_updates"])
            if self._last_webhook_error is not None:
                info.update(last_error_date=self._last_webhook_error[0], last_error_message=self._last_webhook_error[1])
        return self._answer(info)

    # ------------------------------------------------------------------ webhook delivery

    def _max_connections(self) -> int:
        assert self.webhook is not None
        return min(max(int(self.webhook.get("max_connections") or 40), 1), 100)

    def _start_posting(self) -> None:
        if self._poster is None or self._poster.done():
            self._webhook_wake = asyncio.Event()
            self._poster = asyncio.create_task(self._post_updates(), name="fake-bot-api-webhook")

    async def _post_updates(self) -> None:
        """Post pending updates to the webhook while one is set (the rules are in the module docstring)."""
        assert self._webhook_wake is not None
        loop = asyncio.get_running_loop()
        while self.webhook is not None and not self._closing:
            self._webhook_wake.clear()
            now = loop.time()
            for update in self._due_updates(now):
                update_id = int(update["update_id"])
                self._posting[update_id] = asyncio.create_task(self._post(update, self.webhook))
            waits = [at - now for _, at in self._retry_at.values() if at > now]
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._webhook_wake.wait(), timeout=min(waits, default=None))

    def _due_updates(self, now: float) -> list[dict[str, Any]]:
        """The pending updates to post now: each chat's oldest, unless in flight or waiting for its retry."""
        room = self._max_connections() - len(self._posting)
        due: list[dict[str, Any]] = []
        seen: set[str] = set()
        for update in self._pending:
            if len(due) >= room:
                break
            chat, update_id = update_chat(update), int(update["update_id"])
            earlier = chat in seen
            seen.add(chat)
            if earlier or update_id in self._posting or self._retry_at.get(update_id, (0, 0.0))[1] > now:
                continue
            due.append(update)
        return due

    async def _post(self, update: dict[str, Any], webhook: dict[str, str]) -> None:
        """One delivery of ``update``: confirmed by a 2xx, otherwise scheduled to be posted again."""
        update_id, chat = int(update["update_id"]), update_chat(update)
        headers = {"X-Telegram-Bot-Api-Secret-Token": webhook["secret_token"]} if webhook.get("secret_token") else {}
        status: int | None = None
        try:
            if self._client is None:
                self._client = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=100))
            timeout = aiohttp.ClientTimeout(total=self.webhook_retry.timeout)
            async with self._client.post(
                webhook["url"], json=update, headers=headers, timeout=timeout, allow_redirects=False
            ) as response:
                status = response.status
                await response.read()
                error = "" if 200 <= status < 300 else f"Wrong response from the webhook: {status} {response.reason}"
        except TimeoutError:
            error = "Read timeout expired"
        except (aiohttp.ClientConnectorError, ConnectionRefusedError):
            error = "Connection refused"
        except (aiohttp.ClientError, OSError) as failure:
            error = f"Connection reset by peer ({type(failure).__name__})"
        finally:
            self._posting.pop(update_id, None)
            self._notify()
        self.webhook_deliveries.append(WebhookDelivery(update_id, chat, self._now(), status, error))
        if not error:
            self._pending = [pending for pending in self._pending if pending["update_id"] != update_id]
            self._retry_at.pop(update_id, None)
            return
        failures = self._retry_at.get(update_id, (0, 0.0))[0] + 1
        self._retry_at[update_id] = (failures, asyncio.get_running_loop().time() + self.webhook_retry.wait(failures))
        self._last_webhook_error = (int(time.time()), error)

    # ------------------------------------------------------------------ messages, drafts, flood control

    def _now(self) -> float:
        return self.clock()

    def _attempt(
        self, method: str, chat_id: str, status: int, at: float, description: str, params: dict[str, str]
    ) -> None:
        self.attempts.append(Attempt(method, chat_id, status, at, description, params))

    @staticmethod
    def _description(response: web.Response) -> str:
        assert isinstance(response.body, bytes)
        return str(json.loads(response.body).get("description", ""))

    def _message_json(self, message: ChatMessage) -> dict[str, Any]:
        return {
            "message_id": message.message_id,
            "date": message.date,
            "chat": self._chat_json(message.chat_id),
            "from": self.bot_user(),
            "text": message.text,
        }

    @staticmethod
    def _chat_json(chat_id: str) -> dict[str, Any]:
        numeric = int(chat_id) if chat_id.lstrip("-").isdigit() else 0
        return (
            {"id": numeric, "type": "supergroup", "title": "Ops room"}
            if is_group(chat_id)
            else {"id": numeric, "type": "private", "first_name": "Ann"}
        )

    def _find(self, chat_id: str, raw_id: str) -> ChatMessage | None:
        """The bot's message ``raw_id`` in ``chat_id`` unless deleted: the only ones it may edit."""
        message = self._chats.get(chat_id, {}).get(int(raw_id)) if raw_id.lstrip("-").isdigit() else None
        return message if message is not None and message.deleted_at is None else None

    def _is_foreign(self, chat_id: str, raw_id: str) -> bool:
        return raw_id.isdigit() and int(raw_id) in self._foreign.get(chat_id, set())

    def _drafts_count(self) -> bool:
        """Drafts count toward flood control unless the enforced limits exempt them."""
        return self.limits is None or self.limits.count_drafts

    def _count(self, method: str, chat_id: str, at: float) -> None:
        self.counted.append(CountedCall(method, chat_id, at))
        self._chat_times.setdefault(chat_id, []).append(at)
        self._bot_times.append(at)

    def _windows(self, limits: FloodLimits, chat_id: str) -> list[tuple[str, list[float], float, int]]:
        """(scope, counted times, window length, calls admitted) for every window a call to ``chat_id`` hits."""
        times = self._chat_times.get(chat_id, [])
        windows = []
        if limits.per_chat_per_second is not None:
            windows.append(("chat", times, limits.chat_window, limits.per_chat_per_second + limits.chat_burst))
            if limits.chat_burst:
                windows.append(
                    (
                        "chat",
                        times,
                        limits.chat_window * limits.burst_horizon,
                        limits.per_chat_per_second * limits.burst_horizon,
                    )
                )
        if is_group(chat_id) and limits.per_group_per_minute is not None:
            windows.append(("group", times, limits.group_window, limits.per_group_per_minute))
        if limits.per_bot_per_second is not None:
            windows.append(("bot", self._bot_times, limits.bot_window, limits.per_bot_per_second))
        return windows

    def _flood(self, method: str, chat_id: str, now: float) -> web.Response | None:
        """The 429 for a call over a limit, or None when every window has room for it."""
        if self.limits is None:
            return None
        wait, scope = 0.0, ""
        for name, times, window, allowance in self._windows(self.limits, chat_id):
            first = bisect.bisect_right(times, now - window)
            inside = len(times) - first
            if inside >= allowance:  # the window has room once this many of its calls have expired
                frees_at = times[first + inside - allowance] + window
                if frees_at - now > wait:
                    wait, scope = frees_at - now, name
        if not scope:
            return None
        retry_after = max(1, math.ceil(round(wait, 6)))
        self.rate_limited.append(RateLimited(method, chat_id, now, retry_after, scope))
        return self._too_many_requests(retry_after)

    def accounting(self, limits: FloodLimits | None = None) -> FloodAccounting:
        """The most counted calls in any window, measured with ``limits`` (default: enforced, else Telegram's)."""
        limits = limits or self.limits or FloodLimits()
        per_chat = {chat: most_in_window(times, limits.chat_window) for chat, times in self._chat_times.items()}
        per_group = {
            chat: most_in_window(times, limits.group_window)
            for chat, times in self._chat_times.items()
            if is_group(chat)
        }
        return FloodAccounting(limits, per_chat, per_group, most_in_window(self._bot_times, limits.bot_window))

    # ------------------------------------------------------------------ views for tests

    def messages(self, chat_id: int | str) -> list[ChatMessage]:
        """The bot's messages still in the chat, oldest first, with their current text."""
        return [
            message for _, message in sorted(self._chats.get(str(chat_id), {}).items()) if message.deleted_at is None
        ]

    def edits(self, chat_id: int | str, message_id: int) -> list[MessageEdit]:
        """The accepted edits of one bot message, in order (KeyError for a message the bot never sent)."""
        return self._chats[str(chat_id)][message_id].edits

    def message(self, chat_id: int | str, message_id: int) -> ChatMessage:
        """One bot message, deleted or not."""
        return self._chats[str(chat_id)][message_id]

    def drafts_in(self, chat_id: int | str) -> list[Draft]:
        """Every accepted draft in a chat, in order."""
        return [draft for draft in self.drafts if draft.chat_id == str(chat_id)]

    def current_draft(self, chat_id: int | str) -> Draft | None:
        """The draft the user sees now: the latest, unless older than 30 s or followed by a sent message."""
        shown = self._shown_drafts.get(str(chat_id))
        return None if shown is None or self._now() - shown.at >= DRAFT_LIFETIME else shown
