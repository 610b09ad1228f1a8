"""The bots one process serves, each on its own and all on one connection to Redis.

Each bot is a whole gateway (:func:`gateway.run.assembly.open_on`): its own keys, send budget, agents,
activity and platforms, so one bot's chats never meet another's. What they share is the process: the
connection (or the embedded server), the web servers and the signals.

One bot's failure stays its own: a token refused at start, or a platform that stops on its own later
(a revoked token, a 409 from a poller outside the cluster), marks that bot ``failed`` with the one line
that says what to fix, stops it — its messages wait in its inbox — and the others go on. Only when no bot
is left does the process end (so a deployment of one bot behaves as it always did).

A polling Telegram bot polls only while its process holds the token's lease (:mod:`gateway.store.leases`),
so of several processes serving the same bots exactly one polls each token, and another takes over within
seconds when that one dies. Webhook mode needs no lease: Telegram posts each update once, to one address.

:meth:`Fleet.reload` applies a new configuration: bots removed or changed are stopped (their turns in
flight get the grace a SIGTERM gives; what they did not finish waits in their inbox), bots added or changed
are started, and every other bot is not touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TextIO

from gateway.bots.health import BotHealth
from gateway.bots.reload_plan import outcome_lines, plan_reload
from gateway.config import Settings
from gateway.config.bots import Bot
from gateway.platforms.base import PlatformAdapter
from gateway.platforms.local import TerminalAdapter
from gateway.run.assembly import RunningGateway, connect, open_on
from gateway.run.platforms import enabled_adapters, stop_adapters, verify_platforms
from gateway.server.lifecycle import EmbeddedRedis
from gateway.startup_errors import StartupError, explain, one_line
from gateway.store.channel import RedisChannel, channel_for
from gateway.store.leases import Lease

log = logging.getLogger(__name__)

#: Seconds a bot that failed or is stopped by a reload gives its running turns.
STOP_GRACE_SECONDS = 60.0

State = Literal["running", "degraded", "failed"]


@dataclass(frozen=True)
class BotStatus:
    """What the operator sees of a bot in this process: running, degraded (its provider or a tool server away:
    it still takes messages in) or failed (stopped, and why); since when."""

    name: str
    state: State
    detail: str = ""
    since: float = field(default_factory=time.time)

    @property
    def up(self) -> bool:
        """Whether the bot takes messages in (running, or degraded)."""
        return self.state in ("running", "degraded")


class RunningBot:
    """One bot in this process: its gateway on the shared connection, its platforms and its pollers' leases."""

    def __init__(
        self, bot: Bot, gateway: RunningGateway, adapters: dict[str, PlatformAdapter], leases: list[Lease]
    ) -> None:
        self.bot = bot
        self.gateway = gateway
        self.adapters = adapters
        self.leases = leases
        self.health = BotHealth(bot.name)
        gateway.events.subscribe(self.health.observe)
        #: When each MCP server was first seen down.
        self._down_since: dict[str, float] = {}
        self._watch: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return self.bot.name

    def problems(self) -> list[tuple[str, float]]:
        """What is wrong while it runs, oldest first: its provider away, its MCP servers down (line, since)."""
        found = list(self.health.problems.values())
        mcp = self.gateway.runner.mcp
        for name, server in sorted(mcp.servers.items()) if mcp is not None else ():
            if not server.failure:
                self._down_since.pop(name, None)
                continue
            since = self._down_since.setdefault(name, time.time())  # first seen down (looked at on each status)
            found.append((f"MCP server {name} is down ({server.failure})", since))
        return sorted(found, key=lambda problem: problem[1])

    async def start_receiving(self, on_failure: Callable[[RunningBot, BaseException], None]) -> None:
        """Start every platform (a poller waits for its lease), and report the first that stops on its own."""
        for adapter in self.adapters.values():
            await adapter.start(self.gateway.runner.intake)
        for lease in self.leases:
            lease.start()
        self._watch = asyncio.create_task(self._first_failure(on_failure), name=f"bot-{self.name}-watch")

    async def _first_failure(self, on_failure: Callable[[RunningBot, BaseException], None]) -> None:
        waits = [asyncio.ensure_future(adapter.failed()) for adapter in self.adapters.values()]
        if not waits:
            return
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        on_failure(self, next(iter(done)).result())

    async def close(self, *, grace_seconds: float, cut_short: asyncio.Event | None = None) -> int:
        """Stop polling first (the lease goes to another process at once), then let running turns finish."""
        if self._watch is not None and self._watch is not asyncio.current_task():
            self._watch.cancel()
        for lease in self.leases:
            await lease.close()
        return await self.gateway.close(grace_seconds=grace_seconds, cut_short=cut_short)


