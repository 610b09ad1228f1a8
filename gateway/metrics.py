"""The operator's window (B5): ``/metrics`` in Prometheus text format and ``/healthz`` for probes.

Counters come from the event bus (compactions by trigger, tokens folded away, turns, prompt,
completion and cache tokens); gauges from the runner (chats being worked on here); the
process's own metrics from prometheus_client's collectors, which also writes the format.
Served only when ``gateway.metrics_port`` is set.
"""

from __future__ import annotations

from collections.abc import Iterator

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.events import EventBus
from gateway.runner import GatewayRunner

_HELP = {
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
}


class GatewayCollector(Collector):
    """Reads the event bus's counters and the runner's gauges at each scrape (nothing kept twice)."""

    def __init__(self, events: EventBus, runner: GatewayRunner) -> None:
        self.events = events
        self.runner = runner

    def collect(self) -> Iterator[Metric]:
        for name, help_text in _HELP.items():
            value = self.events.counters.get(name, 0)
            yield CounterMetricFamily(f"foldgate_{name}", help_text, value=value if isinstance(value, int) else round(value, 6))
        yield GaugeMetricFamily("foldgate_chats_running", "Chats whose turn runs in this process now",
                                value=self.runner.busy_chats)


def registry_for(events: EventBus, runner: GatewayRunner) -> CollectorRegistry:
    """foldgate's metrics and the process's own (CPU, memory, open files, garbage collection)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GatewayCollector(events, runner))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


def build_app(events: EventBus, runner: GatewayRunner) -> web.Application:
    registry = registry_for(events, runner)

    async def metrics(_request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_request: web.Request) -> web.Response:
        try:
            await runner.store.redis.ping()
        except Exception as error:  # the probe reports it; it must not crash the endpoint
            return web.json_response({"ok": False, "redis": str(error)}, status=503)
        return web.json_response({"ok": True, "worker": runner.worker_id})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    return app


async def serve_metrics(events: EventBus, runner: GatewayRunner, host: str, port: int) -> web.AppRunner:
    """Start the endpoint; the caller cleans it up with ``await app_runner.cleanup()``."""
    app_runner = web.AppRunner(build_app(events, runner))
    await app_runner.setup()
    await web.TCPSite(app_runner, host, port).start()
    return app_runner
