"""Which web servers a run starts over its gateway: the operator's (metrics, health, operator view) and the
web chat, as the settings ask, and where it says they are.

The servers themselves are :mod:`gateway.web.server`; this part reads a running gateway, which is wired
from parts of :mod:`gateway.web`, so it sits beside the wiring rather than under the web package. Their
modules load only when a server is configured: a gateway without one starts without them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

from gateway.delivery.gate import ChatBuckets

if TYPE_CHECKING:
    from gateway.bots import Fleet
    from gateway.web.server import WebServers


async def serve_web(fleet: "Fleet", out: TextIO) -> "WebServers":
    """The operator's server (metrics, health, operator view) when ``gateway.metrics_port`` is set, and the
    web chat when the bot with the local platform sets ``platforms.local.web``; says where each one is."""
    from gateway.metrics import GatewayWatch
    from gateway.web.chat_pages import WebChat
    from gateway.web.server import WebServers

    settings = fleet.settings
    gateway = fleet.front_gateway or next(iter(fleet.gateways().values()))
    adapters = fleet.running[fleet.front].adapters if fleet.front in fleet.running else {}
    servers = WebServers(settings.gateway.allowed_hosts)
    try:
        if settings.gateway.metrics_port:
            watch = GatewayWatch(gateway.events, gateway.runner, gateway.budget,
                                 ChatBuckets(settings.delivery).bot_wide(adapters))
            token = settings.gateway.admin_token.get_secret_value() if settings.gateway.admin_token else None
            await servers.serve_operator(watch, gateway.activity, token,
                                         lambda model: gateway.agents.context_length(model or gateway.agents.default_model),
                                         settings.gateway.metrics_host, settings.gateway.metrics_port)
        local = gateway.settings.platforms.local
        if gateway is fleet.front_gateway and local.enabled and local.web:
            await servers.serve_chat(WebChat(gateway.store, gateway.runner.inbox, gateway.runner.intake, gateway.live,
                                             gateway.runner.media_store), local.host, local.port)
    except BaseException:
        await servers.close()
        raise
    for what, url in servers.addresses.items():
        out.write(f"foldgate: {what} at {url}\n")
    return servers
