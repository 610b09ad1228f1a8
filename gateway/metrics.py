"""The operator's numbers: ``/metrics`` in Prometheus text format, ``/healthz`` for probes, and the
same figures for the operator's gateway page.

Counters come from the event bus (turns, compactions by trigger, tokens folded away, prompt,
completion and cache tokens, dollars, provider errors); gauges from the runner (chats being worked
on here), from Redis (its memory) and from the shared send budget (each bot-wide bucket's tokens
and pause); the process's own metrics from prometheus_client's collectors, which also write the
format. :class:`GatewayWatch` takes one sample of all of it, so a scrape and a page agree.

A process serving several bots (``bots:``) has a watch per running bot: each ``foldgate_*`` figure then
carries a ``bot`` label, and ``foldgate_bot_up`` says which bots run; without ``bots:`` nothing is labelled.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from redis.exceptions import RedisError

from gateway.delivery.budget import Bucket, BucketState, SendBudget
from gateway.events import Event, EventBus, TurnEvent
from gateway.worker.runner import GatewayRunner

COUNTER_HELP = {
    "turns": "Messages answered by this process",
    "prompt_tokens": "Prompt tokens reported by the provider",
    "completion_tokens": "Completion tokens reported by the provider",
    "cache_read_tokens": "Prompt tokens read from the provider's cache",
    "cache_write_tokens": "Prompt tokens written to the provider's cache",
    "tokens_folded": "Tokens removed from live contexts by compaction",
    "cost_usd": "Dollars the answered turns cost at list prices",
    "cache_saved_usd": "Dollars prompt caching saved against no caching",
    "compactions_hygiene": "Compactions by the gateway's 85% hygiene pass",
    "compactions_in_loop": "Compactions inside the agent's tool loop",
    "compactions_manual": "Compactions requested with /compress",
    "compactions_idle": "Compactions after an idle gap",
    "compactions_native": "Compactions the provider made of a conversation itself",
    "provider_errors": "Turns the model provider failed part-way, and outages of the provider as they began",
    "turns_failed": "Messages given up: their handling kept failing, or the provider stayed away too long",
    "tool_calls": "Calls of MCP servers' tools the agent made",
    "tool_calls_failed": "Tool calls answered with an error, past their timeout, or with their server away",
    "memory_writes_remember": "Memory entries people changed themselves (/remember, /forget)",
    "memory_writes_tool": "Memory entries the model changed with its memory tool",
    "memory_writes_compaction": "Memory entries compactions kept from what they folded",
    "memory_writes_operator": "Memory entries an operator removed in the operator view",
}

#: Seconds over which the turn rate is averaged.
RATE_WINDOW_SECONDS = 60


class TurnRate:
    """Turns answered per second over the last minute, counted in one-second buckets (subscribe :meth:`observe`)."""

    def __init__(self, window_seconds: int = RATE_WINDOW_SECONDS) -> None:
        self.window = window_seconds
        self.started = time.monotonic()
        self._buckets: deque[list[int]] = deque()  # [second, turns], oldest first

    def observe(self, event: Event) -> None:
        if not isinstance(event, TurnEvent):
            return
        second = int(time.monotonic())
        if self._buckets and self._buckets[-1][0] == second:
            self._buckets[-1][1] += 1
        else:
            self._buckets.append([second, 1])
        self._forget(second)

    def _forget(self, now: int) -> None:
        while self._buckets and self._buckets[0][0] <= now - self.window:
            self._buckets.popleft()

    def per_second(self) -> float:
        now = time.monotonic()
        self._forget(int(now))
        span = min(float(self.window), max(1.0, now - self.started))
        return sum(turns for _, turns in self._buckets) / span


@dataclass(frozen=True)
class GatewayFigures:
    """One sample of everything the operator sees of this process and the shared parts."""

    worker_id: str
    uptime_seconds: float
    counters: dict[str, float]
    turns_per_second: float
    chats_running: int
    #: Bytes Redis uses (None when it could not be asked).
    redis_used_memory: int | None
    budgets: list[BucketState] = field(default_factory=list)


class GatewayWatch:
    """Takes :class:`GatewayFigures` samples; the Prometheus collector reads the latest one."""

    def __init__(
        self, events: EventBus, runner: GatewayRunner, budget: SendBudget | None = None, buckets: Sequence[Bucket] = ()
    ) -> None:
        self.events = events
        self.runner = runner
        self.budget = budget
        self.buckets = list(buckets)
        self.rate = TurnRate()
        events.subscribe(self.rate.observe)
        self.latest: GatewayFigures | None = None

    async def sample(self) -> GatewayFigures:
        try:
            memory: int | None = int((await self.runner.store.redis.info("memory"))["used_memory"])
        except (RedisError, OSError, KeyError, ValueError):
            memory = None
        budgets: list[BucketState] = []
        if self.budget is not None:
            for bucket in self.buckets:
                try:
                    budgets.append(await self.budget.peek(bucket))
                except (RedisError, OSError):
                    continue
        self.latest = GatewayFigures(
            worker_id=self.runner.worker_id,
            uptime_seconds=time.time() - self.runner.started_at,
            counters={name: float(self.events.counters.get(name, 0)) for name in COUNTER_HELP},
            turns_per_second=self.rate.per_second(),
            chats_running=self.runner.busy_chats,
            redis_used_memory=memory,
            budgets=budgets,
        )
        return self.latest


class ApiRequests:
    """Requests the OpenAI-compatible API answered in this process, by endpoint and status (``foldgate_api_requests``).

    Counted as each answer ends, so a streamed answer counts once, with the status its headers carried."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, int], int] = {}

    def count(self, endpoint: str, status: int) -> None:
        self.counts[endpoint, status] = self.counts.get((endpoint, status), 0) + 1

    def metric(self) -> Metric:
        family = CounterMetricFamily(
            "foldgate_api_requests", "Requests the OpenAI-compatible API answered", labels=["endpoint", "status"]
        )
        for (endpoint, status), value in sorted(self.counts.items()):
            family.add_metric([endpoint, str(status)], value)
        return family


