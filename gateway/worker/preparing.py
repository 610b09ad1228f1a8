"""A model turn made ready: the backlog it takes in, the engine and its tools, compaction before the turn,
and the bounded messages.

Hygiene weighs the session and the request together, so a request whose estimate would pass its
threshold is never handed to the agent; the older part of a backlog too large for the request is
stored in the session first, where that weighing folds it into the summary.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable

from agent.context_engine import ContextEngine
from agent.loop import TurnStopped
from agent.messages import Message
from agent.metering import BudgetExceeded
from agent.tokens import count_messages, count_tools
from agent.tool_calls import answer_pending
from agent.tools import ToolRegistry, recovery_tools
from agent.tools.mcp import CallRecord
from agent.tools.memory import memory_tools
from agent.transcript_repair import repair_for_turn
from gateway.access.budgets import ChatMeter, MeteredTranscriber
from gateway.access.roles import person_of
from gateway.delivery.stream import TurnWatch
from gateway.media.source import ChatMedia
from gateway.memory.tools import TurnMemory
from gateway.outage import is_redis_outage
from gateway.person_history import PersonHistory
from gateway.platforms.base import IncomingMessage
from gateway.session_source import ChatHistory
from gateway.worker.approval import ChatApprover
from gateway.worker.backlog import ParsedEntries, take_album, take_backlog, verbatim_limit, verbatim_start
from gateway.worker.chat_turn import Batch, ChatTurn, Prepared
from gateway.worker.parts import TurnParts
from gateway.worker.remembering import memory_block, took_part
from gateway.worker.reporting import tool_called

log = logging.getLogger(__name__)

#: The smallest window whose requests carry the memory tools and ``session_search``'s ``my chats`` (about 300
#: tokens of schemas more): a smaller one keeps its room for the conversation.
PERSON_TOOLS_MIN_WINDOW = 4_096
#: Whether a ``/stop`` arrived for the chat since the turn began (honouring it clears it).
StopCheck = Callable[[], Awaitable[bool]]


async def prepare(
    parts: TurnParts,
    turn: ChatTurn,
    entries: ParsedEntries,
    history: list[Message],
    media: ChatMedia,
    stop_requested: StopCheck,
) -> Prepared:
    """The backlog the turn takes in, the engine and its tools, idle compaction and hygiene over the session
    and the request together, and the bounded messages."""
    options, bound, agents = parts.options, parts.bound, parts.agents
    continues = turn.meta.partial_entry_id == turn.entry_id  # its message and tool results are stored already
    results = [] if continues else [result.model_dump() for result in turn.message.tool_results]
    batch = [] if continues else await _taken_in(parts, entries)
    await took_part(parts, turn.chat, [turn.message, *(m for _, m in batch)])
    await _take_prompt(parts, turn, [turn.message, *(m for _, m in batch)])
    model = parts.model(turn)
    await agents.refresh_windows()
    window = agents.context_length(model)
    archive = ChatHistory(parts.store, turn.chat, turn.session_id)
    notes: list[str] = []
    meter = parts.spend.meter(turn.message, notes)
    engine = agents.build_engine(model, turn.meta.engine_state, archive, meter)
    tools = await chat_tools(parts, turn, media, window)
    # Checked as the provider will check it: one broken pair must not fail this and every later turn.
    # The calls the client's results answer are left pending for them, and the results checked before any cost.
    history = await repair_for_turn(
        parts.store, turn.chat, turn.session_id, turn.meta.version, history, keep_trailing_pending=bool(results)
    )
    answered = answer_pending(history, results) if results else []
    limit = bound.limit(model)
    incoming = [] if continues else [*_own_message(turn.message), *(m for _, m in batch)]
    sizes = [bound.size(m, limit) for m in incoming]
    start = verbatim_start(sizes, verbatim_limit(options.coalesce_max_tokens, window))
    if start:
        history = await _store_ahead(parts, turn, history, incoming[:start], limit, notes)
    offered = [*tools.schemas(), *engine.get_tool_schemas(), *turn.message.client_tools]
    before = await parts.memory.block(turn.message, turn.meta, window)  # the request carries it too
    pending = sum(sizes[start:]) + count_tools(offered) + count_messages(answered) + before.tokens
    compacted, stopped = await _compact_first(parts, turn, engine, window, history, pending, stop_requested)
    history = compacted or history
    archive.session_id = turn.session_id  # a rotating compaction moved the chat to a new session
    memory = await memory_block(parts, turn, notes, window, None if compacted else before)
    # Bounded after that rotation, so a long message's original is archived in the session it belongs to.
    rest = incoming[start:]
    hears = _transcriber(parts, meter)
    earlier = [await bound.bounded(turn, m, limit, notes, transcriber=hears) for m in rest[:-1]]
    user_message = await bound.bounded(turn, rest[-1], limit, notes, transcriber=hears) if rest else None
    return Prepared(model, engine, tools, history, earlier, user_message, batch, notes, stopped, meter, results, memory)


def _own_message(message: IncomingMessage) -> list[IncomingMessage]:
    """The entry's message as the person's turn in the request: none when it only brings the results of the
    client's tool calls (they start the turn instead)."""
    return [message] if message.text or message.items or not message.tool_results else []


