"""Discord through discord.py 2: gateway events in as ``IncomingMessage``, replies out in 2,000-character chunks.

What the bot hears:

- **DMs**: every message, answered.
- **Server channels and threads**: a message that mentions the bot (``@bot``, or its managed role)
  or replies to one of its messages is answered, with the bot's mention removed from the text.
  Every other message is recorded in the channel's conversation as ``Name: text`` and not
  answered, so the bot knows what was said when it is asked (the name prefix also keeps such
  chatter from ever being read as a ``/command``).
- **Bots**, this one included, and system messages (joins, pins, …) are ignored.
- Each channel and each thread is its own chat: ``chat_id`` is the channel's (or thread's) id and
  ``update_id`` the message id, which the gateway deduplicates by.
- Attachments (images, files, voice messages) are the message's items
  (:mod:`gateway.platforms.discord_media`); :meth:`DiscordAdapter.fetch` downloads one from its
  URL, bounded to the byte limit.

Allowlists (``allowed_user_ids``, ``allowed_guild_ids``, ``allowed_channel_ids``): an empty list
allows everything; every non-empty list must match. A thread matches through its parent channel
too. A DM belongs to no server, so a server allowlist also turns DMs off (list the DM channel in
``allowed_channel_ids`` and leave the server list empty to serve one).

The privileged **Message Content** intent must be enabled for the bot in the Discord developer
portal (Bot → Privileged Gateway Intents); without it message text arrives empty and a client
asking for it is refused at connect.

Sharding: with ``shard_ids``/``shard_count`` set the client is an ``AutoShardedClient`` running
exactly those shards, so a large bot runs one process per shard range — every process with the
same ``shard_count`` and its own ``shard_ids`` (together covering ``0 … shard_count-1``), all on one
Redis. With neither set, one plain connection; with only ``shard_count``, all shards here.

Sending: rate limits (429 with ``retry_after``, per route and global) and 5xx answers are retried by
discord.py's HTTP layer itself. What reaches this module — a dropped connection, a timeout, a 5xx
that outlasted those retries — is retried per chunk under the one retry policy for final sends
(:mod:`gateway.platforms.retry`, for streamed replies too), with the same message nonce and
``enforce_nonce``, so Discord never posts a chunk twice even when the first attempt did arrive.
A message the intake cannot store is handled as on Telegram (:mod:`gateway.platforms.intake`).
A question the bot asks before running a tool carries an Approve and a Refuse button
(:class:`ApprovalButtons`); a press is acknowledged at once and handed to the intake as the presser's
``/approve <id>`` or ``/refuse <id>``.
Permanent refusals (403, 404, 400) are raised to the runner. Replies never ping anyone.
The client and its login (a wrong token, an unreachable API said in one line) are
:mod:`gateway.platforms.discord_client`'s; every retry's numbers are named policies in :mod:`agent.retrying`.
An answer discord.py cannot read is one line naming ``platforms.discord`` and what came back
(:mod:`gateway.platforms.discord_answers`): at login it stops the start; a post or an edit that
Discord took is not made again.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import io
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

import aiohttp
import discord

from agent.retrying import DISCORD_HAND_OVER, DISCORD_LOGIN, DISCORD_SEND, Sleep, retried
from gateway.delivery.edited import EditedReply
from gateway.media.download import download
from gateway.platforms.base import (
    ApprovalPrompt,
    IncomingMessage,
    Intake,
    Journal,
    MediaItem,
    OutgoingFile,
    PlatformAdapter,
    SendGate,
    Surface,
    approval_command,
    check_size,
)
from gateway.platforms.discord_answers import Answers, Reader, UnreadableDiscordAnswer, accepted
from gateway.platforms.discord_client import LOGIN_TIMEOUT, DiscordAdapterError, api_base, build_client, log_in
from gateway.platforms.discord_events import Allowlist, incoming_message
from gateway.platforms.discord_replies import NO_PINGS, REPLY_CHANNELS, DiscordMessenger, ReplyChannel, chunk_nonce
from gateway.platforms.discord_tokens import TOKEN_HINT, token_problem
from gateway.platforms.failure import Failure
from gateway.platforms.intake import Outcome, Source, hand_over
from gateway.platforms.retry import SendRetry
from gateway.platforms.split import split_message

if TYPE_CHECKING:
    from gateway.config import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")
#: How the intake's log lines name Discord and what it hands over.
DISCORD = Source("discord", "message", log)

#: Discord's limit for a message's content, in characters.
DISCORD_MESSAGE_LIMIT = 2000
#: The largest file a bot may attach without a boosted server (bytes).
DISCORD_UPLOAD_LIMIT = 10 * 1024 * 1024
#: Errors worth another attempt at the same chunk; anything else is a refusal.
TRANSIENT_SEND_ERRORS: tuple[type[BaseException], ...] = (
    discord.DiscordServerError,
    aiohttp.ClientError,
    asyncio.TimeoutError,
    OSError,
)


def is_transient(error: BaseException) -> bool:
    """Worth another attempt at the same chunk: a network failure, a 5xx discord.py gave up on, or an answer that
    cannot be read and was not a success (the nonce keeps a repeated post from showing twice)."""
    if isinstance(error, UnreadableDiscordAnswer):
        return not error.accepted
    return isinstance(error, TRANSIENT_SEND_ERRORS)


class ApprovalButtons(discord.ui.View):
    """A question's Approve and Refuse buttons (custom ids ``fga:<id>:y`` / ``:n``); a press goes to the adapter."""

    def __init__(self, adapter: DiscordAdapter, approval_id: str) -> None:
        super().__init__(timeout=None)
        for label, approved, style in (
            ("Approve", True, discord.ButtonStyle.success),
            ("Refuse", False, discord.ButtonStyle.secondary),
        ):
            button: discord.ui.Button[ApprovalButtons] = discord.ui.Button(
                label=label, style=style, custom_id=f"fga:{approval_id}:{'y' if approved else 'n'}"
            )
            button.callback = functools.partial(  # type: ignore[method-assign]
                adapter.pressed,
                approval_id=approval_id,
                approved=approved,
            )
            self.add_item(button)


