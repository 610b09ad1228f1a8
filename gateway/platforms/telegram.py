"""Telegram through aiogram 3: updates in by long polling or a webhook, plain-text replies out.

Receiving
---------
*Polling* (one process per bot token): ``getUpdates`` with an offset. Each update is handed to
the gateway's intake — which makes it durable in Redis — BEFORE the next offset is requested,
and the offset is what acknowledges updates to Telegram, so nothing is acknowledged before it
is safe. When the intake fails, the same offset is asked for again; the intake deduplicates by
update id, so what was already stored is not stored twice. A ``409 Conflict`` means another
process polls the same token (or a webhook is set): the adapter logs what that means and how
to fix it, records the failure in :attr:`TelegramAdapter.failure` and stops polling rather
than fight the other process for updates.

*Webhook* (any number of replicas behind a load balancer): an aiohttp server on
``listen_host:listen_port`` serves ``webhook_path``. A delivery without the right
``X-Telegram-Bot-Api-Secret-Token`` is refused (403). An update is written to the intake
BEFORE the answer: 200 once it is durable (also for a redelivery the intake recognises as a
duplicate), 500 when it could not be stored, so Telegram delivers it again.

What is recorded
----------------
- Private chats: every text message, answered.
- Groups: a message addressed to the bot is answered — a ``/command`` (not one meant for
  another bot, ``/command@other_bot``), an ``@mention`` of the bot, or a reply to one of the
  bot's messages. Every other text message of the room is recorded without an answer
  (``respond=False``) as ``"<first name>: <text>"``, so the session knows what was said when
  someone next asks. Addressed messages are recorded the same way, minus a leading
  ``@mention`` of the bot; commands are kept verbatim so they run.
- Media with a caption is recorded as ``"[photo] <caption>"`` (the media itself is not);
  edits, media without a caption, service messages (joins, pins, ...) and channel posts are
  ignored. The two service messages of a group's upgrade to a supergroup (``migrate_to_chat_id``
  in the old group, ``migrate_from_chat_id`` in the new one) are not recorded either, but they
  teach the adapter where the group's replies go now (see Sending).
- With ``allowed_user_ids`` / ``allowed_chat_ids`` set, messages from anyone else are ignored
  (not recorded) and logged at info.

Sending
-------
Replies are split to 4096 UTF-16 code units (what Telegram counts) and sent in order as plain
text — no parse mode, so nothing a user or the model writes can break the formatting. A 429
is answered by waiting exactly its ``retry_after`` and sending the same chunk again, as often
as Telegram asks: the reply always arrives. Network and 5xx errors are retried a few times
with backoff. :meth:`TelegramAdapter.typing` keeps the indicator alive (Telegram shows it for
5 s) until the reply is sent, or ``typing_timeout`` passes if a turn ends without one.

A group upgraded to a supergroup gets a new chat id, and Telegram answers every call to the old
one with a 400 naming it (``migrate_to_chat_id``). Every call addressed to a chat goes through
:meth:`TelegramAdapter.in_chat`: it remembers the new id and makes the same call there, so the
refused chunk is sent once, at the new id, and every later call from this process (whole
replies, streamed ones, typing) goes straight there. A streamed message posted in the old group
before the upgrade can no longer be edited: its text continues in a new message in the
supergroup. The move is remembered per process, not in Redis: each process pays one 400 at most,
unless the upgrade's service message reached it first. Messages written in the supergroup arrive
under its new id: a chat, and a session, of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import logging
import math
from collections.abc import Awaitable, Callable, Iterable
from typing import Literal, Optional, TypeVar

from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import (
    TelegramAPIError,
    TelegramConflictError,
    TelegramEntityTooLarge,
    TelegramMigrateToChat,
    TelegramNetworkError,
    TelegramRetryAfter,
    TelegramServerError,
    TelegramUnauthorizedError,
)
from aiogram.types import Message, Update, User
from aiogram.utils.token import TokenValidationError
from aiohttp import web

from gateway.config import Settings
from gateway.delivery.edited import EditedReply
from gateway.outage import is_redis_outage
from gateway.platforms.base import UNSTORABLE, IncomingMessage, Intake, Journal, PlatformAdapter, SendGate, Surface
from gateway.platforms.split import split_message
from gateway.platforms.telegram_replies import TELEGRAM_MESSAGE_LIMIT, DraftReply, TelegramMessenger, chat_ref
from gateway.platforms.telegram_updates import incoming_message, migration
from gateway.startup_errors import StartupError

log = logging.getLogger(__name__)

#: Header in which Telegram sends back the secret given to ``setWebhook``.
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
#: Only new messages are asked for: edits, reactions, member changes are not conversation.
ALLOWED_UPDATES = ["message"]
#: Where aiogram sends requests unless ``platforms.telegram.api_server`` says otherwise.
DEFAULT_API_SERVER = "https://api.telegram.org"
#: Attempts of getMe at start: a Bot API briefly out of reach (the network still coming up) gets two more.
START_ATTEMPTS = 3
#: Seconds getMe at start (and in ``foldgate doctor``) may take, every attempt included: a wrong or
#: firewalled address fails in seconds, not after minutes of backoff.
START_SECONDS = 8.0
#: Upgrades one call follows before it gives up: a group moves once; a loop of moves is a broken server.
MAX_MOVES = 2

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]


class TelegramAdapterError(StartupError):
    """The adapter cannot go on (rejected token, another poller); the message says how to fix it.

    ``setting`` is the configuration key to look at, so start-up can print one line that names it.
    """

    def __init__(self, message: str, *, setting: str = "platforms.telegram") -> None:
        super().__init__(message, setting=setting)


class PollingConflict(TelegramAdapterError):
    """Telegram answered getUpdates with 409 Conflict: this process stopped polling."""


def token_problem(token: str) -> Optional[str]:
    """Why ``token`` cannot be a bot token (BotFather's are ``<digits>:<secret>``), or None when it may be one."""
    if any(char.isspace() for char in token):
        return "it contains a space or a line break"
    bot_id, colon, secret = token.partition(":")
    if not colon or not bot_id.isdigit() or not secret:
        return "a bot token is the bot's number, a colon, then the secret, e.g. 123456789:AAH…"
    return None


def conflict_explanation(description: str) -> str:
    """What a 409 from getUpdates means for the operator, and what to do about it."""
    if "webhook" in description.lower():
        return (
            f"Telegram refused getUpdates with 409 Conflict ({description}): a webhook is set for this bot "
            "token, and Telegram does not serve getUpdates while one is. Polling stopped — either run in "
            "webhook mode (platforms.telegram.mode: webhook), or remove the webhook (Bot API deleteWebhook) "
            "if this bot should poll."
        )
    return (
        f"Telegram refused getUpdates with 409 Conflict ({description}): another process is polling this "
        "bot token. Only one process may poll a token; polling stopped here instead of fighting it for "
        "updates — stop the other process, or use webhook mode (platforms.telegram.mode: webhook) to "
        "run several replicas."
    )


def _check_webhook(mode: str, secret: Optional[str], set_webhook: bool, url: Optional[str]) -> None:
    """Webhook mode needs its secret (anyone who finds the URL could post updates) and, to register, its URL."""
    if mode == "webhook" and not secret:
        raise TelegramAdapterError(
            "webhook mode needs platforms.telegram.webhook_secret: without it anyone who finds the URL "
            "could post fake updates", setting="platforms.telegram.webhook_secret"
        )
    if mode == "webhook" and set_webhook and not url:
        raise TelegramAdapterError("webhook mode needs platforms.telegram.webhook_url to register the webhook",
                                   setting="platforms.telegram.webhook_url")


def _bot(token: str, api_server: Optional[str]) -> Bot:
    """The aiogram bot for ``token``, refused with the setting named when the token is not one."""
    problem = token_problem(token)
    if problem:
        raise TelegramAdapterError(
            f"not a Telegram bot token ({problem}) — copy the whole token @BotFather gave you into "
            "platforms.telegram.token or TELEGRAM_BOT_TOKEN", setting="platforms.telegram.token")
    session = AiohttpSession(api=TelegramAPIServer.from_base(api_server)) if api_server else AiohttpSession()
    try:
        return Bot(token, session=session)
    except TokenValidationError as error:  # aiogram's own check, should it ever be stricter than ours
        raise TelegramAdapterError(f"not a Telegram bot token ({error}) — copy the whole token @BotFather gave "
                                   "you into platforms.telegram.token or TELEGRAM_BOT_TOKEN",
                                   setting="platforms.telegram.token") from None


class TelegramAdapter(PlatformAdapter):
    """One Telegram bot: polling or webhook intake, split and retried sends, a typing indicator."""

    platform = "tg"
    max_message_length = TELEGRAM_MESSAGE_LIMIT

    def __init__(
        self,
        token: str,
        *,
        mode: Literal["polling", "webhook"] = "polling",
        api_server: Optional[str] = None,
        webhook_url: Optional[str] = None,
        webhook_path: str = "/telegram/webhook",
        webhook_secret: Optional[str] = None,
        listen_host: str = "127.0.0.1",
        listen_port: int = 8443,
        set_webhook: bool = True,
        allowed_user_ids: Iterable[int] = (),
        allowed_chat_ids: Iterable[int] = (),
        poll_timeout: int = 25,
        poll_limit: int = 100,
        network_retries: int = 5,
        typing_interval: float = 4.0,
        typing_timeout: float = 120.0,
        retry_sleep: Sleep = asyncio.sleep,
        preview_interval: float = 1.0,
    ) -> None:
        _check_webhook(mode, webhook_secret, set_webhook, webhook_url)
        self.bot = _bot(token, api_server)
        self.api_server = api_server
        self.mode = mode
        self.webhook_url = webhook_url
        self.webhook_path = webhook_path
        self.webhook_secret = webhook_secret or ""
        self.listen_host = listen_host
        self.listen_port = listen_port
        self.set_webhook = set_webhook
        self.allowed_user_ids = frozenset(allowed_user_ids)
        self.allowed_chat_ids = frozenset(allowed_chat_ids)
        self.poll_timeout = poll_timeout
        self.poll_limit = poll_limit
        self.network_retries = network_retries
        self.typing_interval = typing_interval
        self.typing_timeout = typing_timeout
        self._retry_sleep = retry_sleep
        #: Shortest gap between two previews of a streamed reply (the send budget may widen it).
        self.preview_interval = preview_interval
        self.me: Optional[User] = None
        #: Why the adapter stopped on its own (409 Conflict, rejected token); None while healthy.
        self.failure: Optional[TelegramAdapterError] = None
        self._failed = asyncio.Event()
        self._intake: Optional[Intake] = None
        self._poller: Optional[asyncio.Task[None]] = None
        self._web: Optional[web.AppRunner] = None
        self._typing: dict[str, asyncio.Task[None]] = {}
        #: Chat id -> the supergroup that group became: its calls go there without a 400 first.
        self._moved: dict[str, int] = {}

    @classmethod
    def from_settings(cls, settings: Settings) -> "TelegramAdapter":
        """The adapter ``platforms.telegram`` describes."""
        telegram = settings.platforms.telegram
        if telegram.token is None:
            raise TelegramAdapterError("not set — put the token @BotFather gave you in platforms.telegram.token or "
                                       "TELEGRAM_BOT_TOKEN", setting="platforms.telegram.token")
        return cls(
            telegram.token.get_secret_value(),
            mode=telegram.mode,
            api_server=telegram.api_server,
            webhook_url=telegram.webhook_url,
            webhook_path=telegram.webhook_path,
            webhook_secret=telegram.webhook_secret.get_secret_value() if telegram.webhook_secret else None,
            listen_host=telegram.listen_host,
            listen_port=telegram.listen_port,
            allowed_user_ids=telegram.allowed_user_ids,
            allowed_chat_ids=telegram.allowed_chat_ids,
        )

    # ------------------------------------------------------------------ lifecycle

    async def verify(self) -> User:
        """Learn who the bot is (getMe) before :meth:`start`: ``foldgate run`` does this before it prints
        anything, so a wrong token or address is the only line on the screen."""
        self.me = await self.identify()
        return self.me

    async def start(self, intake: Intake) -> None:
        """Learn who the bot is (unless :meth:`verify` did), then poll or serve the webhook; updates go to ``intake``."""
        self._intake = intake
        self.failure = None
        self._failed.clear()
        if self.me is None:  # not verified beforehand: the same check now
            self.me = await self.identify()
        if self.mode == "polling":
            self._poller = asyncio.create_task(self._poll(), name="telegram-polling")
            log.info("telegram: polling as @%s", self.me.username)
            return
        try:
            await self._serve_webhook()
        except OSError as error:
            raise TelegramAdapterError(
                f"cannot listen on {self.listen_host}:{self.listen_port} for the webhook ({error.strerror or error}) — "
                "pick a free port in platforms.telegram.listen_port, or another platforms.telegram.listen_host",
                setting="platforms.telegram.listen_port") from error
        if self.set_webhook:
            await self._call(
                functools.partial(self.bot.set_webhook, url=self.webhook_url or "", secret_token=self.webhook_secret,
                                  allowed_updates=ALLOWED_UPDATES),
                "setWebhook",
            )
        log.info("telegram: webhook for @%s on %s:%s%s", self.me.username, self.listen_host, self.webhook_port,
                 self.webhook_path)

    async def identify(self, *, attempts: int = START_ATTEMPTS, within: float = START_SECONDS) -> User:
        """Ask Telegram who the bot is (getMe), as start and ``foldgate doctor`` do.

        A network failure or a 5xx is tried again, up to ``attempts`` times within ``within`` seconds
        in all, without a log line: the operator reads one sentence at the end, not a retry per line.
        A rejected token, an unreachable or silent Bot API or a refusal becomes a
        :class:`TelegramAdapterError` naming the setting to fix, because at start nobody but the
        operator can act on it.
        """
        where = self.api_server or DEFAULT_API_SERVER
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        made = 0
        while True:
            made += 1
            left = deadline - loop.time()
            try:
                async with asyncio.timeout(left):
                    return await self.bot.get_me(request_timeout=max(1, math.ceil(left)))
            except TelegramUnauthorizedError as error:
                raise TelegramAdapterError(
                    f"Telegram rejected the bot token ({error.message}) — copy the current token from @BotFather into "
                    "platforms.telegram.token or TELEGRAM_BOT_TOKEN", setting="platforms.telegram.token") from error
            except TimeoutError as error:
                raise self._unreachable(f"no answer from the Telegram Bot API at {where} within {within:g} s") from error
            except TelegramRetryAfter as error:
                if loop.time() + error.retry_after >= deadline:
                    raise TelegramAdapterError(
                        f"the Bot API at {where} asks to wait {error.retry_after} s before the next request (429) — "
                        "start again after that", setting="platforms.telegram") from error
                await self._retry_sleep(error.retry_after)
            except (TelegramNetworkError, TelegramServerError) as error:
                if isinstance(error.__cause__, TimeoutError):  # aiogram's own deadline for the request
                    raise self._unreachable(
                        f"no answer from the Telegram Bot API at {where} within {within:g} s") from error
                delay = _backoff(made)
                if made >= attempts or loop.time() + delay >= deadline:
                    tries = f"after {made} attempt{'s' if made != 1 else ''}"
                    reason = self._redacted(error.message.removeprefix("HTTP Client says - "))
                    if isinstance(error, TelegramServerError):
                        raise TelegramAdapterError(
                            f"the Bot API at {where} failed getMe {tries} ({reason}) — try again later, or check "
                            "platforms.telegram.api_server", setting="platforms.telegram") from error
                    raise self._unreachable(f"cannot reach the Telegram Bot API at {where} {tries} ({reason})") from error
                await self._retry_sleep(delay)
            except TelegramAPIError as error:
                raise TelegramAdapterError(
                    f"the Bot API at {where} refused getMe ({self._redacted(error.message)}) — check "
                    "platforms.telegram.token and platforms.telegram.api_server", setting="platforms.telegram") from error

    def _unreachable(self, what: str) -> TelegramAdapterError:
        """``what`` went wrong reaching the Bot API, with the setting and the fix that fit this configuration."""
        if self.api_server:
            return TelegramAdapterError(f"{what} — check platforms.telegram.api_server",
                                        setting="platforms.telegram.api_server")
        return TelegramAdapterError(f"{what} — check this machine's network and firewall (or set "
                                    "platforms.telegram.api_server to a Bot API server it can reach)",
                                    setting="platforms.telegram")

    def _redacted(self, text: str) -> str:
        """``text`` without the bot token, which must never reach a log or a terminal."""
        return text.replace(self.bot.token, "<token>") if self.bot.token else text

    async def stop(self) -> None:
        """Stop polling or the webhook server, the typing indicators, and close the HTTP session."""
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
            self._poller = None
        for chat_id in list(self._typing):
            self.stop_typing(chat_id)
        if self._web is not None:
            await self._web.cleanup()
            self._web = None
        await self.bot.session.close()

    async def failed(self) -> TelegramAdapterError:
        """Wait until the adapter stops on its own, and say why (for the app to report and exit)."""
        await self._failed.wait()
        assert self.failure is not None
        return self.failure

    def _fail(self, failure: TelegramAdapterError) -> None:
        log.error("telegram: %s", failure)
        self.failure = failure
        self._failed.set()

    @property
    def polling(self) -> bool:
        """True while the polling loop runs."""
        return self._poller is not None and not self._poller.done()

    @property
    def webhook_port(self) -> int:
        """The port the webhook server listens on (useful with ``listen_port: 0``)."""
        if self._web is None or not self._web.addresses:
            return self.listen_port
        return int(self._web.addresses[0][1])

    # ------------------------------------------------------------------ polling

    async def _poll(self) -> None:
        offset: Optional[int] = None
        failures = 0
        while True:
            try:
                updates = await self.bot.get_updates(
                    offset=offset, limit=self.poll_limit, timeout=self.poll_timeout,
                    allowed_updates=ALLOWED_UPDATES, request_timeout=self.poll_timeout + 10,
                )
            except TelegramConflictError as error:
                self._fail(PollingConflict(conflict_explanation(error.message), setting="platforms.telegram.mode"))
                return
            except TelegramUnauthorizedError as error:
                self._fail(TelegramAdapterError(
                    f"Telegram rejected the bot token while polling ({error.message}; was it revoked?) — put the "
                    "current token from @BotFather in platforms.telegram.token or TELEGRAM_BOT_TOKEN and restart",
                    setting="platforms.telegram.token"))
                return
            except TelegramRetryAfter as error:
                await self._retry_sleep(error.retry_after)
                continue
            except Exception as error:  # network, 5xx, anything unexpected: back off and ask again
                failures += 1
                delay = _backoff(failures)
                log.warning("telegram: getUpdates failed (%s: %s); retrying in %.1f s", type(error).__name__, error, delay)
                await self._retry_sleep(delay)
                continue
            failures = 0
            for update in updates:
                if not await self._deliver(update):
                    break  # not durable: the next getUpdates asks for this update again
                offset = update.update_id + 1

    async def _deliver(self, update: Update) -> bool:
        """Hand one polled update to the intake; False when it could not be made durable.

        An update that can never be taken in (it cannot be read as a message, or the intake refuses
        the message itself) is logged once and skipped: asking for its offset again would hold up
        every chat's updates behind it, for good.
        """
        try:
            message = self.incoming(update)
        except Exception:
            log.exception("telegram: skipped update %s: it cannot be read as a message", update.update_id)
            return True
        if message is None:
            return True
        assert self._intake is not None
        try:
            await self._intake(message)
        except UNSTORABLE as error:
            log.error("telegram: skipped update %s in chat %s: the message cannot be stored (%s: %.200s)",
                      update.update_id, message.chat_id, type(error).__name__, error)
            return True
        except Exception as error:
            _log_not_stored(update.update_id, error, "it will be fetched again")
            await self._retry_sleep(1.0)
            return False
        return True

    # ------------------------------------------------------------------ webhook

    async def _serve_webhook(self) -> None:
        app = web.Application()
        app.router.add_post(self.webhook_path, self._on_webhook)
        self._web = web.AppRunner(app, access_log=None, shutdown_timeout=5.0)
        await self._web.setup()
        await web.TCPSite(self._web, self.listen_host, self.listen_port).start()

    async def _on_webhook(self, request: web.Request) -> web.Response:
        given = request.headers.get(SECRET_HEADER, "").encode()
        if not hmac.compare_digest(given, self.webhook_secret.encode()):
            log.warning("telegram: webhook delivery from %s refused: wrong or missing secret", request.remote)
            return web.Response(status=403, text="forbidden")
        try:
            update = Update.model_validate(await request.json(), context={"bot": self.bot})
        except ValueError:
            log.warning("telegram: webhook body from %s is not a Telegram update", request.remote)
            return web.Response(status=400, text="not a Telegram update")
        try:
            message = self.incoming(update)
        except Exception:  # answered 200: a redelivery would fail the same way, and hold up the others
            log.exception("telegram: skipped update %s: it cannot be read as a message", update.update_id)
            return web.Response(text="skipped")
        if message is None:
            return web.Response(text="ignored")
        if self._intake is None:
            return web.Response(status=503, text="not started")
        try:
            queued = await self._intake(message)
        except UNSTORABLE as error:
            log.error("telegram: skipped update %s in chat %s: the message cannot be stored (%s: %.200s)",
                      update.update_id, message.chat_id, type(error).__name__, error)
            return web.Response(text="skipped")
        except Exception as error:
            _log_not_stored(update.update_id, error, "answering 500 so Telegram delivers it again")
            return web.Response(status=500, text="not stored")
        return web.Response(text="stored" if queued else "duplicate")

    # ------------------------------------------------------------------ updates -> IncomingMessage

    def incoming(self, update: Update) -> Optional[IncomingMessage]:
        """The gateway's view of an update, or None when it is not recorded (see the module docstring)."""
        moved = migration(update)
        if moved is not None:
            self._upgraded(*moved)
            return None
        return incoming_message(update, self.me, platform=self.platform, allowed_user_ids=self.allowed_user_ids,
                                allowed_chat_ids=self.allowed_chat_ids)

    def _upgraded(self, old_chat_id: int, new_chat_id: int) -> None:
        """An upgrade's service message: replies still owed to the old group go straight to the supergroup."""
        if not self.chat_moved(str(old_chat_id), new_chat_id):
            return
        if self.allowed_chat_ids and old_chat_id in self.allowed_chat_ids and new_chat_id not in self.allowed_chat_ids:
            log.warning("telegram: allowed chat %s is now the supergroup %s, whose messages the allowlist ignores — "
                        "add %s to platforms.telegram.allowed_chat_ids", old_chat_id, new_chat_id, new_chat_id)

    # ------------------------------------------------------------------ sending

    async def send(self, chat_id: str, text: str, *, reply_to: Optional[str] = None) -> None:
        """Send ``text`` completely: split to Telegram's limit, each chunk retried until it is delivered.

        ``reply_to`` is the gateway's update id, not a Telegram message id, so replies are not threaded.
        """
        self.stop_typing(chat_id)
        chunks = split_message(text, self.max_message_length, units="utf16")
        if not chunks:
            log.warning("telegram: an empty reply to chat %s was not sent", chat_id)
            return
        for chunk in chunks:
            await self.in_chat(chat_id, functools.partial(self._send_text, chunk, what=f"sendMessage to {chat_id}"))

    async def _send_text(self, text: str, target: int | str, *, what: str) -> Message:
        return await self._call(functools.partial(self.bot.send_message, target, text, parse_mode=None), what)

    # ------------------------------------------------------------------ groups upgraded to supergroups

    def chat_target(self, chat_id: str) -> int | str:
        """Where calls for ``chat_id`` go now: the supergroup's id once the group was upgraded."""
        return self._moved.get(chat_id, chat_ref(chat_id))

    def chat_moved(self, chat_id: str, new_chat_id: int) -> bool:
        """Remember that the group ``chat_id`` became the supergroup ``new_chat_id``; False when already known."""
        if self._moved.get(chat_id) == new_chat_id:
            return False
        log.info("telegram: chat %s was upgraded to the supergroup %s; its replies go there", chat_id, new_chat_id)
        self._moved[chat_id] = new_chat_id
        return True

    async def in_chat(self, chat_id: str, request: Callable[[int | str], Awaitable[T]]) -> T:
        """Run ``request`` at ``chat_id``'s current id, following the group to its supergroup.

        Telegram refused the call at the old id, so making it again at the new one sends nothing
        twice; the move is remembered, so later calls do not hit the 400 again.
        """
        for _ in range(MAX_MOVES):
            try:
                return await request(self.chat_target(chat_id))
            except TelegramMigrateToChat as moved:
                self.chat_moved(chat_id, moved.migrate_to_chat_id)
        return await request(self.chat_target(chat_id))

    # ------------------------------------------------------------------ streamed replies

    def reply_surface(self, chat_id: str, gate: SendGate, *, reply_to: Optional[str] = None,
                      journal: Optional[Journal] = None) -> Surface:
        """A private chat streams into a draft (``sendMessageDraft``), any other chat into messages edited in place."""
        ref = chat_ref(chat_id)
        if isinstance(ref, int) and ref > 0:  # private chats have positive ids, groups negative ones
            return DraftReply(self, chat_id, gate, journal)
        return EditedReply(TelegramMessenger(self, chat_id), gate, limit=TELEGRAM_MESSAGE_LIMIT, units="utf16",
                           interval=self.preview_interval, journal=journal)

    async def _call(self, request: Callable[[], Awaitable[T]], what: str, *, retries: Optional[int] = None) -> T:
        """Run one Bot API request, waiting out 429s as told and retrying transient failures
        (``retries`` times, by default ``network_retries``)."""
        limit = self.network_retries if retries is None else retries
        failures = 0
        while True:
            try:
                return await request()
            except TelegramRetryAfter as error:
                log.warning("telegram: %s: rate limited, waiting the %s s Telegram asks for", what, error.retry_after)
                await self._retry_sleep(error.retry_after)
            except TelegramEntityTooLarge:
                raise
            except (TelegramNetworkError, TelegramServerError) as error:
                failures += 1
                if failures > limit:
                    raise
                delay = _backoff(failures)
                log.warning("telegram: %s failed (%s); retry %d in %.1f s", what, error.message, failures, delay)
                await self._retry_sleep(delay)

    # ------------------------------------------------------------------ typing

    async def typing(self, chat_id: str) -> None:
        """Show "typing…" now and keep it shown until the reply is sent (or ``typing_timeout``)."""
        await self._send_typing(chat_id)
        self.stop_typing(chat_id)
        if self.typing_interval > 0:
            self._typing[chat_id] = asyncio.create_task(self._keep_typing(chat_id), name=f"telegram-typing-{chat_id}")

    async def _keep_typing(self, chat_id: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.typing_timeout
        while loop.time() + self.typing_interval < deadline:
            await asyncio.sleep(self.typing_interval)
            await self._send_typing(chat_id)

    def stop_typing(self, chat_id: str) -> None:
        task = self._typing.pop(chat_id, None)
        if task is not None:
            task.cancel()

    async def _send_typing(self, chat_id: str) -> None:
        try:
            await self.in_chat(chat_id, lambda target: self.bot.send_chat_action(chat_id=target, action="typing"))
        except asyncio.CancelledError:
            raise
        except Exception as error:  # an indicator is never worth failing a turn
            log.debug("telegram: typing indicator for %s failed: %s", chat_id, error)


def _log_not_stored(update_id: int, error: Exception, then: str) -> None:
    """An update the intake could not store this time: one line while Redis restarts, the traceback otherwise."""
    if is_redis_outage(error):
        log.warning("telegram: could not store update %s, Redis does not answer (%s); %s", update_id, error, then)
    else:
        log.exception("telegram: could not store update %s; %s", update_id, then)


def _backoff(failures: int) -> float:
    return min(30.0, 0.5 * 2 ** (failures - 1))
