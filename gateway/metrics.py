"""The operator's window (B5): ``/metrics`` in Prometheus text format and ``/healthz`` for probes.

Counters come from the event bus (compactions by trigger, tokens folded away, turns, prompt,
completion and cache tokens); gauges from the runner (chats being worked on here). Served only
when ``gateway.metrics_port`` is set.
"""

from __future__ import annotations

from aiohttp import web

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


def render(events: EventBus, runner: GatewayRunner) -> str:
    lines: list[str] = []
    for name, help_text in _HELP.items():
        metric = f"foldgate_{name}_total"
        value = events.counters.get(name, 0)
        shown = value if isinstance(value, int) else round(value, 6)
        lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} counter", f"{metric} {shown}"]
    lines += ["# HELP foldgate_chats_running Chats whose turn runs in this process now",
              "# TYPE foldgate_chats_running gauge", f"foldgate_chats_running {runner.busy_chats}"]
    return "\n".join(lines) + "\n"


def build_app(events: EventBus, runner: GatewayRunner) -> web.Application:
    async def metrics(_request: web.Request) -> web.Response:
        return web.Response(text=render(events, runner), content_type="text/plain", charset="utf-8")

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
