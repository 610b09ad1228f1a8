"""GatewayRunner: intake → per-chat inbox → one worker per chat across processes, draining it turn by turn.

Several gateway processes may share one Redis. Each chat is worked on by one worker at a
time, whichever process takes the chat's lock; the lock is kept alive while the turn runs
and every write is fenced by it, so a worker that stalls past its lock cannot overwrite
what the next worker committed.

The runner dispatches chats and drains each chat's inbox: it hands every entry, raw, to the
turn (:mod:`gateway.worker.held_chat`), which runs it to its end — commit, delivery, the entry
finished (exactly-once replies: see :mod:`gateway.worker.turn`) — and hands back the next entry.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping

from agent.cancelling import cancel_and_wait
from agent.context_engine import ContextEngine
from agent.messages import Message
from agent.settings import CompressionSettings
from agent.tools.mcp import McpTools
from gateway.access.rates import MessageRate
from gateway.access.roles import Roles, person_of
from gateway.agents import AgentBuilder
from gateway.commands import ANSWERS
from gateway.commands import parse as parse_command
from gateway.config.access import AccessSettings
from gateway.config.models import MediaSettings
from gateway.config.tools import ToolsSettings
from gateway.delivery.replies import Replies
from gateway.events import EventBus, Trigger
from gateway.media.message import ItemIntake
from gateway.media.transcribe import transcriber_from
from gateway.outage import Backoff, ChatOutages, Health, ProviderWatch, RetryLater, is_redis_outage
from gateway.platforms.base import IncomingMessage, OpenGate, PlatformAdapter, SendGate
from gateway.store import SessionStore, StaleLock
from gateway.store.access import AccessLists
from gateway.store.approvals import Approvals
from gateway.store.buckets import TokenBuckets
from gateway.store.inbox import Inbox
from gateway.store.locks import Lock
from gateway.store.media import MediaStore
from gateway.store.spend import SpendStore
from gateway.store.taken import TakenRecords
from gateway.store.told import ToldOnce
from gateway.worker.chat_turn import ChatTurn
from gateway.worker.compactions import Compactions
from gateway.worker.held_chat import HeldChat
from gateway.worker.lock_keeper import LockKeeper
from gateway.worker.long_messages import MessageBound
from gateway.worker.turn import TurnOptions, TurnParts

log = logging.getLogger(__name__)

#: Commands a person's rate limit never holds back: stopping a reply, answering a question the bot asked.
UNLIMITED = ANSWERS | {"stop"}

#: Seconds before a chat whose worker stopped early is handed out again (and before a failed entry's retry).
RETRY_DELAY_SECONDS = 1.0
#: How long a chat whose lock could not be taken (an unexpected error, not Redis away) waits to be tried again.
CLAIM_RETRY_SECONDS = 5.0


class GatewayRunner:
    """Runs the gateway's workers in this process."""

    def __init__(
        self,
        store: SessionStore,
        inbox: Inbox,
        agents: AgentBuilder,
        *,
        adapters: Mapping[str, PlatformAdapter],
        compression: CompressionSettings | None = None,
        events: EventBus | None = None,
        lock_ttl_seconds: float = 60.0,
        max_concurrent_chats: int = 64,
        poll_interval: float = 0.05,
        cache_ttl: str = "5m",
        stream_replies: bool = True,
        gates: Callable[[IncomingMessage], SendGate] | None = None,
        coalesce_backlog: bool = False,
        coalesce_max_messages: int = 5_000,
        coalesce_max_tokens: int = 20_000,
        max_message_tokens: int = 16_000,
        outage_retry_seconds: float = 900.0,
        media: MediaSettings | None = None,
        tools: ToolsSettings | None = None,
        access: AccessSettings | None = None,
    ) -> None:
        self.store = store
        self.inbox = inbox
        self.agents = agents
        self.adapters = dict(adapters)
        self.events = events or EventBus()
        self.lock_ttl = lock_ttl_seconds
        self.poll_interval = poll_interval
        self.options = TurnOptions(
            stream_replies=stream_replies,
            coalesce_backlog=coalesce_backlog,
            coalesce_max_messages=coalesce_max_messages,
            coalesce_max_tokens=coalesce_max_tokens,
            cache_ttl=cache_ttl,
        )
        self.worker_id = uuid.uuid4().hex[:8]
        self.started_at = time.time()
        self.redis_health = Health("Redis")
        #: Chats whose lock a Redis outage kept this process from releasing: released when Redis answers again.
        self._owed_releases: dict[str, tuple[Lock, float]] = {}
        self.keeper = LockKeeper(store, inbox, lock_ttl_seconds, self.redis_health)
        self.compactions = Compactions(store, self.events, compression or CompressionSettings())
        #: A message that failed because the provider is away is tried again for this long
        #: (``gateway.outage_retry_seconds``).
        self.provider = ProviderWatch(ChatOutages(store.channel, store.prefix, outage_retry_seconds))
        self.media = media or MediaSettings()
        #: Every chat's photos, documents and voice, by content hash (``media.max_bytes``,
        #: ``media.max_total_bytes``).
        self.media_store = MediaStore(
            store.redis,
            store.prefix,
            max_bytes=self.media.max_bytes,
            max_total_bytes=self.media.max_total_bytes,
            channel=store.channel,
        )
        #: Replies and the files a turn made, paced by their chat's send budget (every process shares it; open
        #: by default).
        self.replies = Replies(
            store, self.adapters, gates or (lambda message: OpenGate()), self.redis_health, self.media_store
        )
        #: Voice and audio to text (``media.transcription``); None when it is off.
        self.transcriber = transcriber_from(self.media.transcription, self.agents.windows.book)
        items = ItemIntake(
            self.media_store,
            self.media,
            self.transcriber,
            {name: adapter.fetch for name, adapter in self.adapters.items()},
            records=TakenRecords(store.channel, store.prefix, ttl_seconds=int(outage_retry_seconds) + 3600),
        )
        settings_access = access or AccessSettings()
        #: Who the bot answers: admins, allowed and blocked people (the file's lists and the admins' changes).
        self.roles = Roles(settings_access, AccessLists(store.channel, store.prefix))
        #: How fast one person may have messages answered (``access.messages_per_minute``; None: no limit).
        self.rate = (
            MessageRate(TokenBuckets(store.channel, store.prefix), settings_access.messages_per_minute, self.roles)
            if settings_access.messages_per_minute
            else None
        )
        #: What each person and chat spent, against ``access.budgets``.
        self.spending = SpendStore(store.channel, store.prefix)
        self.budgets = settings_access.budgets
        #: Tool calls waiting for a person's yes or no (``ask``), answered through any process's intake.
        self.approvals = Approvals(store.channel, store.prefix)
        #: The MCP servers the agent may use (``tools``): one session each in this process, opened at first use.
        self.tool_settings = tools or ToolsSettings()
        self.mcp = McpTools(self.tool_settings.specs(os.environ)) if self.tool_settings.mcp_servers else None
        self._turn_parts = TurnParts(
            store=store,
            inbox=inbox,
            agents=agents,
            events=self.events,
            command_host=self,
            adapters=self.adapters,
            replies=self.replies,
            #: One message's bound (``gateway.max_message_tokens``): a longer one reaches the model as an excerpt.
            bound=MessageBound(store, max_message_tokens, agents.context_length, items),
            items=items,
            max_images=self.media.max_images_per_request,
            compactions=self.compactions,
            provider=self.provider,
            options=self.options,
            mcp=self.mcp,
            tool_access=self.tool_settings,
            approvals=self.approvals,
            spending=self.spending,
            budgets=self.budgets,
            told=ToldOnce(store.channel, store.prefix),
        )
        self._max_chats = max_concurrent_chats
        self._busy: dict[str, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()
        self._saturated = False
        self._dispatcher: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def cache_ttl(self) -> str:
        """The prompt cache's lifetime the turns are priced at (``prompt_caching.cache_ttl``)."""
        return self.options.cache_ttl

    @property
    def coalesce_backlog(self) -> bool:
        return self.options.coalesce_backlog

    @property
    def coalesce_max_messages(self) -> int:
        return self.options.coalesce_max_messages

    # ----------------------------------------------------------------- lifecycle

    async def intake(self, message: IncomingMessage) -> bool:
        """Make an incoming message durable; returns once it is safe to acknowledge the platform.

        A ``/stop`` is also signalled at once, so the chat's running turn ends without waiting for
        the command's own turn in the inbox.
        """
        if message.respond and not await self.roles.answers(message):
            message = message.model_copy(update={"respond": False})  # blocked, or not allowed: kept, not answered
        command = parse_command(message.text.strip()) if message.respond else None
        if command is not None and command[0] == "stop":
            await self.inbox.request_stop(message.chat, time.time())
        if command is not None and command[0] in ANSWERS and await self._answered(message, *command):
            return True  # the turn waiting for it goes on; there is nothing to queue
        if (
            message.respond
            and (command is None or command[0] not in UNLIMITED)
            and self.rate is not None
            and not await self.rate.admits(message)
        ):  # a /stop or an answer is never held back
            message = message.model_copy(update={"respond": False, "limited": True})  # too fast: kept, told once
        queued = await self.inbox.put(message)
        self._wake.set()
        return queued

    async def _answered(self, message: IncomingMessage, name: str, argument: str) -> bool:
        """Record ``/approve <id>`` or ``/refuse <id>`` (a button press comes as one) for the turn that waits for
        it, in whichever process; False when it answers nothing open that its sender may answer (the command
        then says so in its turn)."""
        approval_id = argument.split()[0] if argument else ""
        try:
            answered = await self.approvals.answer(
                message.chat,
                approval_id,
                approved=name == "approve",
                user_id=message.user_id,
                user_name=message.user_name,
                admin=self.roles.is_admin(person_of(message)),
            )
        except ValueError:  # not an id at all
            return False
        return answered == "recorded"

    async def start(self) -> None:
        self._stopping = False
        self._dispatcher = asyncio.create_task(self._dispatch(), name=f"dispatch-{self.worker_id}")

    @property
    def busy_chats(self) -> int:
        """How many chats this process is answering now (each has a message in its inbox until answered)."""
        return len(self._busy)

    async def stop(self, *, grace_seconds: float = 10.0, cut_short: asyncio.Event | None = None) -> int:
        """Stop taking chats; let running turns finish for up to ``grace_seconds`` (less once ``cut_short``
        is set), then cancel them; returns how many were cancelled. A cancelled turn committed nothing:
        its message stays in the inbox and is answered on the next start, here or by another process."""
        self._stopping = True
        if self._dispatcher:
            self._dispatcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._dispatcher
        running = list(self._busy.values())
        if running and grace_seconds > 0:
            waits: list[asyncio.Future[object]] = [asyncio.ensure_future(asyncio.wait(running))]
            if cut_short is not None:
                waits.append(asyncio.ensure_future(cut_short.wait()))
            try:
                await asyncio.wait(waits, timeout=grace_seconds, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for wait in waits:
                    wait.cancel()
        pending = [task for task in running if not task.done()]
        await cancel_and_wait(*pending)
        try:
            await self.keeper.close()
            if self.transcriber is not None:
                await self.transcriber.aclose()
        finally:
            if self.mcp is not None:
                await self.mcp.aclose()  # a stdio server's process ends with its session
        return len(pending)

    async def wait_idle(self, timeout: float = 120.0) -> None:
        """Wait until no chat has pending entries and no turn runs here (for replays and tests)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._busy and not await self.inbox.marked():
                return
            await asyncio.sleep(self.poll_interval)
        raise TimeoutError(f"gateway still busy after {timeout}s")

    # ----------------------------------------------------------------- dispatch

    async def _dispatch(self) -> None:
        backoff = Backoff()
        while not self._stopping:
            wait = self.poll_interval
            try:
                await self._settle_releases()
                free = self._max_chats - len(self._busy)
                chats = await self.inbox.ready_chats(free + len(self._busy)) if free > 0 else []
                # More chats wait than slots are free: wake up as soon as a slot frees.
                self._saturated = free <= 0 or len([c for c in chats if c not in self._busy]) > free
                for chat in chats:
                    if chat in self._busy or len(self._busy) >= self._max_chats:
                        continue
                    task = asyncio.create_task(self._drain(chat), name=f"chat-{chat}")
                    self._busy[chat] = task
                    task.add_done_callback(functools.partial(self._slot_freed, chat))
                if self.redis_health.down:
                    self.redis_health.answered(await self.inbox.marked())
                backoff.reset()
            except Exception as error:
                # Redis away (or any failing pass): one line when it starts, then a growing wait, no traceback
                # each time.
                self.redis_health.failed(error)
                log.debug("dispatcher pass failed", exc_info=True)
                wait = backoff.next()
            self._wake.clear()
            if backoff.current:
                await asyncio.sleep(wait)  # intake wakes us at once, but nothing can be handed out yet
                continue
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)

    def _slot_freed(self, chat: str, _task: asyncio.Task[None]) -> None:
        """The chat's drain ended, however it ended: its slot goes to the next chat that waits."""
        self._busy.pop(chat, None)

    async def _drain(self, chat: str) -> None:
        """Take the chat's lock and handle its inbox in order until it is empty."""
        try:
            lock, head = await self.store.claim(chat, self.lock_ttl)
            if lock is None:
                return  # another worker has this chat
            await self.inbox.lease(chat, self.lock_ttl)
        except Exception as error:  # the chat stays marked; it is handed out again
            if is_redis_outage(error):
                self.redis_health.failed(error)  # logged once for the whole outage
                return
            log.exception("%s: could not take the chat; trying again in %gs", chat, CLAIM_RETRY_SECONDS)
            with contextlib.suppress(Exception):
                await self.inbox.lease(chat, CLAIM_RETRY_SECONDS)
            return
        me = asyncio.current_task()
        assert me is not None
        self.keeper.hold(lock, me)
        held = HeldChat(self._turn_parts, chat, lock, retry_delay=RETRY_DELAY_SECONDS)
        released = False
        retry_in = RETRY_DELAY_SECONDS
        try:
            while not self._stopping:
                if head is None:
                    # Unmark first, then release only if nothing arrived meanwhile: an entry pushed
                    # after the release re-marks the chat itself (the intake marks after pushing).
                    await self.inbox.unmark(chat)
                    head = await self.store.release_if_idle(lock)
                    if head is None:
                        released = True
                        break
                    await self.inbox.lease(chat, self.lock_ttl)  # still ours: stay marked in case we die
                head = await held.take(head)
        except StaleLock:
            log.warning("%s: lock expired under worker %s; another worker continues", chat, self.worker_id)
        except asyncio.CancelledError:
            if self._stopping:
                raise
        except RetryLater as later:
            retry_in = later.delay  # the head entry waits for the provider; the slot is free for other chats meanwhile
        except Exception as error:
            if is_redis_outage(error):
                self.redis_health.failed(error)  # logged once for the whole outage; the entry stays in the inbox
            else:
                log.exception("%s: worker failed; the entry stays in the inbox", chat)
        finally:
            self.keeper.let_go(lock)
            if not released:  # entries may remain: free the chat and make it due again shortly
                try:
                    await self._release(chat, lock, retry_in)
                except Exception:  # Redis away: released as soon as it answers, not when the lock expires
                    self._owed_releases[chat] = (lock, retry_in)
            if self._saturated:
                self._wake.set()  # a slot is free and chats are waiting: look again now

    async def _release(self, chat: str, lock: Lock, retry_in: float) -> None:
        """Free the chat and make it due again in ``retry_in`` seconds."""
        await self.store.release_lock(lock)
        await self.inbox.lease(chat, retry_in)

    async def _settle_releases(self) -> None:
        """Give back the locks a Redis outage kept this process from releasing. Redis keeps them across a
        restart, so without this each such chat would wait out its whole lock (15 s) once Redis is back; the
        lock's token makes a late release of a lock another worker has since taken a no-op."""
        for chat, (lock, retry_in) in list(self._owed_releases.items()):
            if chat in self._busy:  # taken again here meanwhile: that turn's own lock is what counts now
                del self._owed_releases[chat]
                continue
            await self._release(chat, lock, retry_in)
            del self._owed_releases[chat]

    # ----------------------------------------------------------------- what commands use

    async def compact(
        self,
        turn: ChatTurn,
        engine: ContextEngine,
        *,
        trigger: Trigger,
        force: bool,
        focus: str | None = None,
        tokens: int | None = None,
        messages: list[Message] | None = None,
    ) -> list[Message] | None:
        """Compact the chat's session now and commit it (``/compress``); see :meth:`Compactions.compact`."""
        return await self.compactions.compact(
            turn, engine, trigger=trigger, force=force, focus=focus, tokens=tokens, messages=messages
        )
