"""Serving the OpenAI-compatible API (``platforms.api``) over the running bots, beside the web servers.

The API reads the fleet at every request: a reload that adds, replaces or removes a bot is seen at once. With
one bot (no ``bots:``) the bot is listed as its configured model's name and any ``model`` reaches it; with
``bots:`` each bot is listed, and reached, by its name.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.access.rates import MessageRate
    from gateway.api.server import ApiBot
    from gateway.bots import Fleet
    from gateway.metrics import ApiRequests
    from gateway.platforms.base import IncomingMessage
    from gateway.web.server import WebServers

#: Room in a request body for the JSON around its text, beyond ``media.max_bytes``.
BODY_MARGIN_BYTES = 65_536


def api_bots(fleet: Fleet) -> dict[str, ApiBot]:
    """Each running bot as the API names it."""
    from gateway.api.server import ApiBot
    from gateway.api.sessions import ApiSessions

    several = bool(fleet.settings.bots)
    return {
        name: ApiBot(
            name if several else gateway.settings.model.name,
            gateway.runner.intake,
            gateway.live,
            gateway.runner.inbox,
            ApiSessions(gateway.runner.store, lock_ttl_seconds=gateway.settings.gateway.lock_ttl_seconds),
            gateway.runner.roles.answers,
            _rate_wait(gateway.runner.admission.rate),
            media=gateway.runner.media_store,
            approvals=gateway.runner.admission.approvals,
        )
        for name, gateway in fleet.gateways().items()
    }


def _rate_wait(rate: MessageRate | None) -> Callable[[IncomingMessage], Awaitable[float]]:
    """How long a person waits for their next answer; always nothing without ``access.messages_per_minute``."""
    if rate is not None:
        return rate.seconds_until_admitted

    async def unlimited(_message: IncomingMessage) -> float:
        return 0.0

    return unlimited


async def serve_api(fleet: Fleet, servers: WebServers, requests: ApiRequests | None) -> None:
    """Start the API at ``platforms.api.host:port``, held and closed with ``servers``. Its keys are read at
    every request, so a reload's keys apply at once; its address stays until the process restarts."""
    from gateway.api.server import ApiServer
    from gateway.web.server import start_site

    settings = fleet.settings
    api = settings.platforms.api
    server = ApiServer(
        lambda: fleet.settings.platforms.api.secrets(),
        lambda: api_bots(fleet),
        2 * settings.media.max_bytes + BODY_MARGIN_BYTES,
        requests,
        lambda: fleet.settings.platforms.api.fetch_private_urls,
    )
    runner = await start_site(server.app(), api.host, api.port, setting="platforms.api.port")
    servers.runners.append(runner)
    host, port = runner.addresses[0][:2]
    host = f"[{host}]" if ":" in host else host
    servers.addresses["OpenAI-compatible API"] = f"http://{host}:{port}/v1"
