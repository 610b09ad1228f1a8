"""One inbox entry, handled as named steps, to its end; the runner only hands each entry in, raw.

:func:`take` parses the entry once (an unreadable one goes to the quarantine) and runs it as a
:class:`Turn`, which sequences itself (:meth:`Turn.to_end`):

1. :meth:`Turn.snapshot` — the chat's session pointer, meta and (for a model turn) live transcript;
2. :meth:`Turn.already_handled` — an entry committed before a crash only has its reply resent;
3. :meth:`Turn.command` — a chat command answers itself (:mod:`gateway.commands`);
4. :func:`~gateway.worker.preparing.prepare` — the backlog it takes in, the engine, idle compaction and
   hygiene, the bounded messages;
5. :func:`~gateway.worker.running.run_agent` — the agent's turn, streamed, stoppable with ``/stop``;
6. :func:`~gateway.worker.committing.commit` — the new messages (or the in-loop compaction) committed with
   the reply, fenced;
7. :func:`~gateway.worker.reporting.report` — the turn's event, with its cost and what caching saved;
8. a failure settled by :class:`~gateway.worker.failures.TurnFailures`: tried again, given up with a notice,
   or waited for while the provider is away;
9. :meth:`Turn.deliver` — the reply sent, through the stream that previewed it;
10. :meth:`Turn.finish` — the reply recorded as sent and the entry removed, one fenced step; the next entry.

Exactly-once replies: a turn's messages and its reply text are committed together with
the inbox entry's id (``last_entry_id``); after the reply is sent, ``replied_entry_id`` is
recorded, then the entry leaves the inbox. A worker that finds the head entry already
committed only (re)sends the recorded reply. The one window in which a reply can go out
twice is between the platform accepting it and ``replied_entry_id`` being written — one
Redis round trip.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from agent.loop import ClientToolError
from agent.messages import Message
from agent.tool_calls import pending_calls
from gateway.media.source import ChatMedia
from gateway.platforms.base import IncomingMessage, TurnRefusal
from gateway.store import Lock, SessionMeta, reply_meta
from gateway.worker.backlog import ParsedEntries, is_command
from gateway.worker.chat_turn import ChatTurn, TurnEnd
from gateway.worker.committing import commit
from gateway.worker.failures import TurnFailures
from gateway.worker.parts import TurnParts
from gateway.worker.preparing import prepare
from gateway.worker.remembering import took_part
from gateway.worker.reporting import report
from gateway.worker.running import run_agent

log = logging.getLogger(__name__)

#: What a person who sends faster than ``access.messages_per_minute`` is told, once a minute.
RATE_NOTICE = (
    "⏳ You are sending messages faster than I may answer them. I keep every one; ask again in a minute "
    "and I will answer."
)


async def take(parts: TurnParts, lock: Lock, raw: str, failures: TurnFailures) -> str | None:
    """Handle the held chat's inbox entry ``raw`` to its end; the next entry (``raw`` again to retry it).

    ``failures`` counts the failed attempts at the chat's entries while this worker holds its lock.
    """
    try:
        entries = ParsedEntries(raw)
    except ValueError:
        log.error("%s: unreadable inbox entry moved to quarantine: %.200r", lock.chat, raw)
        await parts.inbox.drop_bad(lock.chat, raw)
        return await parts.inbox.head(lock.chat)
    return await Turn(parts, lock, entries).to_end(failures)


class Turn:
    """One inbox entry's handling (see the module docstring for the steps)."""

    def __init__(self, parts: TurnParts, lock: Lock, entries: ParsedEntries) -> None:
        """``entries`` holds the entry handed in, parsed: every entry the turn reads is parsed there once."""
        self.parts = parts
        self.chat, self.lock = lock.chat, lock
        self.entries = entries
        self.message = entries.head
        self.started = time.perf_counter()
        self.since = time.time()  # a /stop from now on is this turn's, even one sent during a compaction first
        items = parts.items
        #: The chat's items as the agent reads them, keeping what the model and its tools make.
        self.media = ChatMedia(items.store, self.chat, items.fetch_again, items.keep_made)

    async def to_end(self, failures: TurnFailures) -> str | None:
        """Run the entry, settle a failure, deliver the reply and finish the entry; the next entry (this one
        again when its failure is to be tried again)."""
        try:
            outcome = await self.run()
        except BaseException as error:
            settled = await failures.settle(self.lock, self.entries, error)
            if settled is None:
                return self.entries.head_raw
            outcome = settled
        failures.ended(self.message)
        await self.deliver(outcome)
        return await self.finish(outcome)

    async def run(self) -> TurnEnd:
        """The entry handled; raises :class:`~gateway.outage.ProviderDown` when the provider is away."""
        turn, history = await self.snapshot()
        await self.parts.compactions.publish(turn)  # what a compaction kept about people, if a crash held it back
        outcome = self.already_handled(turn, history) or await self.command(turn)
        if outcome is not None:
            return outcome
        if not self.message.respond:
            return await self.store_unanswered(turn)
        return await self.answer(turn, history)

    async def snapshot(self) -> tuple[ChatTurn, list[Message]]:
        wants_model = self.message.respond and not is_command(self.message)
        sid, meta, history = await self.parts.store.snapshot(self.chat, messages=wants_model)
        return self.chat_turn(sid, meta), history

    def chat_turn(self, session_id: str, meta: SessionMeta) -> ChatTurn:
        """What this entry's handling works with in session ``session_id`` (what commands receive too)."""
        return ChatTurn(self.chat, self.message, self.lock, session_id, meta)

    def already_handled(self, turn: ChatTurn, history: list[Message]) -> TurnEnd | None:
        """An entry committed before a crash: only its reply may be missing, sent through the reply's journal
        so what the crashed attempt delivered is not sent again (with the client calls it ended with, which the
        committed transcript ends with)."""
        meta = turn.meta
        if meta.last_entry_id == turn.entry_id:
            calls = tuple(pending_calls(history)) if self.message.client_tools else ()
            missing = meta.replied_entry_id != turn.entry_id and bool(meta.last_reply or meta.last_reply_items or calls)
            stream = self.parts.replies.stream(self.message, self.lock, previews=False) if missing else None
            return TurnEnd(
                turn.session_id,
                (meta.last_reply or "") if missing else None,
                committed=True,
                stream=stream,
                items=tuple(meta.last_reply_items) if missing else (),
                client_calls=calls if missing else (),
            )
        if meta.took(turn.entry_id):  # taken into a turn before a crash
            return TurnEnd(turn.session_id, None, committed=True, silent=True)
        return None

    async def command(self, turn: ChatTurn) -> TurnEnd | None:
        reply = await self.parts.commands(turn)
        if reply is None:
            return None
        # Recorded like a turn's reply: a retry after a crash resends it instead of running the command again.
        await self.parts.store.update_meta(
            self.chat, turn.session_id, lock=self.lock, last_entry_id=turn.entry_id, **reply_meta(reply)
        )
        return TurnEnd(turn.session_id, reply, committed=True)

    async def store_unanswered(self, turn: ChatTurn) -> TurnEnd:
        """A message that asks for no reply (a group message not addressed to the bot, or one of a person
        sending too fast) joins the session; the one sending too fast is told so, once a minute."""
        bound = self.parts.bound
        await took_part(self.parts, self.chat, [self.message])
        stored = await bound.bounded(turn, self.message, bound.limit(self.parts.model(turn)), [])
        await self.parts.store.append(
            self.chat,
            turn.session_id,
            [stored],
            lock=self.lock,
            meta={"last_entry_id": turn.entry_id, "replied_entry_id": turn.entry_id},
        )
        if self.message.limited and await self.parts.told.first_for(self.chat, f"rate:{self.message.user_id}", 60):
            refusal = TurnRefusal("rate_limited", RATE_NOTICE, retry_after=60.0)
            return TurnEnd(turn.session_id, RATE_NOTICE, committed=False, refusal=refusal)
        return TurnEnd(turn.session_id, None, committed=False)

    async def answer(self, turn: ChatTurn, history: list[Message]) -> TurnEnd:
        """The model's turn: prepared, run by the agent, committed with its reply, and reported."""
        parts = self.parts
        try:
            prepared = await prepare(parts, turn, self.entries, history, self.media, self.stop_requested)
            answer = await run_agent(parts, turn, prepared, self.media, self.stop_requested, self.since)
        except ClientToolError as refused:  # checked before any request: nothing was stored, nothing spent
            log.info("%s: the client's %s could not be taken: %s", self.chat, refused.param, refused)
            return TurnEnd(turn.session_id, f"⚠️ {refused}", committed=False, refused=refused)
        await commit(parts, turn, prepared, answer)
        await report(parts, turn, prepared, answer, started=self.started)
        return TurnEnd(
            turn.session_id,
            None if answer.quiet else answer.reply,
            committed=True,
            stream=answer.stream,
            batch=tuple((raw, m.entry_id) for raw, m in prepared.batch),
            items=tuple(answer.items),
            answers=prepared.batch[-1][1] if prepared.batch else None,
            client_calls=tuple(answer.result.pending_client_calls),
            refusal=answer.refusal,
        )

    async def stop_requested(self) -> bool:
        """Whether a ``/stop`` arrived for the chat since this turn began (honouring it clears it)."""
        inbox = self.parts.inbox
        at = await inbox.stop_requested_at(self.chat)
        if at is None or at < self.since:
            return False
        await inbox.clear_stop(self.chat)
        return True

    # ----------------------------------------------------------------- the ending

    async def deliver(self, outcome: TurnEnd) -> None:
        """Send the outcome's reply, if it has one, through the stream that previewed it. A whole reply (a
        command's, a give-up notice) goes through the reply's journal too, as its resend after a crash does:
        each chunk is recorded as the platform accepts it, so no retry posts it again."""
        replies = self.parts.replies
        replies.closed(self.chat)
        answers = outcome.answers or self.message  # a batch's reply is journaled under its last entry
        await self.tell_client(answers, outcome)
        if outcome.reply is None:
            if outcome.stream is not None or outcome.items:  # answers nothing (over budget, told already): its
                # preview is taken down, and what it made before the budget ran out is still the person's
                await replies.deliver(answers, "", outcome.stream, items=outcome.items, lock=self.lock)
            return
        stream = outcome.stream or replies.stream(answers, self.lock, previews=False)
        replies.closed(self.chat)
        await replies.deliver(answers, outcome.reply, stream, items=outcome.items, lock=self.lock)

    async def tell_client(self, answers: IncomingMessage, outcome: TurnEnd) -> None:
        """Tell the adapter, ahead of the reply's text, of the client calls the reply ends with, of the client's
        request refused, or of the message kept unanswered by kind (the adapter's hooks do nothing on platforms
        that answer no waiting request)."""
        adapter = self.parts.adapters.get(answers.platform)
        if adapter is None:
            return
        if outcome.client_calls:
            await adapter.client_tool_calls(answers.chat_id, outcome.client_calls, reply_to=answers.update_id)
        if outcome.refused is not None:
            refused = outcome.refused
            await adapter.client_request_refused(
                answers.chat_id, refused.param, str(refused), reply_to=answers.update_id
            )
        if outcome.refusal is not None:
            await adapter.turn_refused(answers.chat_id, outcome.refusal, reply_to=answers.update_id)

    async def finish(self, outcome: TurnEnd) -> str | None:
        """Record the reply as sent and remove the entry (a batch: its entries); the next entry.

        Recording the reply as sent and removing the entry are one fenced step; a crash between the send
        (:meth:`deliver`) and this step is the one window in which a reply can go out twice.
        """
        store, raw = self.parts.store, self.entries.head_raw
        if outcome.batch:
            # The batch's last entry carries the reply: it is marked first, then the others leave silently
            # (a crash in between leaves them to be removed as already taken in).
            last_raw, last_id = outcome.batch[-1]
            others = [raw, *(entry for entry, _ in outcome.batch[:-1])]
            head = await store.finish_entry(
                self.lock, outcome.session_id, last_raw, ahead_for_next=False, replied_entry_id=last_id
            )
            for position, other in enumerate(others):  # only the last finish reads ahead for what follows
                head = await store.finish_entry(
                    self.lock, outcome.session_id, other, ahead_for_next=position == len(others) - 1
                )
            return head
        marker: dict[str, Any] = (
            {"replied_entry_id": self.message.entry_id} if outcome.committed and not outcome.silent else {}
        )
        return await store.finish_entry(self.lock, outcome.session_id, raw, **marker)
