"""Which web servers a run starts over its gateway: the operator's (metrics, health, operator view) and the
web chat, as the settings ask, and where it says they are.

The servers themselves are :mod:`gateway.web.server`; this part reads a running gateway, which is wired
from parts of :mod:`gateway.web`, so it sits beside the wiring rather than under the web package. Their
modules load only when a server is configured: a gateway without one starts without them.

The operator's server covers every bot of the process: :class:`FleetReader` answers each scrape and page
with the bots running at that moment, since a reload adds, replaces and removes them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

from gateway.delivery.gate import ChatBuckets
from gateway.run.api_serving import serve_api

if TYPE_CHECKING:
    from gateway.bots import Fleet
    from gateway.metrics import GatewayWatch
    from gateway.run.assembly import RunningGateway
    from gateway.web.operated import OperatedBot, OperatedBots
    from gateway.web.server import WebServers


class FleetReader:
    """What the operator's server reads of the fleet, asked again at each scrape and page.

    Each bot's watch is made when its gateway is first seen: a bot a reload replaced (a new gateway) starts
    with a fresh one, and a removed bot's is dropped.
    """

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self._watched: dict[str, tuple[RunningGateway, GatewayWatch]] = {}

    def _current(self) -> dict[str, tuple[RunningGateway, GatewayWatch]]:
        """Each running bot's gateway and watch, by name, in the configuration's order."""
        current = {}
        for name, gateway in self.fleet.gateways().items():
            known = self._watched.get(name)
            if known is None or known[0] is not gateway:  # a new bot, or one a reload replaced
                known = (gateway, self._watch(name, gateway))
            current[name] = known
        self._watched = current
        return current

    def _watch(self, name: str, gateway: RunningGateway) -> GatewayWatch:
        from gateway.metrics import GatewayWatch

        buckets = ChatBuckets(self.fleet.settings.delivery).bot_wide(self.fleet.running[name].adapters)
        return GatewayWatch(gateway.events, gateway.runner, gateway.budget, buckets)

    def watches(self) -> dict[str, GatewayWatch]:
        return {name: watch for name, (_, watch) in self._current().items()}

    def several(self) -> bool:
        """Whether figures and pages name their bot: with ``bots:``, or more than one bot running (a reload
        that dropped ``bots:`` keeps the bot that holds the web chat beside the new one)."""
        return bool(self.fleet.settings.bots) or len(self.fleet.configured) > 1

    def states(self) -> dict[str, bool] | None:
        """Whether each configured bot runs; None for one bot, whose figures carry no label."""
        if not self.several():
            return None
        return {status.name: status.up for status in self.fleet.status_list()}

    def bots(self) -> OperatedBots:
        from gateway.web.operated import OperatedBots

        running = {name: _operated(name, gateway, watch) for name, (gateway, watch) in self._current().items()}
        return OperatedBots(running, self.fleet.status_list(), several=self.several())


def _operated(name: str, gateway: RunningGateway, watch: GatewayWatch) -> OperatedBot:
    """One running bot's parts the operator view reads."""
    from gateway.web.operated import OperatedBot

    agents, runner = gateway.agents, gateway.runner
    return OperatedBot(
        name,
        gateway.store,
        gateway.activity,
        watch,
        lambda model: agents.context_length(model or agents.default_model),
        runner.media_store,
        runner.spending,
        runner.budgets,
        runner.parts.memory.store,
        gateway.events,
    )


async def serve_web(fleet: Fleet, out: TextIO) -> WebServers:
    """The operator's server (metrics, health, operator view of every bot) when ``gateway.metrics_port`` is
    set, the web chat when the bot with the local platform sets ``platforms.local.web``, and the
    OpenAI-compatible API when ``platforms.api.enabled``; says where each one is."""
    from gateway.metrics import ApiRequests, BotWatches
    from gateway.web.chat_pages import WebChat
    from gateway.web.server import WebServers

    settings = fleet.settings
    servers = WebServers(settings.gateway.allowed_hosts)
    api_requests = ApiRequests() if settings.platforms.api.enabled else None
    try:
        if settings.gateway.metrics_port:
            reader = FleetReader(fleet)
            token = settings.gateway.admin_token.get_secret_value() if settings.gateway.admin_token else None
            await servers.serve_operator(
                reader.bots,
                BotWatches(reader.watches, reader.states, api_requests),
                token,
                settings.gateway.metrics_host,
                settings.gateway.metrics_port,
            )
        gateway = fleet.front_gateway
        local = gateway.settings.platforms.local if gateway is not None else None
        if gateway is not None and local is not None and local.enabled and local.web:
            await servers.serve_chat(
                WebChat(
                    gateway.store,
                    gateway.runner.inbox,
                    gateway.runner.intake,
                    gateway.live,
                    gateway.runner.media_store,
                    meaning=gateway.runner.meanings,
                ),
                local.host,
                local.port,
            )
        if api_requests is not None:
            await serve_api(fleet, servers, api_requests)
    except BaseException:
        await servers.close()
        raise
    for what, url in servers.addresses.items():
        out.write(f"foldgate: {what} at {url}\n")
    return servers
