"""One inbox entry, handled as named steps, to its end.

The runner claims a chat and hands its entries, raw, to :mod:`gateway.worker.held_chat`, which parses
each once and walks it through these steps. :meth:`Turn.run` ends in an
:class:`~gateway.worker.chat_turn.TurnEnd`, which the turn then delivers and finishes. In order:

1. :meth:`Turn.snapshot` — the chat's session pointer, meta and (for a model turn) live transcript;
2. :meth:`Turn.already_handled` — an entry committed before a crash only has its reply resent;
3. :meth:`Turn.command` — a chat command answers itself;
4. :meth:`Turn.prepare` — the backlog it takes in, the engine, idle compaction and hygiene, the bounded messages;
5. :meth:`Turn.run_agent` — the agent's turn, streamed, stoppable with ``/stop``;
6. :meth:`Turn.commit` — the new messages (or the in-loop compaction) committed with the reply, fenced;
7. :meth:`Turn.report` — the turn's event, with its cost and what caching saved;
8. :meth:`Turn.deliver` — the reply sent, through the stream that previewed it;
9. :meth:`Turn.finish` — the reply recorded as sent and the entry removed, one fenced step; the next entry.

A failed turn ends as :mod:`gateway.worker.failures` decides: tried again, given up with a notice, or
waited for while the provider is away.

Exactly-once replies: a turn's messages and its reply text are committed together with
the inbox entry's id (``last_entry_id``); after the reply is sent, ``replied_entry_id`` is
recorded, then the entry leaves the inbox. A worker that finds the head entry already
committed only (re)sends the recorded reply. The one window in which a reply can go out
twice is between the platform accepting it and ``replied_entry_id`` being written — one
Redis round trip.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from agent.context_engine import ContextEngine
from agent.llm.errors import plain_reason
from agent.loop import TurnFailed, TurnResult, TurnStopped
from agent.messages import Message
from agent.metering import BudgetExceeded
from agent.pricing import UnknownPrice, cost, savings
from agent.tokens import count_message, count_tools
from agent.tools import ToolRegistry, recovery_tools
from agent.tools.mcp import CallRecord, McpTools
from agent.transcript_repair import repair_for_turn
from gateway.access.budgets import ChatMeter, MeteredTranscriber
from gateway.commands import handle_command
from gateway.config.access import BudgetSettings
from gateway.config.tools import ToolsSettings
from gateway.delivery.replies import Replies
from gateway.delivery.stream import ReplyStream, TurnWatch
from gateway.events import CompressEvent, EventBus, FailureKind, ToolCallEvent, TurnErrorEvent, TurnEvent
from gateway.media.message import ItemIntake
from gateway.media.source import ChatMedia
from gateway.outage import ProviderDown, ProviderWatch, counts_as_down, is_redis_outage
from gateway.platforms.base import IncomingMessage, PlatformAdapter
from gateway.session_source import ChatHistory, TurnArchive
from gateway.startup_errors import explain
from gateway.store import CompactionCommit, Lock, SessionMeta, SessionStore, reply_meta
from gateway.store.approvals import Approvals
from gateway.store.inbox import Inbox
from gateway.store.spend import SpendStore
from gateway.store.told import ToldOnce
from gateway.worker.admission import verbatim_limit, verbatim_start
from gateway.worker.approval import ChatApprover
from gateway.worker.backlog import ALBUM_WINDOW, ParsedEntries, is_command, take_album, take_backlog
from gateway.worker.chat_turn import AgentFactory, ChatTurn, CommandHost, TurnEnd
from gateway.worker.compactions import Compactions
from gateway.worker.hygiene import estimate_session_tokens
from gateway.worker.long_messages import MessageBound

log = logging.getLogger(__name__)

#: What a person who sends faster than ``access.messages_per_minute`` is told, once a minute.
RATE_NOTICE = (
    "⏳ You are sending messages faster than I may answer them. I keep every one; ask again in a minute "
    "and I will answer."
)

Batch = list[tuple[str, IncomingMessage]]


@dataclass(frozen=True)
class TurnOptions:
    """The gateway settings a turn follows."""

    stream_replies: bool = True
    #: Messages already waiting when a turn starts join it (``gateway.coalesce_backlog``).
    coalesce_backlog: bool = False
    coalesce_max_messages: int = 5_000
    coalesce_max_tokens: int = 20_000
    cache_ttl: str = "5m"
    #: Seconds without a new part before an album whose parts come one by one is answered.
    album_window: float = ALBUM_WINDOW


@dataclass(frozen=True)
class TurnParts:
    """What every turn of this process shares."""

    store: SessionStore
    #: The chats' inboxes: the backlog a turn takes in, and the ``/stop`` it honours.
    inbox: Inbox
    agents: AgentFactory
    events: EventBus
    #: What a chat command may use of the worker that runs it; handed to commands, never used by the turn itself.
    command_host: CommandHost
    adapters: Mapping[str, PlatformAdapter]
    replies: Replies
    bound: MessageBound
    compactions: Compactions
    provider: ProviderWatch
    #: The chats' items: stored, read back for the agent (fetched again once dropped); how many one request carries.
    items: ItemIntake
    max_images: int
    options: TurnOptions = field(default_factory=TurnOptions)
    #: The MCP servers of this process (None: none configured), and which of them each chat may use.
    mcp: McpTools | None = None
    tool_access: ToolsSettings = field(default_factory=ToolsSettings)
    #: Where a call whose policy is ``ask`` waits for its answer.
    approvals: Approvals | None = None
    #: What each person and chat has spent, and the budgets it counts against (``access.budgets``).
    spending: SpendStore | None = None
    budgets: BudgetSettings = field(default_factory=BudgetSettings)
    #: What each chat was told once (the over-budget notice, once per budget period).
    told: ToldOnce | None = None


@dataclass
class Prepared:
    """A model turn ready to run: what the agent gets and what its commit records."""

    model: str
    engine: ContextEngine
    tools: ToolRegistry
    history: list[Message]
    #: Messages of a coalesced backlog before the last one that the request carries, bounded, stored with the turn.
    earlier: list[Message]
    #: None when the turn continues one whose message and tool results are stored
    #: (:attr:`SessionMeta.partial_entry_id`).
    user_message: Message | None
    batch: Batch
    #: What the person is told above the reply (a message too long to read whole).
    notes: list[str]
    #: A ``/stop`` that came while hygiene wrote its summary: the agent ends the turn before any request.
    stopped: TurnStopped | None = None
    #: Meters the turn's model calls against the budgets that apply (None: no budget does).
    meter: ChatMeter | None = None


class Turn:
    """One inbox entry's handling (see the module docstring for the steps)."""

    def __init__(self, parts: TurnParts, chat: str, lock: Lock, entries: ParsedEntries) -> None:
        """``entries`` holds the entry handed in, parsed: every entry the turn reads is parsed there once."""
        self.parts = parts
        self.store = parts.store
        self.agents = parts.agents
        self.chat, self.lock = chat, lock
        self.entries = entries
        self.message = entries.head
        self.started = time.perf_counter()
        self.since = time.time()  # a /stop from now on is this turn's, even one sent during a compaction first
        #: The context's size once committed (as hygiene will judge it), and what went wrong with the model call.
        self.committed_tokens = 0
        #: The turn stores its message and sends nothing (over budget, and the chat was told so already).
        self.quiet = False
        self.failure = ""
        items = parts.items
        #: The chat's items as the agent reads them, keeping what the model and its tools make.
        self.media = ChatMedia(items.store, chat, items.fetch_again, items.keep_made)

    async def run(self) -> TurnEnd:
        """The entry handled; raises :class:`ProviderDown` when the provider is away."""
        turn, history = await self.snapshot()
        outcome = self.already_handled(turn) or await self.command(turn)
        if outcome is not None:
            return outcome
        if not self.message.respond:
            return await self.store_unanswered(turn)
        prepared = await self.prepare(turn, history)
        result, reply, stream = await self.run_agent(turn, prepared)
        reply, items = await self.commit(turn, prepared, result, reply)
        await self.report(turn, prepared, result)
        return TurnEnd(
            turn.session_id,
            None if self.quiet else reply,
            committed=True,
            stream=stream,
            batch=tuple((raw, m.entry_id) for raw, m in prepared.batch),
            items=tuple(items),
            answers=prepared.batch[-1][1] if prepared.batch else None,
        )

    async def snapshot(self) -> tuple[ChatTurn, list[Message]]:
        wants_model = self.message.respond and not is_command(self.message)
        sid, meta, history = await self.store.snapshot(self.chat, messages=wants_model)
        return self.chat_turn(sid, meta), history

    def chat_turn(self, session_id: str, meta: SessionMeta) -> ChatTurn:
        """What this entry's handling works with in session ``session_id`` (what commands receive too)."""
        return ChatTurn(self.parts.command_host, self.chat, self.message, self.lock, session_id, meta)

    def already_handled(self, turn: ChatTurn) -> TurnEnd | None:
        """An entry committed before a crash: only its reply may be missing, sent through the reply's journal
        so what the crashed attempt delivered is not sent again."""
        meta = turn.meta
        if meta.last_entry_id == turn.entry_id:
            missing = meta.replied_entry_id != turn.entry_id and bool(meta.last_reply or meta.last_reply_items)
            stream = self.parts.replies.stream(self.message, self.lock, previews=False) if missing else None
            return TurnEnd(
                turn.session_id,
                (meta.last_reply or "") if missing else None,
                committed=True,
                stream=stream,
                items=tuple(meta.last_reply_items) if missing else (),
            )
        if meta.took(turn.entry_id):  # taken into a turn before a crash
            return TurnEnd(turn.session_id, None, committed=True, silent=True)
        return None

    async def command(self, turn: ChatTurn) -> TurnEnd | None:
        reply = await handle_command(turn)
        if reply is None:
            return None
        # Recorded like a turn's reply: a retry after a crash resends it instead of running the command again.
        await self.store.update_meta(
            self.chat, turn.session_id, lock=self.lock, last_entry_id=turn.entry_id, **reply_meta(reply)
        )
        return TurnEnd(turn.session_id, reply, committed=True)

    async def store_unanswered(self, turn: ChatTurn) -> TurnEnd:
        """A message that asks for no reply (a group message not addressed to the bot) joins the session."""
        bound = self.parts.bound
        stored = await bound.bounded(turn, self.message, bound.limit(self.model(turn)), [])
        await self.store.append(
            self.chat,
            turn.session_id,
            [stored],
            lock=self.lock,
            meta={"last_entry_id": turn.entry_id, "replied_entry_id": turn.entry_id},
        )
        told_once = self.parts.told
        if (
            self.message.limited
            and told_once is not None
            and await told_once.first_for(self.chat, f"rate:{self.message.user_id}", 60)
        ):
            return TurnEnd(turn.session_id, RATE_NOTICE, committed=False)
        return TurnEnd(turn.session_id, None, committed=False)

    async def prepare(self, turn: ChatTurn, history: list[Message]) -> Prepared:
        """The backlog the turn takes in, the engine and its tools, idle compaction and hygiene over the session
        and the request together, and the bounded messages: a request whose estimate would pass the hygiene
        threshold is never handed to the agent."""
        options, bound = self.parts.options, self.parts.bound
        continues = turn.meta.partial_entry_id == turn.entry_id  # its message and tool results are stored already
        batch: Batch = []
        if self.message.album and not continues:  # its other parts came (or come) as messages of their own
            batch = await take_album(self.parts.inbox, self.entries, window=options.album_window)
        elif options.coalesce_backlog and not continues:
            batch = await take_backlog(self.parts.inbox, self.entries, max_messages=options.coalesce_max_messages)
        model = self.model(turn)
        await self.agents.refresh_windows()
        window = self.agents.context_length(model)
        archive = ChatHistory(self.store, self.chat, turn.session_id)
        notes: list[str] = []
        meter = self._meter(notes)
        engine = self.agents.build_engine(model, turn.meta.engine_state, archive, meter)
        tools = await self._tools(turn)
        # Checked as the provider will check it: one broken pair must not fail this and every later turn.
        history = await repair_for_turn(self.store, self.chat, turn.session_id, turn.meta.version, history)
        limit = bound.limit(model)
        incoming = [] if continues else [self.message, *(m for _, m in batch)]
        sizes = [bound.size(m, limit) for m in incoming]
        start = verbatim_start(sizes, verbatim_limit(options.coalesce_max_tokens, window))
        if start:
            history = await self._store_ahead(turn, history, incoming[:start], limit, notes)
        pending = sum(sizes[start:]) + count_tools([*tools.schemas(), *engine.get_tool_schemas()])
        stopped = None
        try:
            compacted = await self.parts.compactions.before_turn(
                turn,
                engine,
                window,
                history,
                pending_tokens=pending,
                until_stopped=TurnWatch(None, self._stop_requested).until_stopped,
            )
        except TurnStopped as stop:  # a summary can take a minute; the session stays as it was
            log.info("%s: /stop while the session was being compacted before the turn; nothing compacted", self.chat)
            compacted, stopped = None, stop
        except BudgetExceeded:  # the summary would go over the budget: the agent's own call says so to the person
            log.info("%s: the compaction before the turn was not made: the budget is spent", self.chat)
            compacted = None
        history = compacted or history
        archive.session_id = turn.session_id  # a rotating compaction moved the chat to a new session
        # Bounded after that rotation, so a long message's original is archived in the session it belongs to.
        rest = incoming[start:]
        hears = self._transcriber(meter)
        earlier = [await bound.bounded(turn, m, limit, notes, transcriber=hears) for m in rest[:-1]]
        user_message = await bound.bounded(turn, rest[-1], limit, notes, transcriber=hears) if rest else None
        return Prepared(model, engine, tools, history, earlier, user_message, batch, notes, stopped, meter)

    def _transcriber(self, meter: ChatMeter | None) -> MeteredTranscriber | None:
        """The intake's transcriber metered against this turn's budgets (None: no budget, or voice is not heard)."""
        transcriber = self.parts.items.transcriber
        return MeteredTranscriber(transcriber, meter) if meter is not None and transcriber is not None else None

    def _meter(self, notes: list[str]) -> ChatMeter | None:
        """The meter of this turn's model calls, when a budget applies to them."""
        if self.parts.spending is None:
            return None
        meter = ChatMeter(
            self.parts.spending, self.parts.budgets, self.message, cache_ttl=self.parts.options.cache_ttl, notes=notes
        )
        return meter if meter.active else None

    async def _store_ahead(
        self, turn: ChatTurn, history: list[Message], messages: list[IncomingMessage], limit: int, notes: list[str]
    ) -> list[Message]:
        """Store the older part of a backlog too large for the request in the session before hygiene weighs it;
        the history with them. Recorded as taken in, so a turn retried after a crash skips them, not repeats them."""
        stored = [await self.parts.bound.bounded(turn, m, limit, notes) for m in messages]
        ids = [m.entry_id for m in messages]
        await self.store.append(
            self.chat,
            turn.session_id,
            stored,
            lock=self.lock,
            meta={"last_entry_id": ids[-1], "replied_entry_id": ids[-1], "batch_entry_ids": "\n".join(ids)},
        )
        log.info("%s: %d messages of the backlog stored ahead of the turn's request", self.chat, len(messages))
        turn.meta = await self.store.meta(self.chat, turn.session_id)
        return [*history, *stored]

    async def _stop_requested(self) -> bool:
        """Whether a ``/stop`` arrived for the chat since this turn began (honouring it clears it)."""
        inbox = self.parts.inbox
        at = await inbox.stop_requested_at(self.chat)
        if at is None or at < self.since:
            return False
        await inbox.clear_stop(self.chat)
        return True

    async def _tools(self, turn: ChatTurn) -> ToolRegistry:
        """The recovery tools, and the tools of the MCP servers this chat may use (``tools.allow``)."""
        tools = ToolRegistry(propagate=is_redis_outage)  # Redis away: the turn waits for it, like the rest of the path
        for tool in recovery_tools(ChatHistory(self.store, self.chat, turn.session_id, every_session=True)):
            tools.add(tool)
        mcp = self.parts.mcp
        if mcp is not None:
            servers = self.parts.tool_access.servers_for(self.chat)
            approvals = self.parts.approvals
            approver = (
                None
                if approvals is None
                else ChatApprover(
                    approvals,
                    self.parts.adapters.get(self.message.platform),
                    self.message,
                    self.parts.tool_access.confirm_timeout_seconds,
                )
            )
            for tool in await mcp.tools(servers, self.media, functools.partial(self._tool_called, turn), approver):
                tools.add(tool)
        return tools

    async def _tool_called(self, turn: ChatTurn, call: CallRecord) -> None:
        """One call of an MCP tool, into the chat's activity and the metrics: who, which tool, how it ended."""
        await self.parts.events.emit(
            ToolCallEvent(
                platform=self.message.platform,
                chat=self.chat,
                session_id=turn.session_id,
                user_id=self.message.user_id,
                server=call.server,
                tool=call.tool,
                argument_bytes=call.argument_bytes,
                outcome=call.outcome,
                seconds=round(call.seconds, 4),
            )
        )

    async def run_agent(self, turn: ChatTurn, prepared: Prepared) -> tuple[TurnResult, str, ReplyStream | None]:
        """The agent's turn; a provider that is away raises :class:`ProviderDown` (nothing is committed),
        any other failure keeps what the turn did before it and says what happened."""
        agent = self.agents.build_agent(
            prepared.engine,
            prepared.model,
            prepared.tools,
            media=self.media,
            max_images=self.parts.max_images,
            results=TurnArchive(self.store, self.chat, turn.session_id, self.lock, turn.entry_id),
            result_limit=self.parts.bound.limit(prepared.model),
            meter=prepared.meter,
        )
        adapter = self.parts.adapters.get(self.message.platform)
        if adapter:
            with contextlib.suppress(Exception):
                await adapter.typing(self.message.chat_id)
        last = prepared.batch[-1][1] if prepared.batch else self.message
        stream = self.parts.replies.stream(last, self.lock, previews=self.parts.options.stream_replies)
        watch = TurnWatch(stream, self._stop_requested, stopped=prepared.stopped)
        try:
            # A stop ends the turn even while the provider sends nothing: the watch asks on its own meanwhile.
            result = await agent.run_turn(
                prepared.history + prepared.earlier,
                prepared.user_message,
                on_event=watch,
                until_stopped=watch.until_stopped,
            )
            reply = result.reply
            await self.parts.provider.answered(self.chat)
        except TurnFailed as failed:
            if isinstance(failed.error, BudgetExceeded):
                # The message is kept (with what the turn did before), and the chat is told once per budget period.
                told_once = self.parts.told
                result = failed.partial
                told = (
                    await told_once.first_for(self.chat, f"over:{failed.error.key}", 40 * 86_400)
                    if told_once and failed.error.key
                    else True
                )  # the key names the period; no key: say it
                log.info("%s: over budget (%s); %s", self.chat, failed.error.key, "told" if told else "already told")
                self.quiet = not told
                return result, failed.error.notice if told else "", stream
            if counts_as_down(failed.error):
                # The entry stays at the head of the inbox and the turn is tried again once the provider is back,
                # from the tool results it had: those were paid for, and a tool may not be safe to run twice.
                await self.keep_partial(turn, prepared, failed.partial)
                raise ProviderDown(failed.error, self.since) from failed.error
            # What the turn did before the failure (tool results already paid for, an in-loop compaction)
            # is committed like any turn; the person's message is kept and the reply says what happened.
            result = failed.partial
            log.warning("chat %s: %s", self.chat, explain(failed.error) or f"the model call failed: {failed.error}")
            self.failure = f"the model provider {plain_reason(failed.error)}"
            reply = f"⚠️ The model provider {plain_reason(failed.error)}. Your message is saved; please try again."
        if prepared.notes and (reply or result.outgoing):
            reply = "\n\n".join([*prepared.notes, *([reply] if reply else [])])
        return result, reply, stream

    async def commit(
        self, turn: ChatTurn, prepared: Prepared, result: TurnResult, reply: str
    ) -> tuple[str, list[dict[str, Any]]]:
        """Commit the turn with its reply and the items it made for the person, fenced by the chat's lock; the
        reply and items to send (an earlier call's, when that call already committed this turn)."""
        # what the attempt the provider cut short had made for the person goes with this reply
        items = [*(turn.meta.partial_items if turn.meta.partial_entry_id else ()), *result.outgoing]
        fields = self._commit_fields(turn, prepared, result, reply, items)
        if turn.meta.partial_entry_id:
            fields["partial_entry_id"] = fields["partial_items"] = None
        commit = await self._store(turn, prepared, result, fields, compaction_id=f"{turn.entry_id}:turn")
        self.committed_tokens = _context_after(fields)
        if commit is None:
            return reply, items
        # the size the agent compacted at (its count; the session's estimate where the engine gives none)
        stats = prepared.engine.last_compaction
        before = (stats.tokens_before if stats is not None else 0) or estimate_session_tokens(turn.meta)[0]
        turn.session_id = commit.session_id
        if commit.replayed:  # an earlier call of this holder committed the turn: the reply is the one it recorded
            recorded = await self.store.meta(self.chat, commit.session_id)
            return recorded.last_reply or reply, recorded.last_reply_items
        after = cast(int, fields["tokens_at_report"])  # the count _store set
        await self.parts.compactions.announce(turn, prepared.engine, commit, result.messages, "in_loop", before, after)
        return reply, items

    async def keep_partial(self, turn: ChatTurn, prepared: Prepared, partial: TurnResult) -> None:
        """Store what a turn the provider failed had done — its messages, tool calls and results, an in-loop
        compaction — without a reply, marked so that its retry continues from there (:meth:`prepare`).
        A turn that ran no tool keeps nothing: its retry is the same turn again."""
        if not partial.compacted and not any(m.get("role") == "tool" for m in partial.new_messages):
            return
        fields = self._commit_fields(turn, prepared, partial, "", [])
        ids = [turn.entry_id, *(m.entry_id for _, m in prepared.batch)]
        del fields["last_entry_id"], fields["last_reply"], fields["last_reply_items"]
        fields["partial_entry_id"] = ids[-1]
        # sent with the reply of the retry, which continues from here (a second cut keeps both)
        kept = [*(turn.meta.partial_items if turn.meta.partial_entry_id else ()), *partial.outgoing]
        fields["partial_items"] = kept or None
        fields["batch_entry_ids"] = "\n".join(ids[:-1]) or None  # a retry lets these go silently, as taken in
        await self._store(turn, prepared, partial, fields, compaction_id=f"{turn.entry_id}:partial")
        log.info(
            "%s: the provider went away mid-turn; its %d tool results are kept for the retry",
            self.chat,
            sum(m.get("role") == "tool" for m in partial.messages[len(prepared.history) :]),
        )

    async def _store(
        self, turn: ChatTurn, prepared: Prepared, result: TurnResult, fields: dict[str, object], *, compaction_id: str
    ) -> CompactionCommit | None:
        """Write the turn's messages with ``fields``, fenced: appended, or the whole live list when the agent
        compacted (then the commit, else None). A lost lock raises StaleLock, and nothing is delivered then."""
        if not result.compacted:
            new_messages = prepared.earlier + result.new_messages
            fields["tokens_at_report"] = turn.meta.tokens + sum(count_message(m) for m in new_messages)
            await self.store.append(self.chat, turn.session_id, new_messages, lock=self.lock, meta=fields)
            return None
        fields["tokens_at_report"] = sum(count_message(m) for m in result.messages)
        return await self.store.commit_compaction(
            self.chat,
            turn.session_id,
            result.messages,
            lock=self.lock,
            in_place=self.parts.compactions.compression.in_place,
            compaction_id=compaction_id,
            meta=fields,
            archive_new=result.folded,
        )

    def _commit_fields(
        self, turn: ChatTurn, prepared: Prepared, result: TurnResult, reply: str, items: list[dict[str, Any]]
    ) -> dict[str, object]:
        meta = turn.meta
        totals = dict(meta.usage_totals)
        for name, value in result.usage.as_dict().items():
            totals[name] = int(totals.get(name, 0)) + value
        totals["turns"] = int(totals.get("turns", 0)) + 1
        batch_ids = [turn.entry_id, *(m.entry_id for _, m in prepared.batch)]
        fields: dict[str, object] = {
            "last_entry_id": batch_ids[-1],
            "batch_entry_ids": "\n".join(batch_ids) if prepared.batch else None,
            **reply_meta(reply, items),
            "usage_totals": totals,
            "last_prompt_tokens": result.last_usage.prompt_tokens + result.last_usage.completion_tokens or None,
        }
        engine_state = prepared.engine.export_state()
        if engine_state != meta.engine_state:  # unchanged most turns; a summary in it can be kilobytes
            fields["engine_state"] = engine_state
        return fields

    async def report(self, turn: ChatTurn, prepared: Prepared, result: TurnResult) -> None:
        """The turn's event (with its cost and what caching saved), after the compactions the provider made
        of the conversation during it, if any."""
        usage, ttl, model, events = result.usage, self.parts.options.cache_ttl, prepared.model, self.parts.events
        try:
            spent, saved = float(cost(usage, model, ttl)), float(savings(usage, model, ttl))
        except UnknownPrice:
            spent = saved = 0.0
        for _ in range(result.native_compactions):  # sizes known only for the turn as a whole
            await events.emit(
                CompressEvent(
                    platform=self.message.platform,
                    chat=self.chat,
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
                platform=self.message.platform,
                chat=self.chat,
                session_id=turn.session_id,
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
                cache_read_tokens=usage.cache_read_tokens,
                cache_write_tokens=usage.cache_write_tokens,
                latency_ms=(time.perf_counter() - self.started) * 1000,
                model=model,
                cost_usd=spent,
                saved_usd=saved,
                context_tokens=self.committed_tokens,
                context_window=self.agents.context_length(model),
                error=self.failure,
            )
        )

    async def report_failure(self, session_id: str, kind: FailureKind, error: str) -> None:
        """The event of a turn that failed (see :mod:`gateway.worker.failures`)."""
        await self.parts.events.emit(
            TurnErrorEvent(
                platform=self.message.platform,
                chat=self.chat,
                session_id=session_id,
                kind=kind,
                error=error,
            )
        )

    # ----------------------------------------------------------------- the ending

    async def deliver(self, outcome: TurnEnd) -> None:
        """Send the outcome's reply, if it has one, through the stream that previewed it. A whole reply (a
        command's, a give-up notice) goes through the reply's journal too, as its resend after a crash does:
        each chunk is recorded as the platform accepts it, so no retry posts it again."""
        replies = self.parts.replies
        replies.closed(self.chat)
        answers = outcome.answers or self.message  # a batch's reply is journaled under its last entry
        if outcome.reply is None:
            if outcome.stream is not None or outcome.items:  # answers nothing (over budget, told already): its
                # preview is taken down, and what it made before the budget ran out is still the person's
                await replies.deliver(answers, "", outcome.stream, items=outcome.items, lock=self.lock)
            return
        stream = outcome.stream or replies.stream(answers, self.lock, previews=False)
        replies.closed(self.chat)
        await replies.deliver(answers, outcome.reply, stream, items=outcome.items, lock=self.lock)

    async def finish(self, outcome: TurnEnd) -> str | None:
        """Record the reply as sent and remove the entry (a batch: its entries); the next entry.

        Recording the reply as sent and removing the entry are one fenced step; a crash between the send
        (:meth:`deliver`) and this step is the one window in which a reply can go out twice.
        """
        raw = self.entries.head_raw
        if outcome.batch:
            # The batch's last entry carries the reply: it is marked first, then the others leave silently
            # (a crash in between leaves them to be removed as already taken in).
            last_raw, last_id = outcome.batch[-1]
            others = [raw, *(entry for entry, _ in outcome.batch[:-1])]
            head = await self.store.finish_entry(
                self.lock, outcome.session_id, last_raw, ahead_for_next=False, replied_entry_id=last_id
            )
            for position, other in enumerate(others):  # only the last finish reads ahead for what follows
                head = await self.store.finish_entry(
                    self.lock, outcome.session_id, other, ahead_for_next=position == len(others) - 1
                )
            return head
        marker: dict[str, Any] = (
            {"replied_entry_id": self.message.entry_id} if outcome.committed and not outcome.silent else {}
        )
        return await self.store.finish_entry(self.lock, outcome.session_id, raw, **marker)

    def model(self, turn: ChatTurn) -> str:
        """The model the chat's session talks to."""
        return turn.meta.model or self.agents.default_model


def _context_after(fields: dict[str, object]) -> int:
    """The context's size as a commit's meta fields leave it: what hygiene will judge (the provider's
    report, else the stored count)."""
    # Both are ints (or None) as _commit_fields and _store set them; the dict holds other values too.
    return int(fields["last_prompt_tokens"] or fields["tokens_at_report"])  # type: ignore[call-overload]
