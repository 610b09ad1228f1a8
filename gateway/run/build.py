"""The one place a gateway's worker is built: every part the runner, its turns, its intake and the chat
commands work with, made once from the settings.

Nothing the worker uses carries a default of its own: each value comes from the configuration model
(:class:`gateway.config.Settings` and its sections), where each default is written once. So the
gateway ``foldgate run`` starts, the demo, replays, benchmarks and every test harness (all of which
open their gateway through :func:`gateway.run.assembly.open_on`) run the same parts with the same
values, and a test that wants another value says so in its settings.
"""

from __future__ import annotations

import functools
import os
import time
import uuid
from collections.abc import Mapping

from agent.http_options import HttpOptions
from agent.llm.embeddings import EmbeddingClient
from agent.llm.retry import RetryPolicy
from agent.tools.mcp import McpTools
from gateway.access.rates import MessageRate
from gateway.access.roles import Roles
from gateway.agents import AgentBuilder
from gateway.commands import CommandContext, handle_command
from gateway.config import Settings
from gateway.delivery.budget import SendBudget
from gateway.delivery.gate import gates
from gateway.delivery.replies import Replies
from gateway.events import EventBus
from gateway.media.message import ItemIntake
from gateway.media.transcribe import transcriber_from
from gateway.memory.block import MemoryReader
from gateway.memory.folds import FoldMemory
from gateway.outage import ChatOutages, Health, ProviderWatch
from gateway.platforms.base import PlatformAdapter
from gateway.store import SessionStore
from gateway.store.access import AccessLists
from gateway.store.approvals import Approvals
from gateway.store.buckets import TokenBuckets
from gateway.store.embeddings import EmbeddingStore
from gateway.store.inbox import Inbox
from gateway.store.media import MediaStore
from gateway.store.memory import MemoryStore
from gateway.store.person_chats import PersonChats
from gateway.store.spend import SpendStore
from gateway.store.taken import TakenRecords
from gateway.store.told import ToldOnce
from gateway.worker.compactions import Compactions
from gateway.worker.embedding import Embedder
from gateway.worker.intake import Admission
from gateway.worker.lock_keeper import LockKeeper
from gateway.worker.long_messages import MessageBound
from gateway.worker.meanings import ChatMeanings
from gateway.worker.parts import Spending, ToolAccess, TurnOptions, TurnParts, WorkerStatus
from gateway.worker.runner import GatewayRunner

#: How much longer than the provider outage bound an item's taken-in record is kept: a message that waited out
#: a whole outage still finds its items taken in when it is finally answered.
TAKEN_RECORD_MARGIN_SECONDS = 3600


def build_runner(
    settings: Settings,
    store: SessionStore,
    inbox: Inbox,
    agents: AgentBuilder,
    adapters: Mapping[str, PlatformAdapter],
    *,
    events: EventBus,
    budget: SendBudget,
) -> GatewayRunner:
    """The runner of one bot's gateway, not started: its turns' parts, its intake and its lock keeper, over
    ``store`` and ``inbox`` (one channel to Redis), for ``adapters`` (by short name), its replies paced by
    ``budget`` (every process shares it)."""
    gateway, channel, prefix = settings.gateway, store.channel, store.prefix
    adapters = dict(adapters)  # the runner's own: a caller's later change to its mapping reaches no turn
    redis_health = Health("Redis")
    status = WorkerStatus(uuid.uuid4().hex[:8], time.time())
    spend = Spending(SpendStore(channel, prefix), settings.access.budgets, settings.prompt_caching.cache_ttl)
    approvals = Approvals(channel, prefix)
    # Who the bot answers: admins, allowed and blocked people (the file's lists and the admins' changes).
    roles = Roles(settings.access, AccessLists(channel, prefix))
    memory = MemoryStore(channel, prefix, max_entry_chars=settings.memory.max_entry_chars)
    compactions = Compactions(store, events, settings.compression, FoldMemory(store, memory, events))
    items = _items(settings, store, agents, adapters)
    told = ToldOnce(channel, prefix)
    embedder, meanings = _embeddings(settings, store, spend, events)
    parts = TurnParts(
        store=store,
        inbox=inbox,
        agents=agents,
        events=events,
        adapters=adapters,
        # Replies and the files a turn made, paced by their chat's send budget (``delivery``).
        replies=Replies(store, adapters, gates(budget, settings.delivery), redis_health, items.store),
        compactions=compactions,
        # A message that failed because the provider is away is tried again for ``gateway.outage_retry_seconds``.
        provider=ProviderWatch(ChatOutages(channel, prefix, gateway.outage_retry_seconds)),
        items=items,
        # One message's bound (``gateway.max_message_tokens``): a longer one reaches the model as an excerpt.
        bound=MessageBound(store, gateway.max_message_tokens, agents, items, told),
        told=told,
        tools=_tool_access(settings, approvals),
        spend=spend,
        options=_options(settings),
        commands=functools.partial(
            handle_command, CommandContext(store, inbox, agents, events, compactions, roles, spend, status, memory)
        ),
        meanings=meanings,
        memory=MemoryReader(memory, settings.memory.max_tokens),
        person_chats=PersonChats(channel, prefix),
    )
    return GatewayRunner(
        parts,
        _admission(settings, inbox, roles, approvals, store),
        LockKeeper(store, inbox, gateway.lock_ttl_seconds, redis_health),
        status,
        redis_health=redis_health,
        max_chats=gateway.max_concurrent_chats,
        embedder=embedder,
    )


