"""What a turn tells the rest of the gateway: its event with its cost and what caching saved, the compactions
the provider made during it, each MCP tool call, and a failure.

The activity log, the operator view and the metrics read these events; nothing here changes a session.
"""

from __future__ import annotations

import time

from agent.pricing import UnknownPrice, cost, savings
from agent.tools.mcp import CallRecord
from gateway.events import CompressEvent, EventBus, FailureKind, ToolCallEvent, TurnErrorEvent, TurnEvent
from gateway.platforms.base import IncomingMessage
from gateway.worker.chat_turn import Answer, ChatTurn, Prepared
from gateway.worker.hygiene import estimate_session_tokens
from gateway.worker.parts import TurnParts


async def report(parts: TurnParts, turn: ChatTurn, prepared: Prepared, answer: Answer, *, started: float) -> None:
    """The turn's event (with its cost and what caching saved, the context's size once committed and what
    went wrong with the model call), after the compactions the provider made of the conversation during it,
    if any. ``started`` is when the turn began (``time.perf_counter()``)."""
    result, model = answer.result, prepared.model
    usage, ttl, events = result.usage, parts.spend.cache_ttl, parts.events
    try:
        spent, saved = float(cost(usage, model, ttl)), float(savings(usage, model, ttl))
    except UnknownPrice:
        spent = saved = 0.0
    for _ in range(result.native_compactions):  # sizes known only for the turn as a whole
        await events.emit(
            CompressEvent(
                platform=turn.message.platform,
                chat=turn.chat,
                session_id=turn.session_id,
                old_session_id="",
                in_place=True,
                compression_count=prepared.engine.compression_count,
                trigger="native",
                tokens_before=estimate_session_tokens(turn.meta)[0],
                tokens_after=result.last_usage.prompt_tokens,
                summarizer="the provider",
            )
        )
    await events.emit(
        TurnEvent(
            platform=turn.message.platform,
            chat=turn.chat,
            session_id=turn.session_id,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            latency_ms=(time.perf_counter() - started) * 1000,
            model=model,
            cost_usd=spent,
            saved_usd=saved,
            context_tokens=answer.context_tokens,
            context_window=parts.agents.context_length(model),
            error=answer.failure,
        )
    )


async def report_failure(
    events: EventBus, message: IncomingMessage, session_id: str, kind: FailureKind, error: str
) -> None:
    """The event of a turn that failed (see :mod:`gateway.worker.failures`)."""
    await events.emit(
        TurnErrorEvent(platform=message.platform, chat=message.chat, session_id=session_id, kind=kind, error=error)
    )


def tool_called(turn: ChatTurn, call: CallRecord) -> ToolCallEvent:
    """The event of one MCP tool call: who made it, which tool, how it ended."""
    return ToolCallEvent(
        platform=turn.message.platform,
        chat=turn.chat,
        session_id=turn.session_id,
        user_id=turn.message.user_id,
        server=call.server,
        tool=call.tool,
        argument_bytes=call.argument_bytes,
        outcome=call.outcome,
        seconds=round(call.seconds, 4),
    )