async def _take_prompt(parts: TurnParts, turn: ChatTurn, messages: list[IncomingMessage]) -> None:
    """The newest system prompt the turn's messages bring becomes the session's (stored under the turn's lock,
    so a holder whose lock ran out cannot set it); the agent sends it instead of the bot's from this turn on."""
    prompt = next((m.system_prompt for m in reversed(messages) if m.system_prompt is not None), None)
    if prompt is None or prompt == turn.meta.system_prompt:
        return
    await parts.store.update_meta(turn.chat, turn.session_id, lock=turn.lock, system_prompt=prompt)
    turn.meta = await parts.store.meta(turn.chat, turn.session_id)


async def _taken_in(parts: TurnParts, entries: ParsedEntries) -> Batch:
    """The entries behind the head the turn takes in: the rest of its album (its parts came, or come, as
    messages of their own), else its backlog when ``gateway.coalesce_backlog`` is on. A client's message with
    tools or tool results of its own is answered alone: its answer is the client's, and its tools are its own."""
    if entries.head.client_tools or entries.head.tool_results:
        return []
    if entries.head.album:
        return await take_album(parts.inbox, entries)
    if parts.options.coalesce_backlog:
        return await take_backlog(parts.inbox, entries, max_messages=parts.options.coalesce_max_messages)
    return []


async def _compact_first(
    parts: TurnParts,
    turn: ChatTurn,
    engine: ContextEngine,
    window: int,
    history: list[Message],
    pending: int,
    stop_requested: StopCheck,
) -> tuple[list[Message] | None, TurnStopped | None]:
    """Idle compaction and hygiene before the agent sees the message: the compacted transcript (None when
    neither ran), and a ``/stop`` that came while the summary was written."""
    try:
        compacted = await parts.compactions.before_turn(
            turn,
            engine,
            window,
            history,
            pending_tokens=pending,
            until_stopped=TurnWatch(None, stop_requested).until_stopped,
        )
    except TurnStopped as stop:  # a summary can take a minute; the session stays as it was
        log.info("%s: /stop while the session was being compacted before the turn; nothing compacted", turn.chat)
        return None, stop
    except BudgetExceeded:  # the summary would go over the budget: the agent's own call says so to the person
        log.info("%s: the compaction before the turn was not made: the budget is spent", turn.chat)
        return None, None
    return compacted, None


def _transcriber(parts: TurnParts, meter: ChatMeter | None) -> MeteredTranscriber | None:
    """The intake's transcriber metered against this turn's budgets (None: no budget, or voice is not heard)."""
    transcriber = parts.items.transcriber
    return MeteredTranscriber(transcriber, meter) if meter is not None and transcriber is not None else None


async def _store_ahead(
    parts: TurnParts,
    turn: ChatTurn,
    history: list[Message],
    messages: list[IncomingMessage],
    limit: int,
    notes: list[str],
) -> list[Message]:
    """Store the older part of a backlog too large for the request in the session before hygiene weighs it;
    the history with them. Recorded as taken in, so a turn retried after a crash skips them, not repeats them."""
    stored = [await parts.bound.bounded(turn, m, limit, notes) for m in messages]
    ids = [m.entry_id for m in messages]
    await parts.store.append(
        turn.chat,
        turn.session_id,
        stored,
        lock=turn.lock,
        meta={"last_entry_id": ids[-1], "replied_entry_id": ids[-1], "batch_entry_ids": "\n".join(ids)},
    )
    log.info("%s: %d messages of the backlog stored ahead of the turn's request", turn.chat, len(messages))
    turn.meta = await parts.store.meta(turn.chat, turn.session_id)
    return [*history, *stored]


async def chat_tools(parts: TurnParts, turn: ChatTurn, media: ChatMedia, window: int) -> ToolRegistry:
    """The recovery tools, the memory tools, and the tools of the MCP servers this chat may use (``tools.allow``).
    Below :data:`PERSON_TOOLS_MIN_WINDOW` the model gets the chat's own recovery tools alone: the others' schemas
    would take a share of its window that the conversation needs more."""
    tools = ToolRegistry(propagate=is_redis_outage)  # Redis away: the turn waits for it, like the rest of the path
    message = turn.message
    here = ChatHistory(parts.store, turn.chat, turn.session_id, every_session=True, meaning=parts.meanings)
    everywhere = None
    personal = bool(message.user_id) and window >= PERSON_TOOLS_MIN_WINDOW
    if personal:  # what the person said in the other chats they took part in (``my chats``)
        everywhere = PersonHistory(
            parts.store, parts.person_chats, person_of(message), turn.chat, turn.session_id, meaning=parts.meanings
        )
    for tool in recovery_tools(here, everywhere=everywhere):
        tools.add(tool)
    if personal:  # the model's hands on the memory of the person it answers, and theirs only
        for tool in memory_tools(
            TurnMemory(parts.memory.store, parts.events, turn.message, turn.chat, turn.session_id)
        ):
            tools.add(tool)
    access = parts.tools
    if access.mcp is not None:
        servers = access.settings.servers_for(turn.chat)
        approver = ChatApprover(
            access.approvals,
            parts.adapters.get(message.platform),
            message,
            access.settings.confirm_timeout_seconds,
        )
        called = functools.partial(_tool_called, parts, turn)
        for tool in await access.mcp.tools(servers, media, called, approver):
            tools.add(tool)
    return tools


async def _tool_called(parts: TurnParts, turn: ChatTurn, call: CallRecord) -> None:
    """One call of an MCP tool, into the chat's activity and the metrics: who, which tool, how it ended."""
    await parts.events.emit(tool_called(turn, call))