async def _prepared(bot: Bot, out: TextIO, *, local: bool, verify: bool) -> dict[str, PlatformAdapter] | Exception:
    """A bot's platform adapters, checked (Telegram's getMe, Discord's login) unless ``verify`` is False;
    the error instead when they cannot be built or checked (their clients closed again)."""
    try:
        adapters = enabled_adapters(bot.settings, out, local=local)
    except Exception as error:  # an adapter that cannot even be built (no token)
        return error
    if verify:
        try:
            await verify_platforms(adapters)
        except Exception as error:
            return error
    return adapters


def _none_started(settings: Settings, bots: list[Bot], errors: list[Any], out: TextIO) -> BaseException:
    """Why the start ends when no bot could start: one bot's own error; of several, a line each, then one error."""
    if not settings.bots:
        return errors[0]
    for bot, error in zip(bots, errors):
        detail = explain(error, bot.settings) or one_line(error, 1000)
        out.write(f"foldgate: bot {bot.name} could not start: {detail}\n")
    out.flush()
    return StartupError(
        f"none of the {len(bots)} bots could start (each line above says why) — fix those, then start again",
        setting="bots",
    )


async def _closed(
    running: RunningBot, cut_short: asyncio.Event | None, grace_seconds: float = STOP_GRACE_SECONDS
) -> int:
    """Stop a bot with ``grace_seconds`` for its turns (by default the grace a failure or a reload gives them;
    less once ``cut_short`` is set); what goes wrong is logged, never raised into the process."""
    try:
        return await running.close(grace_seconds=grace_seconds, cut_short=cut_short)
    except Exception as error:
        log.warning("bot %s did not close cleanly: %s", running.name, error)
        return 0


def telegram_poll_lease(channel: RedisChannel, prefix: str, settings: Settings) -> Lease | None:
    """The lease a polling Telegram bot needs, named after its bot id (the token's public part)."""
    telegram = settings.platforms.telegram
    if not telegram.enabled or telegram.mode != "polling" or telegram.token is None:
        return None
    token = telegram.token.get_secret_value()
    bot_id = token.split(":", 1)[0]
    if not bot_id.isdigit():  # not a token's shape: still one lease per token, without showing it
        bot_id = hashlib.sha256(token.encode()).hexdigest()[:16]
    return Lease(channel, prefix, f"poll:tg:{bot_id}")


