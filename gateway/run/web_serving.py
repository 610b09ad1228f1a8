"""Which web servers a run starts over its gateway: the operator's (metrics, health, operator view) and the
web chat, as the settings ask, and where it says they are.

The servers themselves are :mod:`gateway.web.server`; this part reads a running gateway, which is wired
from parts of :mod:`gateway.web`, so it sits beside the wiring rather than under the web package. Their
modules load only when a server is configured: a gateway without one starts without them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, TextIO

from gateway.config import Settings
from gateway.delivery.gate import ChatBuckets
from gateway.platforms.base import PlatformAdapter
from gateway.run.assembly import RunningGateway

if TYPE_CHECKING:
    from gateway.web.server import WebServers


async def serve_web(settings: Settings, gateway: RunningGateway, adapters: Mapping[str, PlatformAdapter],
                    out: TextIO) -> "WebServers":
    """The operator's server (metrics, health, operator view) when ``gateway.metrics_port`` is set, and the
    web chat when ``platforms.local.web`` is; says where each one is."""
    from gateway.metrics import GatewayWatch
    from gateway.web.chat_pages import WebChat
    from gateway.web.server import WebServers

    servers = WebServers(settings.gateway.allowed_hosts)
    try:
        if settings.gateway.metrics_port:
            watch = GatewayWatch(gateway.events, gateway.runner, gateway.budget,
                                 ChatBuckets(settings.delivery).bot_wide(adapters))
            token = settings.gateway.admin_token.get_secret_value() if settings.gateway.admin_token else None
            await servers.serve_operator(watch, gateway.activity, token,
                                         lambda model: gateway.agents.context_length(model or gateway.agents.default_model),
                                         settings.gateway.metrics_host, settings.gateway.metrics_port)
        local = settings.platforms.local
        if local.enabled and local.web:
            await servers.serve_chat(WebChat(gateway.store, gateway.runner.inbox, gateway.runner.intake, gateway.live,
                                             gateway.runner.media_store), local.host, local.port)
    except BaseException:
        await servers.close()
        raise
    for what, url in servers.addresses.items():
        out.write(f"foldgate: {what} at {url}\n")
    return servers
