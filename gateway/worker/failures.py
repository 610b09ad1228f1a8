"""How a failed turn ends: tried again a few times, then given up with a notice; or, while the provider
is away, waited for within a bound.

A failure that is not the entry's fault is not settled here: a lost lock, a cancel or Redis away ends
the worker's hold on the chat, and the entry stays at the head of the inbox for whoever holds it next.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from agent.llm.errors import plain_reason
from gateway.outage import ProviderDown, RetryLater, final_notice, is_redis_outage, waiting_notice
from gateway.store import StaleLock, reply_meta
from gateway.worker.backlog import take_backlog
from gateway.worker.chat_turn import TurnEnd
from gateway.worker.turn import Turn

log = logging.getLogger(__name__)

#: Failed attempts at one inbox entry before it is answered with an error and let go.
MAX_ENTRY_ATTEMPTS = 3


class TurnFailures:
    """The failed attempts at one chat's entries while its worker holds the chat's lock: the counts are
    per holding, never kept past it."""

    def __init__(self, retry_delay: float) -> None:
        """``retry_delay``: seconds before a failed entry's first retry; the wait doubles with each attempt."""
        self.retry_delay = retry_delay
        self._attempts: dict[str, int] = {}

    async def settle(self, turn: Turn, error: BaseException) -> TurnEnd | None:
        """How ``turn``, which failed with ``error``, ends: its outcome, or None to try the entry again.

        Re-raises what ends the worker's hold on the chat (a lost lock, a cancel, Redis away), and raises
        :class:`RetryLater` while the provider is away (the entry waits; no attempt is counted).
        """
        turn.parts.replies.abandon(turn.chat)
        if isinstance(error, (StaleLock, asyncio.CancelledError)) or not isinstance(error, Exception):
            raise error
        if is_redis_outage(error):
            raise error  # the worker lets the chat go; it is handed out again once Redis answers
        if isinstance(error, ProviderDown):  # not the entry's fault: no attempt counted
            return await provider_down(turn, error)  # RetryLater until the bound runs out
        update_id = turn.message.update_id
        attempts = self._attempts.get(update_id, 0) + 1
        self._attempts[update_id] = attempts
        log.error("%s: handling update %s failed (attempt %d)", turn.chat, update_id, attempts, exc_info=error)
        if attempts < MAX_ENTRY_ATTEMPTS:
            await asyncio.sleep(self.retry_delay * 2 ** (attempts - 1))  # the keeper holds the lock meanwhile
            return None
        return await give_up(turn, error)

    def ended(self, turn: Turn) -> None:
        """``turn`` ended (handled, given up or stored unanswered): its entry's failed attempts are forgotten."""
        self._attempts.pop(turn.message.update_id, None)


async def give_up(turn: Turn, error: Exception) -> TurnEnd:
    """After repeated failures: keep the person's message in the session and tell them.

    If even that fails (the session cannot be read, the message cannot be stored), the entry is
    let go with the error logged, so one poisoned entry never blocks the chat behind it. Only a
    lost lock propagates: the chat is another worker's then.
    """
    message, store = turn.message, turn.store
    reply = (
        f"⚠️ I could not process that message ({type(error).__name__}). It is saved in our conversation; "
        "please try again."
    )
    sid = ""
    try:
        sid, meta, _ = await store.snapshot(turn.chat, messages=False)
        if not meta.holds(message.entry_id):
            chat_turn = turn.chat_turn(sid, meta)
            stored = await turn.parts.bound.stored_form(chat_turn, turn.model(chat_turn), [message])
            await store.append(
                turn.chat, sid, stored, lock=turn.lock, meta={"last_entry_id": message.entry_id, **reply_meta(reply)}
            )
    except StaleLock:
        raise
    except Exception:
        log.exception("%s: update %s could not be stored either; letting it go", turn.chat, message.update_id)
        if not sid:  # the snapshot itself failed: the entry still leaves through the chat's pointer
            with contextlib.suppress(Exception):
                sid = await store.stored_session(turn.chat) or ""
        await turn.report_failure(sid, "failed", f"the message could not be handled or stored ({type(error).__name__})")
        return TurnEnd(sid, None, committed=False)
    await turn.report_failure(sid, "failed", f"handling the message kept failing ({type(error).__name__})")
    return TurnEnd(sid, reply, committed=True)


async def provider_down(turn: Turn, down: ProviderDown) -> TurnEnd:
    """The entry failed because the provider is away: tell the chat once, and have the chat handed out
    again after a backoff (raises :class:`RetryLater`), so order is kept and no slot is held while
    waiting. When the provider stayed away for the whole bound, the waiting messages are stored and
    answered with one final notice."""
    message, error, store, parts = turn.message, down.cause, turn.store, turn.parts
    failure = await parts.provider.failed(turn.chat, str(message.update_id), down)
    if not failure.expired:
        if failure.first:
            await turn.report_failure(
                await store.stored_session(turn.chat) or "",
                "provider_away",
                f"the model provider {plain_reason(error)}",
            )
            await parts.replies.deliver(message, waiting_notice(error))
        raise RetryLater(failure.delay)
    log.warning(
        "%s: the model provider stayed away for %.0fs; the waiting messages are stored unanswered",
        turn.chat,
        failure.waited,
    )
    sid, meta, _ = await store.snapshot(turn.chat, messages=False)
    batch = await take_backlog(
        parts.inbox, turn.entries, max_messages=parts.options.coalesce_max_messages
    )  # what waited behind the head leaves with it
    entries = [message, *(m for _, m in batch)]
    ids = [m.entry_id for m in entries]
    reply = final_notice(error, failure.waited)
    made = meta.partial_items if meta.partial_entry_id else []  # what a cut-short attempt made is still theirs
    if meta.last_entry_id != ids[-1]:
        chat_turn = turn.chat_turn(sid, meta)
        unstored = [m for m in entries if not meta.holds(m.entry_id)]  # a kept partial turn holds its message
        stored = await parts.bound.stored_form(chat_turn, turn.model(chat_turn), unstored)
        await store.append(
            turn.chat,
            sid,
            stored,
            lock=turn.lock,
            meta={
                "last_entry_id": ids[-1],
                **reply_meta(reply, made),
                "partial_entry_id": None,
                "partial_items": None,
                "batch_entry_ids": "\n".join(ids) if batch else None,
            },
        )
    await parts.provider.stopped_waiting(turn.chat)
    await turn.report_failure(
        sid,
        "provider_gave_up",
        f"the model provider {plain_reason(error)} for {failure.waited:.0f} s; messages stored unanswered",
    )
    # Journaled under the entry the reply is recorded for (the batch's last), which a resend after a crash uses.
    return TurnEnd(
        sid,
        reply,
        committed=True,
        stream=parts.replies.stream(entries[-1], turn.lock, previews=False),
        batch=tuple((raw, m.entry_id) for raw, m in batch),
        items=tuple(made),
        answers=entries[-1],
    )