class Fleet:
    """The bots of one process. Build it with :meth:`open`; :meth:`start_receiving`, then :meth:`close`."""

    def __init__(
        self,
        settings: Settings,
        redis: Any,
        embedded: EmbeddedRedis | None,
        out: TextIO,
        builder_options: dict[str, Any],
    ) -> None:
        self.settings = settings
        self.redis = redis
        self.embedded = embedded
        self.out = out
        self.builder_options = builder_options
        #: The process's own channel, for the leases (each bot's gateway has its own for its messages).
        self.channel = channel_for(redis)
        self.running: dict[str, RunningBot] = {}
        self.statuses: dict[str, BotStatus] = {}
        #: Why each failed bot failed.
        self.failures: dict[str, BaseException] = {}
        #: The bots as configured, running or not (a reload compares against these).
        self.configured: dict[str, Bot] = {}
        #: The bot with the terminal or web chat (the first that enables ``platforms.local``).
        self.front = ""
        #: Set whenever a bot stops on its own: the process checks whether any is left.
        self.changed = asyncio.Event()
        self._receiving = False
        #: Bots being stopped after a failure, by name: a reload waits for one before it starts it again.
        self._stopping: dict[str, asyncio.Task[int]] = {}
        #: Set when running turns are not to be waited for any more (Ctrl-C, a second SIGTERM).
        self.cut_short = asyncio.Event()

    @classmethod
    async def open(
        cls, settings: Settings, out: TextIO, *, exclusive: bool = True, verify: bool = True, **builder_options: Any
    ) -> Fleet:
        """Check every bot's platforms side by side (before Redis: a wrong token is then the only line on the
        screen), connect, and open the bots that passed. A bot that cannot start is marked failed; when none
        can, the first failure is raised, after everything opened is closed again."""
        bots = settings.each_bot()
        front = next((bot.name for bot in bots if bot.settings.platforms.local.enabled), bots[0].name)
        prepared = await asyncio.gather(*(_prepared(bot, out, local=bot.name == front, verify=verify) for bot in bots))
        if all(isinstance(adapters, Exception) for adapters in prepared):
            raise _none_started(settings, bots, prepared, out)
        try:
            redis, embedded = await connect(settings, exclusive=exclusive, notice=builder_options.get("notice"))
        except BaseException:
            for adapters in prepared:
                if not isinstance(adapters, Exception):
                    await stop_adapters(adapters)
            raise
        fleet = cls(settings, redis, embedded, out, builder_options)
        fleet.front = front
        try:
            for bot, adapters in zip(bots, prepared):
                fleet.configured[bot.name] = bot
                if isinstance(adapters, Exception):
                    fleet._record_failure(bot, adapters, "could not start")
                else:
                    await fleet._open_prepared(bot, adapters)
            if not fleet.running:
                raise fleet._first_failure()
        except BaseException:
            await fleet.close(grace_seconds=0)
            raise
        return fleet

    @property
    def front_gateway(self) -> RunningGateway | None:
        bot = self.running.get(self.front)
        return bot.gateway if bot is not None else None

    def gateways(self) -> dict[str, RunningGateway]:
        """Each running bot's gateway, by name, in the configuration's order."""
        return {name: self.running[name].gateway for name in self.configured if name in self.running}

    async def _open_prepared(self, bot: Bot, adapters: dict[str, PlatformAdapter]) -> None:
        """Open one bot whose platforms were checked; its failure is recorded as its own."""
        lease = telegram_poll_lease(self.channel, self.settings.redis.key_prefix, bot.settings)
        telegram = adapters.get("tg")
        if lease is not None and telegram is not None:
            telegram.turn = lease  # type: ignore[attr-defined]
        try:
            gateway = await open_on(self.redis, bot.settings, adapters, **self.builder_options)
        except Exception as error:
            await stop_adapters(adapters)
            self._record_failure(bot, error, "could not start")
            return
        except BaseException:
            await stop_adapters(adapters)
            raise
        self.running[bot.name] = RunningBot(bot, gateway, adapters, [lease] if lease else [])
        self.statuses[bot.name] = BotStatus(bot.name, "running")

    async def _open_bot(self, bot: Bot) -> None:
        """Check one bot's platforms and open it (a reload's new or changed bot)."""
        self.configured[bot.name] = bot
        adapters = await _prepared(bot, self.out, local=bot.name == self.front, verify=True)
        if isinstance(adapters, Exception):
            self._record_failure(bot, adapters, "could not start")
        else:
            await self._open_prepared(bot, adapters)

    async def start_receiving(self) -> None:
        """Every running bot's platforms start taking messages in; one that cannot is that bot's failure."""
        self._receiving = True
        for running in list(self.running.values()):
            await self._start(running)
        if not self.running:
            raise self._first_failure()

    async def _start(self, running: RunningBot) -> None:
        try:
            await running.start_receiving(self._on_failure)
        except Exception as error:
            self._on_failure(running, error)

    def _on_failure(self, running: RunningBot, error: BaseException) -> None:
        """A bot's platform stopped on its own: the bot is failed and stopped, the others go on."""
        if self.running.get(running.name) is not running:
            return
        del self.running[running.name]
        self._record_failure(running.bot, error, "stopped")
        task = asyncio.create_task(_closed(running, self.cut_short), name=f"bot-{running.name}-stop")
        self._stopping[running.name] = task
        task.add_done_callback(lambda _: self._stopped(running.name, task))
        self.changed.set()

    def _stopped(self, name: str, task: asyncio.Task[int]) -> None:
        if self._stopping.get(name) is task:
            del self._stopping[name]

    def _record_failure(self, bot: Bot, error: BaseException, what: str) -> None:
        self.failures[bot.name] = error
        detail = explain(error, bot.settings) or one_line(error, 1000)
        self.statuses[bot.name] = BotStatus(bot.name, "failed", detail)
        if self.settings.bots:  # of several, the process goes on: say which bot, in one line
            self.out.write(f"foldgate: bot {bot.name} {what}: {detail}\n")
            self.out.flush()
        log.error("bot %s failed: %s", bot.name, detail)

    def _first_failure(self) -> BaseException:
        return next(iter(self.failures.values()), RuntimeError("no bot is configured"))

    def failure_line(self) -> str:
        """Why the process ends when no bot is left: the failure's one line (of several bots, named)."""
        name = next(iter(self.failures))
        detail = self.statuses[name].detail
        return f"bot {name} stopped: {detail}" if self.settings.bots else detail

    def status_list(self) -> list[BotStatus]:
        """Each configured bot's status in the configuration's order; a running one with problems is degraded."""
        statuses = []
        for name in self.configured:
            status, running = self.statuses.get(name), self.running.get(name)
            if status is None:
                continue
            problems = running.problems() if running is not None else []
            if problems:
                status = BotStatus(name, "degraded", "; ".join(line for line, _ in problems), problems[0][1])
            statuses.append(status)
        return statuses

    # ------------------------------------------------------------------ reload

    async def reload(self, settings: Settings) -> list[str]:
        """Apply ``settings``: stop the bots removed or changed, start the bots added or changed (and those
        that failed, to try again), leave the others alone. The process's own sections (Redis, web servers,
        delivery, media) stay as they started: bots are rebuilt on them. Returns one line per thing done."""
        holds_front = self.front in self.configured and self._serves_local_chat()
        plan = plan_reload(self.settings, settings, self.configured, self.running, self.front, holds_front)
        self.settings = plan.settings
        await self._stop_bots(plan.stop)
        await self._start_bots([plan.wanted[name] for name in plan.start])
        self.configured = {name: self.configured[name] for name in plan.wanted if name in self.configured}
        self.changed.set()
        return plan.notes + outcome_lines(plan, self.running, self.statuses)

    async def _stop_bots(self, names: list[str]) -> None:
        """Forget ``names`` and wait until each is stopped (also those already stopping after a failure)."""
        closing = [self.running.pop(name) for name in names if name in self.running]
        for name in names:
            self.configured.pop(name, None)
            self.statuses.pop(name, None)
            self.failures.pop(name, None)
        await asyncio.gather(
            *(_closed(running, self.cut_short) for running in closing),
            *(self._stopping[name] for name in names if name in self._stopping),
            return_exceptions=True,
        )

    async def _start_bots(self, bots: list[Bot]) -> None:
        """Open ``bots`` side by side; once the fleet receives, those that opened start receiving too."""
        await asyncio.gather(*(self._open_bot(bot) for bot in bots))
        if self._receiving:
            for bot in bots:
                if bot.name in self.running:
                    await self._start(self.running[bot.name])

    def _serves_local_chat(self) -> bool:
        """Whether the front bot has the web chat (its page holds the bot's parts) or a terminal chat still open."""
        front, running = self.configured[self.front], self.running.get(self.front)
        local = front.settings.platforms.local
        terminal = running.adapters.get("local") if running is not None else None
        open_terminal = isinstance(terminal, TerminalAdapter) and not terminal.closed.is_set()
        return local.enabled and (local.web or open_terminal)

    # ------------------------------------------------------------------ the end

    async def close(self, *, grace_seconds: float = 10.0, cut_short: asyncio.Event | None = None) -> int:
        """Stop every bot (side by side, each with ``grace_seconds`` for its turns), then the connection.
        Returns how many turns were cancelled: their messages wait in the inbox for the next start."""
        if cut_short is not None and cut_short.is_set() or grace_seconds <= 0:
            self.cut_short.set()  # bots already stopping after a failure stop waiting too
        running, self.running = list(self.running.values()), {}
        results = await asyncio.gather(*(_closed(bot, cut_short, grace_seconds) for bot in running))
        if self._stopping:
            await asyncio.gather(*self._stopping.values(), return_exceptions=True)
        with contextlib.suppress(Exception):
            await self.channel.aclose()
        with contextlib.suppress(Exception):
            await self.redis.aclose()
        if self.embedded is not None:
            with contextlib.suppress(Exception):
                await self.embedded.stop()
        return sum(results)

    @property
    def busy_chats(self) -> int:
        """Chats whose turn runs now, in running bots and in bots still stopping after a failure."""
        stopping = sum(1 for task in self._stopping.values() if not task.done())
        return sum(bot.gateway.runner.busy_chats for bot in self.running.values()) + stopping
