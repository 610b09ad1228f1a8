"""What is wrong with a running bot while it still runs: its model provider away, an MCP server down.

A bot whose platform stops is stopped (:mod:`.fleet`); one whose provider or tool server fails keeps taking
messages in (the outage machinery answers them when the provider returns), so it stays up but is shown
``degraded`` with one line per problem, on ``/admin/bots`` and in the log, until a turn succeeds again (or the
server answers again).
"""

from __future__ import annotations

import logging
import time

from gateway.events import Event, TurnErrorEvent, TurnEvent

log = logging.getLogger(__name__)

#: The key of the provider's problem among a bot's problems.
PROVIDER = "provider"


class BotHealth:
    """A bot's provider problem, from its own events (subscribe :meth:`observe` to its event bus); its MCP
    servers say their own state (:attr:`agent.tools.mcp.McpServer.failure`)."""

    def __init__(self, name: str) -> None:
        self.name = name
        #: problem key -> (the line that says what is wrong, since when)
        self.problems: dict[str, tuple[str, float]] = {}

    def observe(self, event: Event) -> None:
        if isinstance(event, TurnErrorEvent) and event.kind in ("provider_away", "provider_gave_up"):
            self._report(PROVIDER, f"the model provider is away ({event.error})")
        elif isinstance(event, TurnEvent) and not event.error:
            self._clear(PROVIDER)

    def _report(self, key: str, line: str) -> None:
        if key not in self.problems:
            log.warning("bot %s: %s", self.name, line)
        self.problems[key] = (line, self.problems.get(key, (line, time.time()))[1])

    def _clear(self, key: str) -> None:
        if self.problems.pop(key, None) is not None:
            log.info("bot %s: %s is back", self.name, key)
