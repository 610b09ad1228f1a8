"""The Telegram adapter: one bot through aiogram 3, wiring the parts of this package together.

Updates come in by long polling (:mod:`.polling`) or a webhook (:mod:`.webhook`), are read as
messages (:mod:`.updates`; a polled album's parts gathered by :mod:`.albums`) and handed to the gateway's
intake (:mod:`.receiving`); the photos, files and voice messages they carry are fetched on demand
(:mod:`.media`). Replies go out
whole (:meth:`TelegramAdapter.send`) or streamed (:mod:`.replies`), every final message under one
retry policy (:mod:`.calls`), following a group to its supergroup (:mod:`.moves`); a typing
indicator (:mod:`.indicator`) shows while a reply is prepared. What is checked before anything is
sent is in :mod:`.checks`, who the bot is in :mod:`.identify`; a tool's question with its buttons
in :mod:`.approvals`.

Sending
-------
Replies are split to 4096 UTF-16 code units (what Telegram counts) and sent in order as plain
text — no parse mode, so nothing a user or the model writes can break the formatting. A 429
is answered by waiting exactly its ``retry_after`` and sending the same chunk again, as often
as Telegram asks: the reply always arrives. Network and 5xx errors are retried a few times
with backoff; an answer foldgate cannot read is one line naming the setting (:mod:`.answers`),
and a call whose answer said ``ok`` is not made again (:mod:`.calls`). A streamed message posted
in an old group before its upgrade can no longer be edited: its text continues in a new message in
the supergroup. Messages written in the supergroup arrive under its new id: a chat, and a session,
of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Sequence

from aiogram.exceptions import TelegramBadRequest
from aiogram.types import BufferedInputFile, Message, Update, User

from gateway.config import Settings, TelegramSettings
from gateway.delivery.edited import EditedReply
from gateway.platforms.base import (
    ApprovalPrompt,
    IncomingMessage,
    Intake,
    Journal,
    MediaItem,
    OutgoingFile,
    PlatformAdapter,
    ReceivingTurn,
    SendGate,
    Surface,
)
from gateway.platforms.failure import Failure
from gateway.platforms.retry import Sleep
from gateway.platforms.split import split_message
from gateway.platforms.telegram.albums import ALBUM_WINDOW
from gateway.platforms.telegram.answers import UnreadableAnswer
from gateway.platforms.telegram.approvals import ask_with_buttons, settle_question
from gateway.platforms.telegram.calls import accepted, once, send_retry
from gateway.platforms.telegram.checks import bot_for, check_webhook
from gateway.platforms.telegram.errors import TelegramAdapterError
from gateway.platforms.telegram.identify import START_ATTEMPTS, START_SECONDS, identify
from gateway.platforms.telegram.indicator import TypingIndicator
from gateway.platforms.telegram.media import BOT_API_DOWNLOAD_LIMIT, fetch_file
from gateway.platforms.telegram.moves import ChatMoves, chat_ref
from gateway.platforms.telegram.polling import Poller
from gateway.platforms.telegram.replies import TELEGRAM_MESSAGE_LIMIT, DraftReply, TelegramMessenger
from gateway.platforms.telegram.updates import (
    ALLOWED_UPDATES,
    album_message,
    button_message,
    media_group,
    migration,
)
from gateway.platforms.telegram.webhook import WebhookServer

#: What Telegram takes as a photo (a larger image, or another type, goes as a document).
PHOTO_TYPES = frozenset({"image/jpeg", "image/png", "image/webp"})
PHOTO_LIMIT = 10 * 1024 * 1024

log = logging.getLogger("gateway.platforms.telegram")  # one logger to filter for Telegram, whichever part speaks


def _credentials(settings: TelegramSettings, set_webhook: bool) -> tuple[str, str | None]:
    """The bot's token and webhook secret, refused before anything is built: no token, or a webhook that
    cannot work as configured (see :mod:`.checks`)."""
    if settings.token is None:
        raise TelegramAdapterError(
            "not set — put the token @BotFather gave you in platforms.telegram.token or TELEGRAM_BOT_TOKEN",
            setting="platforms.telegram.token",
        )
    secret = settings.webhook_secret.get_secret_value() if settings.webhook_secret else None
    check_webhook(settings.mode, secret, set_webhook, settings.webhook_url)
    return settings.token.get_secret_value(), secret


class TelegramAdapter(PlatformAdapter):
    """One Telegram bot: polling or webhook intake, split and retried sends, a typing indicator."""

    platform = "tg"
    max_message_length = TELEGRAM_MESSAGE_LIMIT
    #: False (for this adapter) once its Bot API answered that it has no sendMessageDraft: private replies then
    #: arrive whole.
    drafts = True

    def __init__(
        self,
        settings: TelegramSettings,
        *,
        max_media_bytes: int = BOT_API_DOWNLOAD_LIMIT,
        set_webhook: bool = True,
        turn: ReceivingTurn | None = None,
        poll_timeout: int = 25,
        poll_limit: int = 100,
        network_retries: int = 5,
        typing_interval: float = 4.0,
        typing_timeout: float = 120.0,
        preview_interval: float = 1.0,
        album_window: float = ALBUM_WINDOW,
        retry_sleep: Sleep = asyncio.sleep,
    ) -> None:
        """The bot ``settings`` (the ``platforms.telegram`` section) describes; its defaults are the configuration's.

        The keywords are what that section does not hold: ``max_media_bytes`` is ``media.max_bytes``, from another
        section; ``set_webhook`` False leaves registering the webhook to whoever runs the bot; ``turn``, in polling
        mode, is when this process may poll (several processes serving one token). The pacing after it is not
        configurable — a running gateway keeps these defaults, a test picks its own — and ``retry_sleep`` waits out
        retries and rate limits, replaced in a test that should not wait.
        """
        token, secret = _credentials(settings, set_webhook)
        self.bot = bot_for(token, settings.api_server)
        #: The ``platforms.telegram`` section this bot runs by (where the webhook listens, and at which URL).
        self.settings = settings
        self.api_server = settings.api_server
        self.mode = settings.mode
        self.webhook_secret = secret or ""
        self.set_webhook = set_webhook
        self.allowed_user_ids = frozenset(settings.allowed_user_ids)
        self.allowed_chat_ids = frozenset(settings.allowed_chat_ids)
        self.poll_timeout = poll_timeout
        self.poll_limit = poll_limit
        self._retry_sleep = retry_sleep
        #: Shortest gap between two previews of a streamed reply (the send budget may widen it).
        self.preview_interval = preview_interval
        #: The largest file the gateway takes in: the photo size chosen is the largest within it.
        self.max_media_bytes = max_media_bytes
        #: Seconds after a polled album's latest part before it is handed over (see :mod:`.albums`).
        self.album_window = album_window
        #: When this process may poll, where several serve the token (set before :meth:`start`); None = always.
        self.turn = turn
        #: Where each upgraded group's calls go now.
        self.moves = ChatMoves()
        #: The one retry policy for final sends, whole or streamed.
        self.retry = send_retry(log, network_retries=network_retries, sleep=retry_sleep)
        self.typing_indicator = TypingIndicator(self.bot, self.moves, interval=typing_interval, timeout=typing_timeout)
        self.me: User | None = None
        self._failure: Failure[TelegramAdapterError] = Failure(log, "telegram")
        self._poller: asyncio.Task[None] | None = None
        self._webhook: WebhookServer | None = None
        self._button_answers: set[asyncio.Task[None]] = set()

    @classmethod
    def from_settings(cls, settings: Settings) -> TelegramAdapter:
        """The adapter ``platforms.telegram`` describes, taking in files up to ``media.max_bytes``."""
        return cls(settings.platforms.telegram, max_media_bytes=settings.media.max_bytes)

    # ------------------------------------------------------------------ lifecycle

    async def verify(self) -> None:
        """Learn who the bot is (getMe) before :meth:`start`: ``foldgate run`` does this before it prints
        anything, so a wrong token or address is the only line on the screen."""
        self.me = await self.identify()

    async def start(self, intake: Intake) -> None:
        """Learn who the bot is (unless :meth:`verify` did), then poll or serve the webhook; updates go to
        ``intake``."""
        self._failure.clear()
        if self.me is None:  # not verified beforehand: the same check now
            self.me = await self.identify()
        if self.mode == "polling":
            poller = Poller(
                self.bot,
                self.incoming,
                intake,
                timeout=self.poll_timeout,
                limit=self.poll_limit,
                sleep=self._retry_sleep,
                fail=self._failure.record,
                album_window=self.album_window,
                turn=self.turn,
            )
            self._poller = asyncio.create_task(poller.run(), name="telegram-polling")
            log.info("telegram: polling as @%s", self.me.username)
            return
        self._webhook = WebhookServer(
            self.bot, self.incoming_part, intake, path=self.settings.webhook_path, secret=self.webhook_secret
        )
        host, port = self.settings.listen_host, self.settings.listen_port
        try:
            await self._webhook.open(host, port)
        except OSError as error:
            raise TelegramAdapterError(
                f"cannot listen on {host}:{port} for the webhook ({error.strerror or error}) — "
                "pick a free port in platforms.telegram.listen_port, or another platforms.telegram.listen_host",
                setting="platforms.telegram.listen_port",
            ) from error
        if self.set_webhook:
            set_webhook = functools.partial(
                self.bot.set_webhook,
                url=self.settings.webhook_url or "",
                secret_token=self.webhook_secret,
                allowed_updates=ALLOWED_UPDATES,
            )
            try:
                await self.retry.run(
                    functools.partial(once, set_webhook, "setWebhook"),
                    "telegram: setWebhook",
                    pause=functools.partial(self._wait_out, "setWebhook"),
                )
            except UnreadableAnswer as error:
                if not accepted(log, error, "setWebhook"):
                    raise TelegramAdapterError(f"{error.sentence} — {error.fix}", setting=error.setting) from error
        log.info(
            "telegram: webhook for @%s on %s:%s%s",
            self.me.username,
            host,
            self.webhook_port,
            self.settings.webhook_path,
        )

    async def identify(self, *, attempts: int = START_ATTEMPTS, within: float = START_SECONDS) -> User:
        """Ask Telegram who the bot is (getMe), as start and ``foldgate doctor`` do (see :mod:`.identify`)."""
        return await identify(self.bot, self.api_server, sleep=self._retry_sleep, attempts=attempts, within=within)

    async def stop(self) -> None:
        """Stop polling or the webhook server, the typing indicators, and close the HTTP session."""
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
            self._poller = None
        self.typing_indicator.stop_all()
        if self._webhook is not None:
            await self._webhook.close()
            self._webhook = None
        await asyncio.gather(*self._button_answers, return_exceptions=True)
        await self.bot.session.close()

    @property
    def failure(self) -> TelegramAdapterError | None:
        """Why the adapter stopped on its own; None while healthy."""
        return self._failure.error

    async def failed(self) -> TelegramAdapterError:
        """Wait until the adapter stops on its own, and say why (for the app to report and exit)."""
        return await self._failure.wait()

    @property
    def polling(self) -> bool:
        """True while the polling loop runs."""
        return self._poller is not None and not self._poller.done()

    @property
    def webhook_port(self) -> int:
        """The port the webhook server listens on (useful with ``listen_port: 0``)."""
        port = self._webhook.port() if self._webhook is not None else None
        return self.settings.listen_port if port is None else port

    # ------------------------------------------------------------------ updates -> IncomingMessage

    def incoming(self, updates: Sequence[Update]) -> IncomingMessage | None:
        """The gateway's view of one message's updates (one, or an album's parts), or None when it is not
        recorded (see :mod:`.updates`)."""
        for update in updates:
            moved = migration(update)
            if moved is not None:
                self._upgraded(*moved)
                return None
            if update.callback_query is not None:
                self._answer_button(update.callback_query.id)
                return button_message(
                    update,
                    platform=self.platform,
                    allowed_user_ids=self.allowed_user_ids,
                    allowed_chat_ids=self.allowed_chat_ids,
                )
        return album_message(
            updates,
            self.me,
            platform=self.platform,
            allowed_user_ids=self.allowed_user_ids,
            allowed_chat_ids=self.allowed_chat_ids,
            max_bytes=self.max_media_bytes,
        )

    def incoming_part(self, updates: Sequence[Update]) -> IncomingMessage | None:
        """A webhook's message: one that is an album's part names its album, so the turn gathers the parts."""
        message = self.incoming(updates)
        group = media_group(updates[0]) if updates else None
        return message.model_copy(update={"album": group[1]}) if message is not None and group else message

    def _answer_button(self, query_id: str) -> None:
        """Tell Telegram the press was seen (its client stops showing it as pending); what it answers is shown
        when the question is settled."""

        async def answer() -> None:
            try:
                await once(functools.partial(self.bot.answer_callback_query, query_id), "answerCallbackQuery")
            except Exception as error:
                log.info("telegram: answerCallbackQuery failed: %s", error)

        task = asyncio.get_running_loop().create_task(answer(), name="telegram-answer-button")
        self._button_answers.add(task)
        task.add_done_callback(self._button_answers.discard)

    def _upgraded(self, old_chat_id: int, new_chat_id: int) -> None:
        """An upgrade's service message: replies still owed to the old group go straight to the supergroup."""
        if not self.moves.moved(str(old_chat_id), new_chat_id):
            return
        if self.allowed_chat_ids and old_chat_id in self.allowed_chat_ids and new_chat_id not in self.allowed_chat_ids:
            log.warning(
                "telegram: allowed chat %s is now the supergroup %s, whose messages the allowlist ignores — "
                "add %s to platforms.telegram.allowed_chat_ids",
                old_chat_id,
                new_chat_id,
                new_chat_id,
            )

    # ------------------------------------------------------------------ sending

    async def send(self, chat_id: str, text: str, *, reply_to: str | None = None) -> None:
        """Send ``text`` completely: split to Telegram's limit, each chunk retried until it is delivered.

        ``reply_to`` is the gateway's update id, not a Telegram message id, so replies are not threaded.
        """
        self.stop_typing(chat_id)
        chunks = split_message(text, self.max_message_length, units="utf16")
        if not chunks:
            log.warning("telegram: an empty reply to chat %s was not sent", chat_id)
            return
        messenger = TelegramMessenger(self, chat_id)
        what = f"sendMessage to {chat_id}"
        for chunk in chunks:
            await self.retry.run(
                functools.partial(messenger.post, chunk),
                f"telegram: {what}",
                pause=functools.partial(self._wait_out, what),
            )

    async def send_file(self, chat_id: str, file: OutgoingFile, *, reply_to: str | None = None) -> None:
        """An image as a photo (``sendPhoto``) where Telegram takes it as one, anything else — and a photo Telegram
        refuses (a panorama past its proportions) — as a document (``sendDocument``). A 429 is waited out; a
        network failure is not retried here (the upload may have arrived): the delivery's attempts decide."""
        self.stop_typing(chat_id)
        if file.kind == "image" and file.mime in PHOTO_TYPES and len(file.data) <= PHOTO_LIMIT:
            try:
                await self._upload(chat_id, file, "sendPhoto")
                return
            except TelegramBadRequest as refused:
                log.info(
                    "telegram: %s was refused as a photo (%s); sending it as a document", file.name, refused.message
                )
        await self._upload(chat_id, file, "sendDocument")

    async def _upload(self, chat_id: str, file: OutgoingFile, method: str) -> None:
        what = f"{method} to {chat_id}"

        async def post(target: int | str) -> Message:
            upload = BufferedInputFile(file.data, filename=file.name or file.kind)
            if method == "sendPhoto":
                return await once(functools.partial(self.bot.send_photo, target, photo=upload), what)
            return await once(functools.partial(self.bot.send_document, target, document=upload), what)

        try:
            await self.retry.run(
                functools.partial(self.moves.in_chat, chat_id, post),
                f"telegram: {what}",
                pause=functools.partial(self._wait_out, what),
                retries=0,
            )
        except UnreadableAnswer as error:
            if not accepted(log, error, what):
                raise

    async def ask_approval(self, chat_id: str, prompt: ApprovalPrompt, *, reply_to: str | None = None) -> str | None:
        """The question with a yes and a no button; the message's id, to edit it once answered (see
        :mod:`.approvals`)."""
        self.stop_typing(chat_id)
        return await ask_with_buttons(self, chat_id, prompt, self._wait_out)

    async def settle_approval(self, chat_id: str, message_id: str | None, prompt: ApprovalPrompt, outcome: str) -> None:
        """The question edited to say what was decided, its buttons gone."""
        if message_id is None:
            await super().settle_approval(chat_id, message_id, prompt, outcome)
            return
        await settle_question(self, chat_id, message_id, prompt, outcome, self._wait_out)

    async def _wait_out(self, what: str, retry_after: float) -> None:
        """A reply sent whole has no send budget: a 429 is waited out here, exactly as long as Telegram asks."""
        log.warning("telegram: %s: rate limited, waiting the %s s Telegram asks for", what, retry_after)
        await self._retry_sleep(retry_after)

    def reply_surface(
        self, chat_id: str, gate: SendGate, *, reply_to: str | None = None, journal: Journal | None = None
    ) -> Surface:
        """A private chat streams into a draft (``sendMessageDraft``), any other chat into messages edited in place."""
        ref = chat_ref(chat_id)
        if isinstance(ref, int) and ref > 0:  # private chats have positive ids, groups negative ones
            return DraftReply(self, chat_id, gate, journal)
        return EditedReply(
            TelegramMessenger(self, chat_id),
            gate,
            limit=TELEGRAM_MESSAGE_LIMIT,
            units="utf16",
            retry=self.retry,
            what=f"telegram: a message in {chat_id}",
            interval=self.preview_interval,
            journal=journal,
        )

    # ------------------------------------------------------------------ media

    async def fetch(self, item: MediaItem, limit: int) -> bytes:
        """The bytes of a photo, file or voice message: getFile, then a download that stops at ``limit``
        (refused before it starts when Telegram reported more; see :mod:`.media`)."""
        return await fetch_file(self.bot, item, limit)

    # ------------------------------------------------------------------ typing

    async def typing(self, chat_id: str) -> None:
        """Show "typing…" now and keep it shown until the reply is sent (or ``typing_timeout``)."""
        await self.typing_indicator.start(chat_id)

    def stop_typing(self, chat_id: str) -> None:
        self.typing_indicator.stop(chat_id)