class DiscordAdapter(PlatformAdapter):
    """The ``dc`` platform: a discord.py client feeding the gateway's intake and sending its replies."""

    platform = "dc"
    max_message_length = DISCORD_MESSAGE_LIMIT

    def __init__(
        self,
        token: str,
        *,
        allowlist: Allowlist = Allowlist(),
        shard_ids: Sequence[int] | None = None,
        shard_count: int | None = None,
        attempts: int = DISCORD_SEND.attempts,
        retry_delay: float = DISCORD_SEND.base,
        retry_sleep: Sleep = asyncio.sleep,
    ) -> None:
        """``attempts``: tries per reply chunk and per intake hand-over, ``retry_delay`` doubling between them
        (:data:`agent.retrying.DISCORD_SEND`, :data:`agent.retrying.DISCORD_HAND_OVER`); ``retry_sleep`` waits
        every retry's backoff, the login's too (a test's recorder)."""
        if not token:
            raise ValueError("a Discord bot token is required")
        if attempts < 1:
            raise ValueError("attempts must be at least 1")
        problem = token_problem(token)
        if problem:
            raise DiscordAdapterError(
                f"not a Discord bot token ({problem}) — {TOKEN_HINT}", setting="platforms.discord.token"
            )
        self.token = token
        self.allowlist = allowlist
        self.attempts = attempts
        self.retry_delay = retry_delay
        self.retry_sleep = retry_sleep
        #: The one retry policy for final sends, whole or streamed (discord.py waits out 429s itself).
        self.retry = SendRetry(
            log=log,
            transient=is_transient,
            policy=DISCORD_SEND.adjusted(attempts=attempts, base=retry_delay),
            sleep=retry_sleep,
        )
        #: How a received message is handed to the intake again when it could not be stored.
        self.hand_over = DISCORD_HAND_OVER.adjusted(attempts=attempts, base=retry_delay)
        #: The client's last REST answers, to say what came back when one cannot be read.
        self.answers = Answers()
        self.client = build_client(shard_ids=shard_ids, shard_count=shard_count, http_trace=self.answers.trace())
        self.reader = Reader(self.answers, token.strip(), api_base)
        self._intake: Intake | None = None
        #: The bot's account once a login succeeded; ``start`` logs in only when nothing did yet.
        self.me: discord.ClientUser | None = None
        self._connection: asyncio.Task[None] | None = None
        self._failure: Failure[DiscordAdapterError] = Failure(log, "discord")

        @self.client.event
        async def on_message(message: discord.Message) -> None:
            await self.handle(message)

    @classmethod
    def from_settings(cls, settings: Settings) -> DiscordAdapter:
        section = settings.platforms.discord
        return cls(
            section.token.get_secret_value() if section.token else "",
            allowlist=Allowlist.of(section.allowed_user_ids, section.allowed_guild_ids, section.allowed_channel_ids),
            shard_ids=section.shard_ids,
            shard_count=section.shard_count,
        )

    # ----------------------------------------------------------------- receiving

    def bind(self, intake: Intake) -> None:
        """Route received messages to ``intake`` (``start`` does this before connecting)."""
        self._intake = intake

    async def verify(self) -> None:
        """Log in over HTTP before :meth:`start`: ``foldgate run`` does this before it prints anything,
        so a wrong token or an unreachable API is the only line on the screen."""
        await self.login()

    async def start(self, intake: Intake) -> None:
        """Log in (unless :meth:`verify` did; a wrong token fails here, at start), then keep the gateway
        connection in the background."""
        self.bind(intake)
        self._failure.clear()
        if self.me is None:
            await self.login()
        self._connection = asyncio.create_task(self._connect(), name="discord-gateway")

    async def login(self, timeout: float = LOGIN_TIMEOUT, attempts: int = DISCORD_LOGIN.attempts) -> discord.ClientUser:
        """Log in over HTTP only (no gateway connection), as start and ``foldgate doctor`` do: an unreachable
        API is tried again up to ``attempts`` times (:data:`agent.retrying.DISCORD_LOGIN`) within ``timeout``
        seconds in all; a failure is a :class:`DiscordAdapterError` naming the setting to fix (see
        :func:`gateway.platforms.discord_client.log_in`). The caller closes the client (:meth:`stop`) either
        way."""
        policy = DISCORD_LOGIN.adjusted(attempts=attempts)
        self.me = await log_in(
            self.client, self.reader, self.token, timeout=timeout, policy=policy, sleep=self.retry_sleep
        )
        return self.me

    @property
    def failure(self) -> DiscordAdapterError | None:
        """Why the adapter stopped on its own; None while healthy."""
        return self._failure.error

    async def failed(self) -> DiscordAdapterError:
        """Wait until the adapter stops on its own, and say why (for the app to report and exit)."""
        return await self._failure.wait()

    async def _connect(self) -> None:
        try:
            await self.client.connect(reconnect=True)
        except discord.PrivilegedIntentsRequired:
            self._failure.record(
                DiscordAdapterError(
                    "Discord refused the connection: the Message Content intent is off — enable it for this bot in "
                    "the developer portal (Bot → Privileged Gateway Intents), then restart"
                )
            )
        except asyncio.CancelledError:
            raise
        except Exception as error:
            log.debug("discord: the gateway connection ended", exc_info=True)
            self._failure.record(
                DiscordAdapterError(
                    f"the Discord connection ended ({type(error).__name__}: {error}); this process no longer receives "
                    "Discord messages — check the network and restart"
                )
            )

    async def stop(self) -> None:
        await self.client.close()
        if self._connection is not None:
            self._connection.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._connection

    async def handle(self, message: discord.Message) -> IncomingMessage | None:
        """Convert one received message and hand it to the intake; returns what was handed over."""
        incoming = self.to_incoming(message)
        if incoming is None:
            return None
        if self._intake is None:
            raise RuntimeError("DiscordAdapter received a message before start()/bind()")
        intake = self._intake
        tries = 0

        async def attempt() -> Outcome:
            nonlocal tries
            tries += 1
            last = self.hand_over.exhausted(tries)
            # Discord does not deliver a gateway event twice: after the last attempt this message is lost to the bot
            handed = await hand_over(intake, incoming, DISCORD, then="giving it up" if last else "retrying")
            if not handed.acknowledged:
                assert handed.error is not None
                raise handed.error
            return handed.outcome

        outcome = await retried(self.hand_over, attempt, sleep=self.retry_sleep)
        return None if outcome is Outcome.SKIPPED else incoming

    def to_incoming(self, message: discord.Message) -> IncomingMessage | None:
        """The gateway's view of a Discord message, or None when the bot ignores it (see the module docstring)."""
        return incoming_message(message, self.client.user, platform=self.platform, allowlist=self.allowlist)

    async def pressed(self, interaction: discord.Interaction, approval_id: str, approved: bool) -> None:
        """A press of a question's button: acknowledged to Discord at once, then handed to the intake as the
        presser's ``/approve <id>`` or ``/refuse <id>`` (the question is edited once the turn took it)."""
        with contextlib.suppress(discord.HTTPException):
            await interaction.response.defer()
        channel = interaction.channel_id
        user = interaction.user
        if channel is None or self._intake is None:  # only the person asked may answer: the store checks who it is
            return
        incoming = IncomingMessage(
            platform=self.platform,
            chat_id=str(channel),
            user_id=str(user.id),
            user_name=user.display_name,
            update_id=str(interaction.id),
            text=approval_command(approval_id, approved),
        )
        await hand_over(self._intake, incoming, DISCORD, then="giving it up")

    # ----------------------------------------------------------------- sending

    async def ask_approval(self, chat_id: str, prompt: ApprovalPrompt, *, reply_to: str | None = None) -> str | None:
        """The question with an Approve and a Refuse button; the message's id, to edit it once answered."""
        view = ApprovalButtons(self, prompt.approval_id)
        ask = functools.partial(self._channel(chat_id).send, prompt.question, view=view, allowed_mentions=NO_PINGS)
        try:
            sent = await self.retry.run(functools.partial(self._read, chat_id, ask), f"dc:{chat_id}: asking")
        except UnreadableDiscordAnswer as error:
            if not accepted(log, error, f"dc:{chat_id}: asking"):
                raise
            return error.message_id or None  # without it, the outcome comes as a message of its own
        return str(sent.id)

    async def settle_approval(self, chat_id: str, message_id: str | None, prompt: ApprovalPrompt, outcome: str) -> None:
        """The question edited to say what was decided, its buttons gone."""
        if message_id is None:
            await super().settle_approval(chat_id, message_id, prompt, outcome)
            return
        message = self._channel(chat_id).get_partial_message(int(message_id))
        edit = functools.partial(message.edit, content=f"{prompt.question}\n→ {outcome}", view=None)
        await self._taken(chat_id, edit, f"dc:{chat_id}: settling a question")

    def _channel(self, chat_id: str) -> ReplyChannel:
        """The cached channel or thread, else a handle by id: sending needs no lookup request."""
        channel_id = int(chat_id)
        channel = self.client.get_channel(channel_id)
        if isinstance(channel, REPLY_CHANNELS):
            return channel
        return self.client.get_partial_messageable(channel_id)

    async def send(self, chat_id: str, text: str, *, reply_to: str | None = None) -> None:
        """Send ``text`` as consecutive messages of at most 2,000 characters; the first answers ``reply_to``."""
        channel = self._channel(chat_id)
        anchor = f"{chat_id}:{reply_to}" if reply_to else uuid.uuid4().hex
        for index, chunk in enumerate(split_message(text, self.max_message_length, units="chars")):
            reference = None
            if index == 0 and reply_to:
                reference = discord.MessageReference(
                    message_id=int(reply_to), channel_id=int(chat_id), fail_if_not_exists=False
                )
            nonce = chunk_nonce(anchor, index, chunk)
            await self._taken(
                chat_id,
                functools.partial(channel.send, chunk, nonce=nonce, reference=reference, allowed_mentions=NO_PINGS),
                f"dc:{chat_id}: sending",
            )

    async def send_file(self, chat_id: str, file: OutgoingFile, *, reply_to: str | None = None) -> None:
        """The file as an attachment (an image shows inline); one over what a bot may upload is named instead."""
        if len(file.data) > DISCORD_UPLOAD_LIMIT:
            await self.send(
                chat_id,
                f"[{file.kind}: {file.name}, {len(file.data):,} bytes: more than Discord takes from a bot]",
                reply_to=reply_to,
            )
            return
        channel = self._channel(chat_id)
        anchor = f"{chat_id}:{reply_to}:file" if reply_to else uuid.uuid4().hex
        nonce = chunk_nonce(anchor, 0, hashlib.sha256(file.data).hexdigest())  # the same bytes, the same post

        async def post() -> None:  # a file object is read once: a retry sends a new one
            await channel.send(
                file=discord.File(io.BytesIO(file.data), filename=file.name or file.kind),
                nonce=nonce,
                allowed_mentions=NO_PINGS,
            )

        await self._taken(chat_id, post, f"dc:{chat_id}: sending a file")

    async def _read(self, chat_id: str, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``, a REST call in ``chat_id``, whose answer discord.py cannot read is said so (see
        :mod:`gateway.platforms.discord_answers`)."""
        return await self.reader.read(call, where=f"/channels/{chat_id}/")

    async def _taken(self, chat_id: str, call: Callable[[], Awaitable[object]], what: str) -> None:
        """``call()`` under the retry policy for final sends; one Discord took although its answer cannot be read
        is done (and not made again)."""
        try:
            await self.retry.run(functools.partial(self._read, chat_id, call), what)
        except UnreadableDiscordAnswer as error:
            if not accepted(log, error, what):
                raise

    def reply_surface(
        self, chat_id: str, gate: SendGate, *, reply_to: str | None = None, journal: Journal | None = None
    ) -> Surface:
        """A reply as one message sent early and edited as text arrives, continued past 2,000 characters;
        the first message answers ``reply_to``, and every post carries a nonce, so a repeated one is not
        posted twice."""
        reference = None
        if reply_to:
            reference = discord.MessageReference(
                message_id=int(reply_to), channel_id=int(chat_id), fail_if_not_exists=False
            )
        anchor = f"{chat_id}:{reply_to}" if reply_to else uuid.uuid4().hex
        messenger = DiscordMessenger(self._channel(chat_id), anchor, reference, reader=self.reader)
        return EditedReply(
            messenger,
            gate,
            limit=self.max_message_length,
            units="chars",
            retry=self.retry,
            what=f"dc:{chat_id}: a message",
            journal=journal,
        )

    async def fetch(self, item: MediaItem, limit: int) -> bytes:
        """An attachment's bytes from its URL, at most ``limit``: refused before downloading when Discord
        reported more, cut off when more arrive."""
        check_size(item, limit)
        return await download(item.file_id, limit=limit, name=item.name or item.kind)

    async def typing(self, chat_id: str) -> None:
        """Show "typing…" in the channel (Discord shows it for about ten seconds); failures do not matter."""
        with contextlib.suppress(Exception):
            await self._channel(chat_id).typing()