def _embeddings(
    settings: Settings, store: SessionStore, spend: Spending, events: EventBus
) -> tuple[Embedder | None, ChatMeanings | None]:
    """The background embedder of committed messages and the search by meaning over its vectors
    (``memory.embeddings``); neither when it is off, and then nothing is sent or stored."""
    clients = _embedding_clients(settings)
    if clients is None:
        return None, None
    batches, queries = clients
    vectors = EmbeddingStore(store.redis, store.channel, store.prefix)
    embedder = Embedder(store, vectors, batches, spend, batch_size=settings.memory.embeddings.batch_size)
    events.subscribe(embedder.observe)
    return embedder, ChatMeanings(vectors, queries, spend)


def meaning_search(settings: Settings, store: SessionStore) -> ChatMeanings | None:
    """Search by meaning over what the gateway embedded, for a reader outside it (``foldgate search``): its query
    is metered against the chat's budget as the gateway's are. None while ``memory.embeddings`` is off."""
    clients = _embedding_clients(settings)
    if clients is None:
        return None
    spend = Spending(
        SpendStore(store.channel, store.prefix), settings.access.budgets, settings.prompt_caching.cache_ttl
    )
    return ChatMeanings(EmbeddingStore(store.redis, store.channel, store.prefix), clients[1], spend)


def _embedding_clients(settings: Settings) -> tuple[EmbeddingClient, EmbeddingClient] | None:
    """The clients of ``memory.embeddings``: one for the batches (tried once more in place), one for queries
    (never tried again: the search goes by keywords instead of waiting); None while it is off."""
    config = settings.memory.embeddings
    if not config.enabled or not config.model:
        return None
    options = HttpOptions(config.timeout_seconds, min(10.0, config.timeout_seconds))
    route = {"model": config.model, "api_key": config.key() or None, "dimensions": config.dimensions}
    batches = EmbeddingClient(config.endpoint, **route, options=options, retry=RetryPolicy(max_retries=1))
    queries = EmbeddingClient(
        config.endpoint, **route, options=options, retry=RetryPolicy(max_retries=0), http=batches.http
    )
    return batches, queries


def _items(
    settings: Settings, store: SessionStore, agents: AgentBuilder, adapters: Mapping[str, PlatformAdapter]
) -> ItemIntake:
    """What people send besides text, taken in: every chat's photos, documents and voice kept by content hash
    (``media.max_bytes``, ``media.max_total_bytes``), voice heard (``media.transcription``; none when off),
    fetched again from its platform once dropped."""
    media = settings.media
    media_store = MediaStore(
        store.redis,
        store.prefix,
        max_bytes=media.max_bytes,
        max_total_bytes=media.max_total_bytes,
        channel=store.channel,
    )
    taken_ttl = int(settings.gateway.outage_retry_seconds) + TAKEN_RECORD_MARGIN_SECONDS
    return ItemIntake(
        media_store,
        media,
        transcriber_from(media.transcription, agents.windows.book),
        {name: adapter.fetch for name, adapter in adapters.items()},
        records=TakenRecords(store.channel, store.prefix, ttl_seconds=taken_ttl),
    )


def _options(settings: Settings) -> TurnOptions:
    """The settings a turn follows."""
    gateway = settings.gateway
    return TurnOptions(
        stream_replies=settings.delivery.stream_replies,
        coalesce_backlog=gateway.coalesce_backlog,
        coalesce_max_messages=gateway.coalesce_max_messages,
        coalesce_max_tokens=gateway.coalesce_max_tokens,
        max_images=settings.media.max_images_per_request,
    )


def _tool_access(settings: Settings, approvals: Approvals) -> ToolAccess:
    """The MCP servers the agent may use (``tools``): one session each in this process, opened at first use."""
    tools = settings.tools
    return ToolAccess(McpTools(tools.specs(os.environ)) if tools.mcp_servers else None, tools, approvals)


def _admission(settings: Settings, inbox: Inbox, roles: Roles, approvals: Approvals, store: SessionStore) -> Admission:
    """The intake: who is answered, how fast one person may be (``access.messages_per_minute``; none: no
    limit), the answers to the bot's questions, and the inbox put."""
    per_minute = settings.access.messages_per_minute
    rate = MessageRate(TokenBuckets(store.channel, store.prefix), per_minute, roles) if per_minute else None
    return Admission(inbox, roles, rate, approvals)