@dataclass(frozen=True)
class BotWatches:
    """The watches a scrape reads, asked for at every scrape: a reload adds, replaces and removes bots."""

    #: Each running bot's watch, by name, in the configuration's order.
    watches: Callable[[], dict[str, GatewayWatch]]
    #: Every configured bot's name and whether it runs; None for a deployment without ``bots:``, whose
    #: figures then carry no ``bot`` label (its dashboards keep working).
    states: Callable[[], dict[str, bool] | None] = lambda: None
    #: The API's request counts when this process serves the API (one count for the process, not per bot).
    api: ApiRequests | None = None

    @classmethod
    def one(cls, watch: GatewayWatch) -> BotWatches:
        return cls(lambda: {"": watch})


class GatewayCollector(Collector):
    """Yields each bot's latest sample (nothing kept twice), labelled ``bot`` when bots are configured."""

    def __init__(self, watches: GatewayWatch | BotWatches) -> None:
        self.watches = BotWatches.one(watches) if isinstance(watches, GatewayWatch) else watches

    def collect(self) -> Iterator[Metric]:
        if self.watches.api is not None:
            yield self.watches.api.metric()
        states = self.watches.states()
        if states is not None:
            up = GaugeMetricFamily(
                "foldgate_bot_up",
                "1 while the bot takes messages in (running or degraded), 0 when it failed",
                labels=["bot"],
            )
            for name, running in states.items():
                up.add_metric([name], 1 if running else 0)
            yield up
        labelled = [
            ([name] if states is not None else [], watch.latest)
            for name, watch in self.watches.watches().items()
            if watch.latest is not None
        ]
        if labelled:
            yield from self._figures(labelled, [] if states is None else ["bot"])

    @staticmethod
    def _figures(sampled: list[tuple[list[str], GatewayFigures]], bot: list[str]) -> Iterator[Metric]:
        """Each family with one sample per bot; ``bot`` is the label's name, or nothing for one unlabelled bot."""
        for name, help_text in COUNTER_HELP.items():
            counter = CounterMetricFamily(f"foldgate_{name}", help_text, labels=bot)
            for labels, figures in sampled:
                value = figures.counters.get(name, 0.0)
                counter.add_metric(labels, int(value) if value.is_integer() else round(value, 6))
            yield counter
        running = GaugeMetricFamily("foldgate_chats_running", "Chats whose turn runs in this process now", labels=bot)
        rate = GaugeMetricFamily(
            "foldgate_turns_per_second", f"Turns answered per second over the last {RATE_WINDOW_SECONDS} s", labels=bot
        )
        memory = GaugeMetricFamily("foldgate_redis_used_memory_bytes", "Memory the Redis server uses")  # one server
        tokens = GaugeMetricFamily(
            "foldgate_send_budget_tokens", "Sends a bot-wide bucket would grant at once", labels=[*bot, "bucket"]
        )
        paused = GaugeMetricFamily(
            "foldgate_send_budget_paused_seconds",
            "Seconds a platform's 429 still pauses a bucket",
            labels=[*bot, "bucket"],
        )
        for labels, figures in sampled:
            running.add_metric(labels, figures.chats_running)
            rate.add_metric(labels, round(figures.turns_per_second, 3))
            if figures.redis_used_memory is not None and not memory.samples:  # every bot's sample asks the same server
                memory.add_metric([], figures.redis_used_memory)
            for state in figures.budgets:
                bucket = f"{state.bucket.key_tag}:{state.bucket.name}"
                tokens.add_metric([*labels, bucket], round(state.tokens, 3))
                paused.add_metric([*labels, bucket], round(state.paused_seconds, 3))
        yield running
        yield rate
        if memory.samples:  # Redis could not be asked: no figure rather than a made-up one
            yield memory
        yield tokens
        yield paused


def registry_for(watches: GatewayWatch | BotWatches) -> CollectorRegistry:
    """foldgate's metrics and the process's own (CPU, memory, open files, garbage collection), the latter once."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GatewayCollector(watches))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


def add_metrics_routes(app: web.Application, watches: GatewayWatch | BotWatches) -> None:
    """``/metrics`` (a fresh sample of each running bot each scrape) and ``/healthz`` (Redis answers)."""
    source = BotWatches.one(watches) if isinstance(watches, GatewayWatch) else watches
    registry = registry_for(source)

    async def metrics(_request: web.Request) -> web.Response:
        await asyncio.gather(*(watch.sample() for watch in source.watches().values()))
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_request: web.Request) -> web.Response:
        # every bot of the process shares one connection: any running bot's runner asks the same Redis
        runner = next((watch.runner for watch in source.watches().values()), None)
        if runner is None:
            return web.json_response({"ok": False, "redis": "no bot is running"}, status=503)
        try:
            await runner.store.redis.ping()
        except Exception as error:  # the probe reports it; it must not crash the endpoint
            return web.json_response({"ok": False, "redis": str(error)}, status=503)
        return web.json_response({"ok": True, "worker": runner.worker_id})

    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
