"""The agent's turn: streamed to the reply's previews, stoppable with ``/stop``, and ended one of four ways.

It answers; or it goes over a budget (the message is kept, and the chat is told once per budget
period); or the provider is away (what the turn had done is kept for its retry, and
:class:`~gateway.outage.ProviderDown` hands the entry to :mod:`gateway.worker.failures`); or the model
call fails otherwise (what the turn did before is committed like any turn, and the reply says
what happened in plain words).
"""

from __future__ import annotations

import contextlib
import logging

from agent.llm.errors import plain_reason
from agent.loop import TurnFailed
from agent.metering import BudgetExceeded
from gateway.access.budgets import BudgetUsedUp
from gateway.delivery.stream import TurnWatch
from gateway.media.source import ChatMedia
from gateway.outage import ProviderDown, counts_as_down
from gateway.platforms.base import TurnRefusal
from gateway.session_source import TurnArchive
from gateway.startup_errors import explain
from gateway.worker.chat_turn import Answer, ChatTurn, Prepared
from gateway.worker.committing import keep_partial
from gateway.worker.parts import TurnParts
from gateway.worker.preparing import StopCheck

log = logging.getLogger(__name__)


async def run_agent(
    parts: TurnParts, turn: ChatTurn, prepared: Prepared, media: ChatMedia, stop_requested: StopCheck, since: float
) -> Answer:
    """The agent's turn; a provider that is away raises :class:`ProviderDown` (nothing is committed; ``since``
    is when the turn began, ``time.time()``), any other failure keeps what the turn did before it and says
    what happened."""
    agent = parts.agents.build_agent(
        prepared.engine,
        prepared.model,
        prepared.tools,
        media=media,
        max_images=parts.options.max_images,
        results=TurnArchive(parts.store, turn.chat, turn.session_id, turn.lock, turn.entry_id),
        result_limit=parts.bound.limit(prepared.model),
        meter=prepared.meter,
        system_prompt=turn.meta.system_prompt,
        memory=prepared.memory.system,
        turn_note=prepared.memory.note,
    )
    adapter = parts.adapters.get(turn.message.platform)
    if adapter:
        with contextlib.suppress(Exception):
            await adapter.typing(turn.message.chat_id)
    last = prepared.batch[-1][1] if prepared.batch else turn.message
    stream = parts.replies.stream(last, turn.lock, previews=parts.options.stream_replies)
    watch = TurnWatch(stream, stop_requested, stopped=prepared.stopped)
    try:
        # A stop ends the turn even while the provider sends nothing: the watch asks on its own meanwhile.
        result = await agent.run_turn(
            prepared.history + prepared.earlier,
            prepared.user_message,
            client_tools=turn.message.client_tools,
            tool_results=prepared.tool_results,
            on_event=watch,
            until_stopped=watch.until_stopped,
        )
        answer = Answer(result, result.reply, stream)
        await parts.provider.answered(turn.chat)
    except TurnFailed as failed:
        answer = await _failed(parts, turn, prepared, failed, since)
        answer.stream = stream
        if isinstance(failed.error, BudgetExceeded):
            return answer  # the budget's notice alone (or nothing): no notes above it
    if prepared.notes and (answer.reply or answer.result.outgoing):
        answer.reply = "\n\n".join([*prepared.notes, *([answer.reply] if answer.reply else [])])
    return answer


async def _failed(parts: TurnParts, turn: ChatTurn, prepared: Prepared, failed: TurnFailed, since: float) -> Answer:
    """How a turn whose model call failed ends (see the module docstring); raises :class:`ProviderDown` when
    the provider is away."""
    if isinstance(failed.error, BudgetExceeded):
        # The message is kept (with what the turn did before), and the chat is told once per budget period.
        key = failed.error.key
        told = await parts.told.first_for(turn.chat, f"over:{key}", 40 * 86_400) if key else True
        # the key names the period; no key: say it
        log.info("%s: over budget (%s); %s", turn.chat, key, "told" if told else "already told")
        if not told:
            return Answer(failed.partial, "", None, quiet=True)
        return Answer(failed.partial, failed.error.notice, None, refusal=_over_budget(failed.error))
    if counts_as_down(failed.error):
        # The entry stays at the head of the inbox and the turn is tried again once the provider is back,
        # from the tool results it had: those were paid for, and a tool may not be safe to run twice.
        await keep_partial(parts, turn, prepared, failed.partial)
        raise ProviderDown(failed.error, since) from failed.error
    # What the turn did before the failure (tool results already paid for, an in-loop compaction)
    # is committed like any turn; the person's message is kept and the reply says what happened.
    log.warning("chat %s: %s", turn.chat, explain(failed.error) or f"the model call failed: {failed.error}")
    reason = plain_reason(failed.error)
    reply = f"⚠️ The model provider {reason}. Your message is saved; please try again."
    return Answer(failed.partial, reply, None, failure=f"the model provider {reason}")


def _over_budget(error: BudgetExceeded) -> TurnRefusal | None:
    """The refusal a used-up budget's notice stands for (with when it resets); None for a budget only held by
    calls in flight, whose notice is a passing remark, not a refusal."""
    if not isinstance(error, BudgetUsedUp):
        return None
    return TurnRefusal("over_budget", error.notice, resets_at=error.ends.timestamp())
