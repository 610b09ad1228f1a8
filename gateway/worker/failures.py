"""How a failed turn ends: tried again a few times, then given up with a notice; or, while the provider
is away, waited for within a bound.

A failure that is not the entry's fault is not settled here: a lost lock, a cancel or Redis away ends
the worker's hold on the chat, and the entry stays at the head of the inbox for whoever holds it next.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from agent.llm.errors import ProviderError, plain_reason
from agent.retrying import Policy
from gateway.outage import ProviderDown, RetryLater, final_notice, is_redis_outage, waiting_notice
from gateway.platforms.base import IncomingMessage, TurnRefusal
from gateway.store import Lock, StaleLock, reply_meta
from gateway.worker.backlog import ParsedEntries, take_backlog
from gateway.worker.chat_turn import ChatTurn, TurnEnd
from gateway.worker.parts import TurnParts
from gateway.worker.reporting import report_failure

log = logging.getLogger(__name__)


class TurnFailures:
    """The failed attempts at one chat's entries while its worker holds the chat's lock: the counts are
    per holding, never kept past it."""

    def __init__(self, parts: TurnParts, policy: Policy) -> None:
        """``policy``: how many tries an entry gets and the wait before each retry (``INBOX_ENTRY`` as shipped)."""
        self.parts = parts
        self.policy = policy
        self._attempts: dict[str, int] = {}

    async def settle(self, lock: Lock, entries: ParsedEntries, error: BaseException) -> TurnEnd | None:
        """How the turn of ``entries`` (their head), which failed with ``error``, ends: its outcome, or None to
        try the entry again.

        Re-raises what ends the worker's hold on the chat (a lost lock, a cancel, Redis away), and raises
        :class:`RetryLater` while the provider is away (the entry waits; no attempt is counted).
        """
        self.parts.replies.abandon(lock.chat)
        if isinstance(error, (StaleLock, asyncio.CancelledError)) or not isinstance(error, Exception):
            raise error
        if is_redis_outage(error):
            raise error  # the worker lets the chat go; it is handed out again once Redis answers
        if isinstance(error, ProviderDown):  # not the entry's fault: no attempt counted
            return await provider_down(self.parts, lock, entries, error)  # RetryLater until the bound runs out
        update_id = entries.head.update_id
        attempts = self._attempts.get(update_id, 0) + 1
        self._attempts[update_id] = attempts
        log.error("%s: handling update %s failed (attempt %d)", lock.chat, update_id, attempts, exc_info=error)
        if attempts < self.policy.attempts:
            await asyncio.sleep(self.policy.delay(attempts))  # the keeper holds the lock meanwhile
            return None
        return await give_up(self.parts, lock, entries.head, error)

    def ended(self, message: IncomingMessage) -> None:
        """The turn of ``message`` ended (handled, given up or stored unanswered): its failed attempts are
        forgotten."""
        self._attempts.pop(message.update_id, None)


async def give_up(parts: TurnParts, lock: Lock, message: IncomingMessage, error: Exception) -> TurnEnd:
    """After repeated failures: keep the person's message in the session and tell them.

    If even that fails (the session cannot be read, the message cannot be stored), the entry is
    let go with the error logged, so one poisoned entry never blocks the chat behind it. Only a
    lost lock propagates: the chat is another worker's then.
    """
    store, chat = parts.store, lock.chat
    reply = (
        f"⚠️ I could not process that message ({type(error).__name__}). It is saved in our conversation; "
        "please try again."
    )
    sid = ""
    try:
        sid, meta, _ = await store.snapshot(chat, messages=False)
        if not meta.holds(message.entry_id):
            chat_turn = ChatTurn(chat, message, lock, sid, meta)
            stored = await parts.bound.stored_form(chat_turn, parts.model(chat_turn), [message])
            await store.append(
                chat, sid, stored, lock=lock, meta={"last_entry_id": message.entry_id, **reply_meta(reply)}
            )
    except StaleLock:
        raise
    except Exception:
        log.exception("%s: update %s could not be stored either; letting it go", chat, message.update_id)
        if not sid:  # the snapshot itself failed: the entry still leaves through the chat's pointer
            with contextlib.suppress(Exception):
                sid = await store.stored_session(chat) or ""
        why = f"the message could not be handled or stored ({type(error).__name__})"
        await report_failure(parts.events, message, sid, "failed", why)
        return TurnEnd(sid, None, committed=False)
    why = f"handling the message kept failing ({type(error).__name__})"
    await report_failure(parts.events, message, sid, "failed", why)
    return TurnEnd(sid, reply, committed=True)


async def provider_down(parts: TurnParts, lock: Lock, entries: ParsedEntries, down: ProviderDown) -> TurnEnd:
    """The entry failed because the provider is away: tell the chat once, and have the chat handed out
    again after a backoff (raises :class:`RetryLater`), so order is kept and no slot is held while
    waiting. When the provider stayed away for the whole bound, the waiting messages are stored and
    answered with one final notice."""
    message, error, chat = entries.head, down.cause, lock.chat
    failure = await parts.provider.failed(chat, str(message.update_id), down)
    if not failure.expired:
        await _tell_waiting(parts, message, error)
        if failure.first:
            sid = await parts.store.stored_session(chat) or ""
            await report_failure(
                parts.events, message, sid, "provider_away", f"the model provider {plain_reason(error)}"
            )
            await parts.replies.deliver(message, waiting_notice(error))
        raise RetryLater(failure.delay)
    log.warning(
        "%s: the model provider stayed away for %.0fs; the waiting messages are stored unanswered",
        chat,
        failure.waited,
    )
    return await _stored_unanswered(parts, lock, entries, error, failure.waited)


async def _tell_waiting(parts: TurnParts, message: IncomingMessage, error: ProviderError) -> None:
    """Tell the message's adapter, at every failed try, that it waits for the provider: a sender waiting for this
    very message's answer (an API request) hears it whenever its message's turn fails, while the chat's notice
    is sent once an outage. Telling is best effort: the message waits all the same."""
    adapter = parts.adapters.get(message.platform)
    if adapter is None:
        return
    refusal = TurnRefusal("provider_away", waiting_notice(error), retry_after=error.retry_after)
    try:
        await adapter.turn_refused(message.chat_id, refusal, reply_to=message.update_id)
    except Exception:
        log.warning("%s: the adapter could not be told the provider is away", message.chat, exc_info=True)


async def _stored_unanswered(
    parts: TurnParts, lock: Lock, entries: ParsedEntries, error: ProviderError, waited: float
) -> TurnEnd:
    """The provider stayed away for the whole bound: the head and what waited behind it are stored, answered
    with one final notice (and what a cut-short attempt made, which is still the person's)."""
    store, chat = parts.store, lock.chat
    sid, meta, _ = await store.snapshot(chat, messages=False)
    batch = await take_backlog(
        parts.inbox, entries, max_messages=parts.options.coalesce_max_messages
    )  # what waited behind the head leaves with it
    waiting = [entries.head, *(m for _, m in batch)]
    ids = [m.entry_id for m in waiting]
    reply = final_notice(error, waited)
    made = meta.partial_items if meta.partial_entry_id else []  # what a cut-short attempt made is still theirs
    if meta.last_entry_id != ids[-1]:
        chat_turn = ChatTurn(chat, entries.head, lock, sid, meta)
        unstored = [m for m in waiting if not meta.holds(m.entry_id)]  # a kept partial turn holds its message
        stored = await parts.bound.stored_form(chat_turn, parts.model(chat_turn), unstored)
        await store.append(
            chat,
            sid,
            stored,
            lock=lock,
            meta={
                "last_entry_id": ids[-1],
                **reply_meta(reply, made),
                "partial_entry_id": None,
                "partial_items": None,
                "batch_entry_ids": "\n".join(ids) if batch else None,
            },
        )
    await parts.provider.stopped_waiting(chat)
    why = f"the model provider {plain_reason(error)} for {waited:.0f} s; messages stored unanswered"
    await report_failure(parts.events, entries.head, sid, "provider_gave_up", why)
    # Journaled under the entry the reply is recorded for (the batch's last), which a resend after a crash uses.
    return TurnEnd(
        sid,
        reply,
        committed=True,
        stream=parts.replies.stream(waiting[-1], lock, previews=False),
        batch=tuple((raw, m.entry_id) for raw, m in batch),
        items=tuple(made),
        answers=waiting[-1],
    )
