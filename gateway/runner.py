"""GatewayRunner: intake → per-chat inbox → one worker per chat across processes → hygiene → turn → commit → reply.

Several gateway processes may share one Redis. Each chat is worked on by one worker at a
time, whichever process takes the chat's lock; the lock is kept alive while the turn runs
and every write is fenced by it, so a worker that stalls past its lock cannot overwrite
what the next worker committed (B2).

Exactly-once replies: a turn's messages and its reply text are committed together with
the inbox entry's id (``last_entry_id``); after the reply is sent, ``replied_entry_id`` is
recorded, then the entry leaves the inbox. A worker that finds the head entry already
committed only (re)sends the recorded reply. The one window in which a reply can go out
twice is between the platform accepting it and ``replied_entry_id`` being written — one
Redis round trip.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from agent.cancelling import cancel_and_wait
from agent.context_engine import ContextEngine
from agent.llm.errors import plain_reason
from agent.loop import Agent, TurnFailed
from agent.messages import Message
from agent.pricing import UnknownPrice, cost, savings
from agent.settings import CompressionSettings
from agent.tokens import count_message, count_text
from agent.tools import ToolRegistry, recovery_tools
from agent.transcript_repair import repair_for_turn
from gateway import hygiene, long_messages
from gateway.commands import handle_command
from gateway.commands import parse as parse_command
from gateway.events import CompressEvent, EventBus, TurnEvent
from gateway.inbox import Inbox
from gateway.lock_keeper import LockKeeper
from gateway.outage import (Backoff, ChatOutages, Health, ProviderDown, RetryLater, counts_as_down, final_notice,
                             is_redis_outage, waiting_notice)
from gateway.delivery.journal import ReplyJournal
from gateway.delivery.stream import ReplyStream, TurnWatch
from gateway.platforms.base import IncomingMessage, OpenGate, PlatformAdapter, SendGate
from gateway.session_source import ChatHistory
from gateway.startup_errors import explain
from gateway.store import Lock, SessionStore, StaleLock
from gateway.turn import ChatTurn

log = logging.getLogger(__name__)

#: Failed attempts at one inbox entry before it is answered with an error and let go.
MAX_ENTRY_ATTEMPTS = 3
#: Seconds before a chat whose worker stopped early is handed out again.
RETRY_DELAY_SECONDS = 1.0
#: Attempts at delivering one reply before it is given up (the platform refuses it for good).
SEND_ATTEMPTS = 3
#: How long a chat whose lock could not be taken (an unexpected error, not Redis away) waits to be tried again.
CLAIM_RETRY_SECONDS = 5.0


class AgentFactory(Protocol):
    """Builds what a turn needs for a chat's session (``gateway.agents.AgentBuilder``)."""

    default_model: str

    def context_length(self, model: str) -> int: ...

    def build_engine(self, model: str, state: Mapping[str, object], history: ChatHistory) -> ContextEngine: ...

    def build_agent(self, engine: ContextEngine, model: str, tools: ToolRegistry) -> Agent: ...


@dataclass(frozen=True)
class Outcome:
    """How an entry ended: the session it ended in, the reply to send (if any), and whether that
    reply belongs to a committed turn (so sending it is recorded in the session meta)."""

    session_id: str
    reply: str | None
    committed: bool
    #: Where the reply streamed while the turn ran; it delivers the final text too.
    stream: ReplyStream | None = None
    #: Entries after this one that the turn took in too (a coalesced backlog): ``(raw, entry id)``, in order.
    batch: tuple[tuple[str, str], ...] = ()
    #: True for an entry an earlier turn already took in: removed without a reply of its own.
    silent: bool = False


