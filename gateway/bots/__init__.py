"""Several bots in one process: each bot's gateway on the process's one connection to Redis, its platforms,
the leases of its pollers, its state, and reloading the configuration (:mod:`.fleet`)."""

from gateway.bots.fleet import BotStatus, Fleet, RunningBot

__all__ = ["BotStatus", "Fleet", "RunningBot"]
