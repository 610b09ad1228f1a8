"""GatewayRunner: per-chat inboxes → one worker per chat across processes, draining it turn by turn.

Several gateway processes may share one Redis. Each chat is worked on by one worker at a
time, whichever process takes the chat's lock; the lock is kept alive while the turn runs
and every write is fenced by it, so a worker that stalls past its lock cannot overwrite
what the next worker committed.

The runner dispatches chats and drains each chat's inbox: it hands every entry, raw, to the
turn (:func:`gateway.worker.turn.take`), which runs it to its end — commit, delivery, the entry
finished (exactly-once replies: see :mod:`gateway.worker.turn`) — and hands back the next entry.
What a platform hands in is admitted by :mod:`gateway.worker.intake`; everything the runner works
with is built once, from the settings, by :func:`gateway.run.build.build_runner`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time

from agent.cancelling import cancel_and_wait
from agent.retrying import INBOX_ENTRY
from gateway.outage import Backoff, Health, RetryLater, is_redis_outage
from gateway.platforms.base import IncomingMessage
from gateway.store import StaleLock
from gateway.store.locks import Lock, new_token
from gateway.worker.embedding import Embedder
from gateway.worker.failures import TurnFailures
from gateway.worker.intake import Admission
from gateway.worker.lock_keeper import LockKeeper
from gateway.worker.parts import TurnParts, WorkerStatus
from gateway.worker.turn import take

log = logging.getLogger(__name__)

#: Seconds before a chat whose worker stopped early is handed out again (a failed entry's retries: ``INBOX_ENTRY``).
RETRY_DELAY_SECONDS = 1.0
#: How long a chat whose lock could not be taken (an unexpected error, not Redis away) waits to be tried again.
CLAIM_RETRY_SECONDS = 5.0
#: Seconds between the dispatcher's looks at the ready chats when nothing wakes it sooner.
POLL_INTERVAL_SECONDS = 0.05


class GatewayRunner:
    """Runs the gateway's workers in this process."""

    def __init__(
        self,
        parts: TurnParts,
        admission: Admission,
        keeper: LockKeeper,
        status: WorkerStatus,
        *,
        redis_health: Health,
        max_chats: int,
        embedder: Embedder | None,
    ) -> None:
        """``parts``: what every turn shares; ``admission``: what the platforms hand in goes through it;
        ``keeper``: keeps the held chats' locks alive (its ttl is the one chats are claimed with);
        ``status``: this worker's id, start and running chats; ``max_chats``: chats answered at once here
        (``gateway.max_concurrent_chats``); ``embedder``: embeds the chats' messages in the background (None
        while ``memory.embeddings`` is off)."""
        self.parts = parts
        self.admission = admission
        self.keeper = keeper
        self.status = status
        self.redis_health = redis_health
        self.max_chats = max_chats
        # What the rest of the gateway reads of a running bot (the web chat, the operator view, the metrics).
        self.store, self.inbox, self.agents, self.events = parts.store, parts.inbox, parts.agents, parts.events
        self.adapters = parts.adapters
        self.roles = admission.roles
        self.spending, self.budgets = parts.spend.store, parts.spend.budgets
        self.media_store = parts.items.store
        self.mcp = parts.tools.mcp
        #: The background embedder (``memory.embeddings``), started and stopped with the runner; None when off.
        self.embedder = embedder
        #: The chats' messages ranked by meaning (``gateway.session_source.MeaningSearch``); None when off.
        self.meanings = parts.meanings
        #: Chats whose lock a Redis outage kept this process from releasing: released when Redis answers again.
        self._owed_releases: dict[str, tuple[Lock, float]] = {}
        self._busy = status.running
        self._wake = admission.wake
        self._saturated = False
        self._dispatcher: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def worker_id(self) -> str:
        return self.status.worker_id

    @property
    def started_at(self) -> float:
        return self.status.started_at

    @property
    def busy_chats(self) -> int:
        """How many chats this process is answering now (each has a message in its inbox until answered)."""
        return self.status.busy_chats

    @property
    def lock_ttl(self) -> float:
        """The lock ttl chats are claimed and renewed with (``gateway.lock_ttl_seconds``)."""
        return self.keeper.ttl

    @property
    def coalesce_backlog(self) -> bool:
        return self.parts.options.coalesce_backlog

    @property
    def coalesce_max_messages(self) -> int:
        return self.parts.options.coalesce_max_messages

    # ----------------------------------------------------------------- lifecycle

    async def intake(self, message: IncomingMessage) -> bool:
        """Make an incoming message durable; returns once it is safe to acknowledge the platform
        (see :meth:`Admission.admit <gateway.worker.intake.Admission.admit>`)."""
        return await self.admission.admit(message)

    async def start(self) -> None:
        self._stopping = False
        self._dispatcher = asyncio.create_task(self._dispatch(), name=f"dispatch-{self.worker_id}")
        if self.embedder is not None:
            await self.embedder.start()

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
            if self.parts.items.transcriber is not None:
                await self.parts.items.transcriber.aclose()
            if self.embedder is not None:
                await self.embedder.aclose()
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
            await asyncio.sleep(POLL_INTERVAL_SECONDS)
        raise TimeoutError(f"gateway still busy after {timeout}s")

    # ----------------------------------------------------------------- dispatch

    async def _dispatch(self) -> None:
        backoff = Backoff()
        while not self._stopping:
            wait = POLL_INTERVAL_SECONDS
            try:
                await self._settle_releases()
                free = self.max_chats - len(self._busy)
                chats = await self.inbox.ready_chats(free + len(self._busy)) if free > 0 else []
                # More chats wait than slots are free: wake up as soon as a slot frees.
                self._saturated = free <= 0 or len([c for c in chats if c not in self._busy]) > free
                for chat in chats:
                    if chat in self._busy or len(self._busy) >= self.max_chats:
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
        """Take the chat's lock and hand its inbox's entries to their turns, in order, until it is empty."""
        claimed = await self._claim(chat)
        if claimed is None:
            return
        lock, head = claimed
        me = asyncio.current_task()
        assert me is not None
        self.keeper.hold(lock, me)
        released = False
        retry_in = RETRY_DELAY_SECONDS
        try:
            released = await self._work_through(lock, head)
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

    async def _claim(self, chat: str) -> tuple[Lock, str | None] | None:
        """The chat's lock and its head entry; None when another worker has the chat or it could not be taken
        (the chat stays marked and is handed out again)."""
        token = new_token()
        try:
            lock, head = await self.store.claim(chat, self.lock_ttl, token=token)
            if lock is None:
                return None  # another worker has this chat
            await self.inbox.lease(chat, self.lock_ttl)
        except Exception as error:
            if is_redis_outage(error):
                self.redis_health.failed(error)  # logged once for the whole outage
                # The claim may have taken the lock before its answer was lost: given back once Redis answers
                # (a no-op if it never did), so the chat does not wait out the whole lock.
                self._owed_releases.setdefault(chat, (Lock(chat=chat, token=token, fence=0), RETRY_DELAY_SECONDS))
                return None
            log.exception("%s: could not take the chat; trying again in %gs", chat, CLAIM_RETRY_SECONDS)
            with contextlib.suppress(Exception):
                await self.inbox.lease(chat, CLAIM_RETRY_SECONDS)
            return None
        return lock, head

    async def _work_through(self, lock: Lock, head: str | None) -> bool:
        """Hand the held chat's entries to their turns until its inbox is empty (True: the chat was released)
        or this process stops (False)."""
        chat = lock.chat
        failures = TurnFailures(self.parts, INBOX_ENTRY)
        while not self._stopping:
            if head is None:
                # Unmark first, then release only if nothing arrived meanwhile: an entry pushed
                # after the release re-marks the chat itself (the intake marks after pushing).
                await self.inbox.unmark(chat)
                head = await self.store.release_if_idle(lock)
                if head is None:
                    return True
                await self.inbox.lease(chat, self.lock_ttl)  # still ours: stay marked in case we die
            head = await take(self.parts, lock, head, failures)
        return False

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