class GatewayRunner:
    """Runs the gateway's workers in this process."""

    def __init__(
        self,
        store: SessionStore,
        inbox: Inbox,
        agents: AgentFactory,
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
        coalesce_max_messages: int = 500,
        coalesce_max_tokens: int = 20_000,
        max_message_tokens: int = 16_000,
        outage_retry_seconds: float = 900.0,
    ) -> None:
        self.store = store
        self.inbox = inbox
        self.agents = agents
        self.adapters = dict(adapters)
        self.compression = compression or CompressionSettings()
        self.events = events or EventBus()
        self.lock_ttl = lock_ttl_seconds
        self.cache_ttl = cache_ttl
        self.poll_interval = poll_interval
        self.stream_replies = stream_replies
        #: Messages already waiting when a turn starts join it (``gateway.coalesce_backlog``).
        self.coalesce_backlog = coalesce_backlog
        self.coalesce_max_messages = coalesce_max_messages
        self.coalesce_max_tokens = coalesce_max_tokens
        #: One message's bound (``gateway.max_message_tokens``): a longer one reaches the model as an excerpt.
        self.max_message_tokens = max_message_tokens
        #: The send budget of a reply's chat (every process shares it); open by default.
        self.gates = gates or (lambda message: OpenGate())
        self.worker_id = uuid.uuid4().hex[:8]
        self._slots = asyncio.Semaphore(max_concurrent_chats)
        self._max_chats = max_concurrent_chats
        self._busy: dict[str, asyncio.Task[None]] = {}
        self._attempts: dict[str, int] = {}
        #: The reply stream of the turn each chat is running, so a failed turn's previews are stopped.
        self._streams: dict[str, ReplyStream] = {}
        self._wake = asyncio.Event()
        self._saturated = False
        self._dispatcher: asyncio.Task[None] | None = None
        self._stopping = False
        self.started_at = time.time()
        #: A message that failed because the provider is away is tried again for this long (``gateway.outage_retry_seconds``).
        self.outages = ChatOutages(store.channel, store.prefix, outage_retry_seconds)
        self.provider_health = Health("the model provider")
        self.redis_health = Health("Redis")
        self.keeper = LockKeeper(store, inbox, lock_ttl_seconds, self.redis_health)
        #: Chats this process saw waiting for the provider (their outage record is cleared when answered).
        self._down_chats: set[str] = set()

    # ----------------------------------------------------------------- lifecycle

    async def intake(self, message: IncomingMessage) -> bool:
        """Make an incoming message durable; returns once it is safe to acknowledge the platform.

        A ``/stop`` is also signalled at once, so the chat's running turn ends without waiting for
        the command's own turn in the inbox.
        """
        command = parse_command(message.text.strip()) if message.respond else None
        if command is not None and command[0] == "stop":
            await self.inbox.request_stop(message.chat, time.time())
        queued = await self.inbox.put(message)
        self._wake.set()
        return queued

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
        await self.keeper.close()
        return len(pending)

    async def wait_idle(self, timeout: float = 30.0) -> None:
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
                free = self._max_chats - len(self._busy)
                chats = await self.inbox.ready_chats(free + len(self._busy)) if free > 0 else []
                # More chats wait than slots are free: wake up as soon as a slot frees.
                self._saturated = free <= 0 or len([c for c in chats if c not in self._busy]) > free
                for chat in chats:
                    if chat in self._busy or len(self._busy) >= self._max_chats:
                        continue
                    task = asyncio.create_task(self._drain(chat), name=f"chat-{chat}")
                    self._busy[chat] = task
                    task.add_done_callback(lambda _t, c=chat: self._busy.pop(c, None))
                if self.redis_health.down:
                    self.redis_health.answered(await self.inbox.marked())
                backoff.reset()
            except Exception as error:
                # Redis away (or any failing pass): one line when it starts, then a growing wait, no traceback each time.
                self.redis_health.failed(error)
                log.debug("dispatcher pass failed", exc_info=True)
                wait = backoff.next()
            self._wake.clear()
            if backoff.current:
                await asyncio.sleep(wait)  # intake wakes us at once, but nothing can be handed out yet
                continue
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)

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
                head = await self._handle_entry(chat, lock, head)
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
            for key in [key for key in self._attempts if key.startswith(f"{chat}|")]:
                del self._attempts[key]  # counts are per holding of the lock; never kept past it
            if not released:  # entries may remain: free the chat and make it due again shortly
                with contextlib.suppress(Exception):
                    await self.store.release_lock(lock)
                    await self.inbox.lease(chat, retry_in)
            if self._saturated:
                self._wake.set()  # a slot is free and chats are waiting: look again now

    # ----------------------------------------------------------------- one entry

    async def _handle_entry(self, chat: str, lock: Lock, raw: str) -> str | None:
        """Handle one inbox entry; returns the next entry (the same one again to retry it)."""
        try:
            message = IncomingMessage.model_validate_json(raw)
        except ValueError:
            log.error("%s: unreadable inbox entry moved to quarantine: %.200r", chat, raw)
            await self.inbox.drop_bad(chat, raw)
            return await self.inbox.head(chat)
        attempts_key = f"{chat}|{message.update_id}"
        try:
            outcome = await self._handle(chat, lock, message)
        except BaseException as error:
            unfinished = self._streams.pop(chat, None)
            if unfinished is not None:
                unfinished.abandon()  # its previews stop; a retry streams anew
            if isinstance(error, (StaleLock, asyncio.CancelledError)) or not isinstance(error, Exception):
                raise
            if is_redis_outage(error):
                raise  # the worker lets the chat go; it is handed out again once Redis answers
            if isinstance(error, ProviderDown):  # not the entry's fault: no attempt counted
                outcome = await self._provider_down(chat, lock, message, error)  # RetryLater until the bound runs out
            else:
                attempts = self._attempts.get(attempts_key, 0) + 1
                self._attempts[attempts_key] = attempts
                log.exception("%s: handling update %s failed (attempt %d)", chat, message.update_id, attempts)
                if attempts < MAX_ENTRY_ATTEMPTS:
                    await asyncio.sleep(RETRY_DELAY_SECONDS * 2 ** (attempts - 1))  # the keeper holds the lock meanwhile
                    return raw
                outcome = await self._give_up(chat, lock, message, error)
        self._streams.pop(chat, None)
        self._attempts.pop(attempts_key, None)
        if outcome.reply is not None:
            # A whole reply (a command's, a give-up notice) goes through the reply's journal too, as its resend
            # after a crash does: each chunk is recorded as the platform accepts it, so no retry posts it again.
            stream = outcome.stream or self._reply_stream(message, lock, previews=False)
            self._streams.pop(chat, None)
            await self._deliver(message, outcome.reply, stream)
        # Recording the reply as sent and removing the entry are one fenced step; a crash between
        # the send above and this step is the one window in which a reply can go out twice.
        if outcome.batch:
            # The batch's last entry carries the reply: it is marked first, then the others leave silently
            # (a crash in between leaves them to be removed as already taken in).
            last_raw, last_id = outcome.batch[-1]
            head = await self.store.finish_entry(lock, outcome.session_id, last_raw, replied_entry_id=last_id)
            for other in (raw, *(entry for entry, _ in outcome.batch[:-1])):
                head = await self.store.finish_entry(lock, outcome.session_id, other)
            return head
        marker = ({"replied_entry_id": f"{message.platform}:{message.update_id}"}
                  if outcome.committed and not outcome.silent else {})
        return await self.store.finish_entry(lock, outcome.session_id, raw, **marker)

    async def _give_up(self, chat: str, lock: Lock, message: IncomingMessage, error: Exception) -> "Outcome":
        """After repeated failures: keep the person's message in the session and tell them.

        If even that fails (the session cannot be read, the message cannot be stored), the entry is
        let go with the error logged, so one poisoned entry never blocks the chat behind it. Only a
        lost lock propagates: the chat is another worker's then.
        """
        entry_id = f"{message.platform}:{message.update_id}"
        reply = f"⚠️ I could not process that message ({type(error).__name__}). It is saved in our conversation; please try again."
        sid = ""
        try:
            sid, meta, _ = await self.store.snapshot(chat, messages=False)
            if meta.last_entry_id != entry_id:
                stored = await self._stored_form(ChatTurn(self, chat, message, lock, sid, meta), [message])
                await self.store.append(chat, sid, stored, lock=lock,
                                        meta={"last_entry_id": entry_id, "last_reply": reply})
        except StaleLock:
            raise
        except Exception:
            log.exception("%s: update %s could not be stored either; letting it go", chat, message.update_id)
            if not sid:  # the snapshot itself failed: the entry still leaves through the chat's pointer
                with contextlib.suppress(Exception):
                    sid = await self.store.stored_session(chat) or ""
            return Outcome(sid, None, committed=False)
        return Outcome(sid, reply, committed=True)

    @staticmethod
    def _user_message(message: IncomingMessage) -> Message:
        return {"role": "user", "content": message.text, "_ts": message.ts}

    def _message_limit(self, model: str) -> int:
        """The longest message, in tokens, ``model`` gets whole in this gateway."""
        return long_messages.token_limit(self.max_message_tokens, self.agents.context_length(model))

    async def _stored_form(self, turn: ChatTurn, messages: list[IncomingMessage]) -> list[Message]:
        """The messages as a turn that stores them unanswered keeps them: bounded like any turn's."""
        limit = self._message_limit(turn.meta.model or self.agents.default_model)
        return [await self._bounded(turn, message, limit, []) for message in messages]

    async def _bounded(self, turn: ChatTurn, message: IncomingMessage, limit: int, notes: list[str]) -> Message:
        """The person's message as the session keeps it: whole, or when over ``limit`` tokens an excerpt
        naming the original, which is stored whole in the archive first (nothing is lost, and a message
        over the window never reaches the provider). What the person is told goes to ``notes``."""
        user_message = self._user_message(message)
        tokens = long_messages.tokens_over(message.text, limit)
        if tokens is None:
            return user_message
        original_id = await self.store.archive_original(
            turn.chat, turn.session_id, user_message, lock=turn.lock, entry_id=f"{message.platform}:{message.update_id}")
        log.info("%s: update %s is %d tokens, over the bound of %d: archived whole as message %s; the model gets "
                 "its head and tail", turn.chat, message.update_id, tokens, limit, original_id)
        notes.append(long_messages.notice(tokens, limit))
        return {**user_message, "content": long_messages.excerpt(message.text, tokens, limit, original_id),
                "_orig_id": original_id}

    async def _handle(self, chat: str, lock: Lock, message: IncomingMessage) -> "Outcome":
        started = time.perf_counter()
        handling_since = time.time()  # a /stop from now on is this turn's, even one sent during a compaction first
        is_turn = message.respond and parse_command(message.text.strip()) is None
        sid, meta, history = await self.store.snapshot(chat, messages=is_turn)
        turn = ChatTurn(self, chat, message, lock, sid, meta)
        if meta.last_entry_id == turn.entry_id:  # committed before a crash: only the reply may be missing
            missing = meta.replied_entry_id != turn.entry_id and meta.last_reply
            # Through the reply's journal: what the crashed attempt already delivered is not sent again.
            stream = self._reply_stream(message, lock, previews=False) if missing else None
            return Outcome(sid, meta.last_reply if missing else None, committed=True, stream=stream)
        if turn.entry_id in (meta.batch_entry_ids or "").split("\n"):  # taken into a turn before a crash
            return Outcome(sid, None, committed=True, silent=True)
        command_reply = await handle_command(turn)
        if command_reply is not None:
            # Recorded like a turn's reply: a retry after a crash resends it instead of running the command again.
            await self.store.update_meta(chat, turn.session_id, lock=lock, last_entry_id=turn.entry_id,
                                         last_reply=command_reply)
            return Outcome(turn.session_id, command_reply, committed=True)
        notes: list[str] = []  # what the person is told above the reply (a message too long to read whole)
        if not message.respond:
            user_message = await self._bounded(turn, message, self._message_limit(meta.model or self.agents.default_model),
                                               notes)
            await self.store.append(chat, sid, [user_message], lock=lock,
                                    meta={"last_entry_id": turn.entry_id, "replied_entry_id": turn.entry_id})
            return Outcome(sid, None, committed=False)
        batch = await self._backlog(chat, message) if self.coalesce_backlog else []
        last = batch[-1][1] if batch else message
        model = meta.model or self.agents.default_model
        archive = ChatHistory(self.store, chat, sid)
        engine = self.agents.build_engine(model, meta.engine_state, archive)
        # Checked as the provider will check it: one broken pair must not fail this and every later turn.
        history = await repair_for_turn(self.store, chat, sid, meta.version, history)
        history = await self._pre_turn_compaction(turn, engine, model, history) or history
        sid, meta = turn.session_id, turn.meta
        archive.session_id = sid  # a rotating compaction moved the chat to a new session
        # Bounded after that rotation, so a long message's original is archived in the session it belongs to.
        limit = self._message_limit(model)
        earlier = [await self._bounded(turn, m, limit, notes) for m in [message, *(m for _, m in batch[:-1])]] if batch else []
        user_message = await self._bounded(turn, last, limit, notes)
        tools = ToolRegistry(propagate=is_redis_outage)  # Redis away: the turn waits for it, like the rest of the path
        for tool in recovery_tools(ChatHistory(self.store, chat, sid, every_session=True)):  # every conversation of the chat
            tools.add(tool)
        agent = self.agents.build_agent(engine, model, tools)
        adapter = self.adapters.get(message.platform)
        if adapter:
            with contextlib.suppress(Exception):
                await adapter.typing(message.chat_id)
        stream = self._reply_stream(last, lock, previews=self.stream_replies)
        watch = TurnWatch(stream, functools.partial(self._stop_requested, chat, handling_since))
        try:
            # A stop ends the turn even while the provider sends nothing: the watch asks on its own meanwhile.
            result = await agent.run_turn(history + earlier, user_message, on_event=watch,
                                          until_stopped=watch.until_stopped)
            reply = result.reply
            await self._provider_answered(chat)
        except TurnFailed as failed:
            error = failed.error
            if counts_as_down(error):
                # The provider is away: nothing of the turn is committed, the entry stays at the head of the
                # inbox and the whole turn is tried again once it is back (``_provider_down``).
                raise ProviderDown(error, handling_since) from error
            # What the turn did before the failure (tool results already paid for, an in-loop compaction)
            # is committed like any turn; the person's message is kept and the reply says what happened.
            result = failed.partial
            log.warning("chat %s: %s", chat, explain(error) or f"the model call failed: {error}")
            reply = f"⚠️ The model provider {plain_reason(error)}. Your message is saved; please try again."
        if notes and reply:
            reply = "\n\n".join([*notes, reply])
        usage = result.usage
        totals = dict(meta.usage_totals)
        for name, value in usage.as_dict().items():
            totals[name] = int(totals.get(name, 0)) + value
        totals["turns"] = int(totals.get("turns", 0)) + 1
        engine_state = engine.export_state()
        batch_ids = [turn.entry_id, *(f"{m.platform}:{m.update_id}" for _, m in batch)]
        fields = {
            "last_entry_id": batch_ids[-1],
            "batch_entry_ids": "\n".join(batch_ids) if batch else None,
            "last_reply": reply,
            "usage_totals": totals,
            "last_prompt_tokens": result.last_usage.prompt_tokens + result.last_usage.completion_tokens or None,
        }
        if engine_state != meta.engine_state:  # unchanged most turns; a summary in it can be kilobytes
            fields["engine_state"] = engine_state
        if result.compacted:
            fields["tokens_at_report"] = sum(count_message(m) for m in result.messages)
            before = meta.tokens
            commit = await self.store.commit_compaction(
                chat, sid, result.messages, lock=lock, in_place=self.compression.in_place,
                compaction_id=f"{turn.entry_id}:turn", meta=fields, archive_new=result.folded,
            )  # a lost lock raises StaleLock here, as the append below does: nothing is delivered then
            if commit.replayed:
                # An earlier call of this holder committed the turn: the reply is the one it recorded.
                reply = (await self.store.meta(chat, commit.session_id)).last_reply or reply
            else:
                await self._emit_compaction(turn, engine, commit.session_id, commit.old_session_id, "in_loop",
                                            before, fields["tokens_at_report"])
            turn.session_id = commit.session_id
        else:
            new_messages = earlier + result.new_messages
            fields["tokens_at_report"] = meta.tokens + sum(count_message(m) for m in new_messages)
            await self.store.append(chat, sid, new_messages, lock=lock, meta=fields)
        try:
            spent, saved = float(cost(usage, model, self.cache_ttl)), float(savings(usage, model, self.cache_ttl))
        except UnknownPrice:
            spent = saved = 0.0
        await self.events.emit(TurnEvent(
            platform=message.platform, chat=chat, session_id=turn.session_id,
            prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens,
            cache_read_tokens=usage.cache_read_tokens, cache_write_tokens=usage.cache_write_tokens,
            latency_ms=(time.perf_counter() - started) * 1000, model=model, cost_usd=spent, saved_usd=saved,
        ))
        return Outcome(turn.session_id, reply, committed=True, stream=stream,
                       batch=tuple((raw, f"{m.platform}:{m.update_id}") for raw, m in batch))

    # ----------------------------------------------------------------- compaction outside the loop

    async def _pre_turn_compaction(
        self, turn: ChatTurn, engine: ContextEngine, model: str, history: list[Message]
    ) -> list[Message] | None:
        """Idle compaction (S5.9), then hygiene at 85% (S2.1), before the agent sees the message.

        Returns the compacted transcript when either ran, else None.
        """
        meta = turn.meta
        context_length = self.agents.context_length(model)
        idle = time.time() - meta.last_activity_at if meta.last_activity_at else 0.0
        tokens = hygiene.estimate_session_tokens(meta)[0]
        if meta.count >= hygiene.MIN_MESSAGES and engine.should_idle_compact(idle, tokens):
            compacted = await self.compact(turn, engine, trigger="idle", force=False, messages=history)
            if compacted is not None:
                return compacted
        decision = hygiene.decide(meta, context_length, enabled=self.compression.enabled)
        if not decision.fire:
            return None
        log.info("%s: hygiene: %s", turn.chat, decision.reason)
        compacted = await self.compact(turn, engine, trigger="hygiene", force=True, tokens=decision.tokens, messages=history)
        if compacted is None:
            log.warning("%s: hygiene could not shrink the session (%s)", turn.chat, decision.reason)
        return compacted

    async def compact(
        self,
        turn: ChatTurn,
        engine: ContextEngine,
        *,
        trigger: str,
        force: bool,
        focus: str | None = None,
        tokens: int | None = None,
        messages: list[Message] | None = None,
    ) -> list[Message] | None:
        """Compact the chat's session now and commit it; the new live transcript, or None when unchanged.

        ``messages`` is the live transcript when the caller has just read it (saves reading it again).
        """
        if messages is None:
            messages = await self.store.active(turn.chat, turn.session_id)
        compacted = await engine.compress(messages, current_tokens=tokens, focus_topic=focus, force=force)
        if len(compacted) == len(messages) and all(a is b for a, b in zip(compacted, messages)):
            return None
        after = sum(count_message(m) for m in compacted)
        commit = await self.store.commit_compaction(
            turn.chat, turn.session_id, compacted, lock=turn.lock, in_place=self.compression.in_place,
            compaction_id=f"{turn.entry_id}:{trigger}", meta={"engine_state": engine.export_state()},
        )
        turn.session_id = commit.session_id
        if commit.replayed:  # applied by an earlier call: the session as stored is that call's result
            turn.meta = await self.store.meta(turn.chat, commit.session_id)
            return await self.store.active(turn.chat, commit.session_id)
        await self._emit_compaction(turn, engine, commit.session_id, commit.old_session_id, trigger,
                                    turn.meta.tokens, after)
        turn.meta = await self.store.meta(turn.chat, commit.session_id)
        return compacted  # the store gave its new messages their ids: it is the session as stored

    async def _emit_compaction(
        self, turn: ChatTurn, engine: ContextEngine, sid: str, old_sid: str, trigger: str, before: int, after: int
    ) -> None:
        stats = engine.last_compaction or {}
        summarizer = stats.get("summarizer") if isinstance(stats, Mapping) else getattr(stats, "summarizer", "")
        await self.events.emit(CompressEvent(
            platform=turn.message.platform, chat=turn.chat, session_id=sid, old_session_id=old_sid,
            in_place=not old_sid, compression_count=engine.compression_count, trigger=trigger,  # type: ignore[arg-type]
            tokens_before=before, tokens_after=after, summarizer=str(summarizer or ""),
        ))

    # ----------------------------------------------------------------- replies

    async def _stop_requested(self, chat: str, turn_started: float) -> bool:
        """Whether a ``/stop`` arrived for the chat since its turn began (honouring it clears it)."""
        at = await self.inbox.stop_requested_at(chat)
        if at is None or at < turn_started:
            return False
        await self.inbox.clear_stop(chat)
        return True

    async def _backlog(self, chat: str, head: IncomingMessage) -> list[tuple[str, IncomingMessage]]:
        """The entries waiting behind ``head`` that its turn takes in: consecutive, in order, up to the
        configured count and tokens; a command ends the run (it is handled alone), and trailing
        messages that ask for no reply wait for their own step."""
        waiting = await self.inbox.waiting(chat, self.coalesce_max_messages)
        try:
            if not waiting or IncomingMessage.model_validate_json(waiting[0]).update_id != head.update_id:
                return []
        except ValueError:
            return []
        taken: list[tuple[str, IncomingMessage]] = []
        tokens = count_text(head.text)
        for raw in waiting[1:]:
            try:
                message = IncomingMessage.model_validate_json(raw)
            except ValueError:
                break  # the unreadable entry gets its own step (and its quarantine)
            tokens += count_text(message.text)
            if (message.respond and parse_command(message.text.strip()) is not None) or tokens > self.coalesce_max_tokens:
                break
            taken.append((raw, message))
        while taken and not taken[-1][1].respond:
            taken.pop()
        return taken

    def _reply_stream(self, message: IncomingMessage, lock: Lock, *, previews: bool) -> ReplyStream | None:
        """The reply's stream on its platform's surface, paced by the shared budget and recorded in its journal;
        None where the platform sends replies whole."""
        adapter = self.adapters.get(message.platform)
        if adapter is None:
            return None
        journal = ReplyJournal(self.store.channel, self.store.prefix, lock, f"{message.platform}:{message.update_id}")
        surface = adapter.reply_surface(message.chat_id, self.gates(message), reply_to=message.update_id,
                                        journal=journal)
        if surface is None:
            return None
        stream = ReplyStream(surface, previews=previews)
        self._streams[message.chat] = stream
        return stream

    async def _deliver(self, message: IncomingMessage, text: str, stream: ReplyStream | None = None) -> None:
        """Send a reply (through the stream that previewed it, when there is one), retrying transient
        failures; a reply the platform keeps refusing (the user blocked the bot, the channel is gone)
        is logged and given up so the chat is not blocked."""
        adapter = self.adapters.get(message.platform)
        if adapter is None:
            log.warning("no adapter for platform %s; reply to %s dropped", message.platform, message.chat)
            return
        for attempt in range(1, SEND_ATTEMPTS + 1):
            try:
                if stream is not None:
                    await stream.finish(text)  # picks up where a failed attempt stopped
                else:
                    await adapter.send(message.chat_id, text, reply_to=message.update_id)
                return
            except asyncio.CancelledError:
                raise
            except Exception as error:
                outage = is_redis_outage(error)  # the send budget and the journal live in Redis
                if outage:
                    self.redis_health.failed(error, message.chat)
                if attempt == SEND_ATTEMPTS:
                    log.warning("%s: reply to update %s could not be delivered; giving it up",
                                message.chat, message.update_id, exc_info=not outage)
                    return
                if not outage:
                    log.warning("%s: sending a reply failed (attempt %d); retrying", message.chat, attempt,
                                exc_info=True)
                await asyncio.sleep(RETRY_DELAY_SECONDS * attempt)

    # ----------------------------------------------------------------- provider outages

    async def _provider_answered(self, chat: str) -> None:
        """A turn got its answer: an outage this process saw ends, for the log and for the chat."""
        self.provider_health.answered()
        if chat in self._down_chats:
            self._down_chats.discard(chat)
            with contextlib.suppress(Exception):  # the record expires by itself; a new outage is recognised anyway
                await self.outages.ended(chat)

    async def _provider_down(self, chat: str, lock: Lock, message: IncomingMessage, down: ProviderDown) -> "Outcome":
        """The head entry failed because the provider is away: tell the chat once, and have the chat handed
        out again after a backoff (raises :class:`RetryLater`), so order is kept and no slot is held while
        waiting. When the provider stayed away for the whole bound, the waiting messages are stored and
        answered with one final notice."""
        error = down.cause
        self.provider_health.failed(error, f"{chat}|{message.update_id}")
        self._down_chats.add(chat)
        failure = await self.outages.failed(chat, error, down.started)
        if not failure.expired:
            if failure.first:
                await self._deliver(message, waiting_notice(error))
            raise RetryLater(failure.delay)
        log.warning("%s: the model provider stayed away for %.0fs; the waiting messages are stored unanswered",
                    chat, failure.waited)
        sid, meta, _ = await self.store.snapshot(chat, messages=False)
        batch = await self._backlog(chat, message)  # what waited behind the head leaves with it, in order
        entries = [message, *(m for _, m in batch)]
        ids = [f"{m.platform}:{m.update_id}" for m in entries]
        reply = final_notice(error, failure.waited)
        if meta.last_entry_id != ids[-1]:
            stored = await self._stored_form(ChatTurn(self, chat, message, lock, sid, meta), entries)
            await self.store.append(chat, sid, stored, lock=lock,
                                    meta={"last_entry_id": ids[-1], "last_reply": reply,
                                          "batch_entry_ids": "\n".join(ids) if batch else None})
        self._down_chats.discard(chat)
        await self.outages.ended(chat)
        # Journaled under the entry the reply is recorded for (the batch's last), which a resend after a crash uses.
        return Outcome(sid, reply, committed=True, stream=self._reply_stream(entries[-1], lock, previews=False),
                       batch=tuple((raw, f"{m.platform}:{m.update_id}") for raw, m in batch))
