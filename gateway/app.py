"""``foldgate run``: wire the configuration, Redis (embedded when no URL is set), the runner and the platforms."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import signal
import sys
import time
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from redis.exceptions import RedisError

from agent.tokens import encoding
from gateway.activity import ActivityLog
from gateway.agents import AgentBuilder
from gateway.config import ConfigError, Settings, load_settings
from gateway.events import CompressEvent, Event, EventBus
from gateway.store.inbox import Inbox
from gateway.delivery.budget import SendBudget
from gateway.delivery.gate import ChatBuckets, gates
from gateway.platforms.base import PlatformAdapter
from gateway.platforms.local import TerminalAdapter
from gateway.store.channel import channel_for
from gateway.server.lifecycle import EmbeddedRedis, connect_or_embed
from gateway.progress import is_terminal, plural
from gateway.runner import GatewayRunner
from gateway.startup_errors import REDIS_CONNECT_SECONDS, exit_code_of, explain, redis_failure
from gateway.scratch import describe_gateway, throwaway_gateway, without_credentials
from gateway.store import SessionStore
from gateway.web.chat_platform import PLATFORM as WEB_PLATFORM
from gateway.web.chat_platform import WebChatAdapter
from gateway.web.live import LiveHub

if TYPE_CHECKING:
    from gateway.web.server import WebServers

log = logging.getLogger("foldgate")
T = TypeVar("T")


@dataclass
class Gateway:
    """A running gateway's parts, so the CLI, the demo and tests start and stop it the same way."""

    settings: Settings
    runner: GatewayRunner
    store: SessionStore
    events: EventBus
    agents: AgentBuilder
    redis: Any
    embedded: EmbeddedRedis | None
    #: Every chat's turns, compactions and errors, recorded for the operator view.
    activity: ActivityLog
    budget: SendBudget
    #: Web chat replies on their way to the browsers of any process.
    live: LiveHub

    async def close(self, *, grace_seconds: float = 10.0, cut_short: asyncio.Event | None = None) -> int:
        """Stop everything; running turns get ``grace_seconds`` (until ``cut_short`` is set) to finish.

        Returns how many turns were cancelled instead: their messages wait in the inbox for the next start.
        """
        cancelled = await self.runner.stop(grace_seconds=grace_seconds, cut_short=cut_short)
        for adapter in self.runner.adapters.values():
            with contextlib.suppress(Exception):
                await adapter.stop()
        await self.agents.aclose()
        await self.live.aclose()
        await self.store.channel.aclose()
        await self.redis.aclose()
        if self.embedded:
            await self.embedded.stop()
        return cancelled


def message_path(redis: Any, settings: Settings) -> tuple[SessionStore, Inbox]:
    """The store and inbox a gateway's workers use, on one shared channel to Redis.

    The caller closes the channel (``store.channel.aclose()``) before the redis-py client.
    """
    channel = channel_for(redis)
    store = SessionStore(redis, settings.redis.key_prefix, channel=channel,
                         transcript_cache_tokens=settings.gateway.transcript_cache_tokens)
    inbox = Inbox(redis, settings.redis.key_prefix, dedupe_ttl_seconds=settings.gateway.dedupe_ttl_seconds, channel=channel)
    return store, inbox


async def open_gateway(settings: Settings, adapters: dict[str, PlatformAdapter], *, exclusive: bool = False,
                       **builder_options: Any) -> Gateway:
    """Connect to Redis (or start the embedded server) and build a started runner.

    ``exclusive`` refuses an embedded server that another live foldgate runs on the same home:
    a serving gateway must not have its server stop under it when that foldgate quits.

    A Redis that cannot be reached raises :class:`~gateway.startup_errors.StartupError` naming
    ``redis.url``; whatever was opened before a failure is closed again.
    """
    try:  # a configured server gets a deadline: a firewall that drops packets must not hang the start
        async with asyncio.timeout(REDIS_CONNECT_SECONDS if settings.redis.url.strip() else None):
            redis, embedded = await connect_or_embed(settings.redis.url or None, settings.home_path,
                                                     cluster=settings.redis.cluster, notice=builder_options.get("notice"),
                                                     share=not exclusive)
    except (OSError, TimeoutError, ValueError, RedisError) as error:
        raise redis_failure(error, settings) from error
    store: SessionStore | None = None
    agents: AgentBuilder | None = None
    runner: GatewayRunner | None = None
    try:
        store, inbox = message_path(redis, settings)
        try:  # the message path logs in on a connection of its own: a refusal shows here, not in a worker
            async with asyncio.timeout(REDIS_CONNECT_SECONDS if settings.redis.url.strip() else None):
                await store.channel.call("PING")
        except (OSError, TimeoutError, RedisError) as error:
            raise redis_failure(error, settings) from error
        events = EventBus()
        activity = ActivityLog(redis, store.channel, settings.redis.key_prefix)
        events.subscribe(activity.record)  # whichever process serves the operator view reads them
        agents = AgentBuilder(settings, **builder_options)
        budget = SendBudget(store.channel, settings.redis.key_prefix)
        live = LiveHub(redis, store.channel, settings.redis.key_prefix)
        # Any process may run a web chat's turn, served here or not: each one can send its replies.
        platforms = {**adapters, WEB_PLATFORM: WebChatAdapter(live)}
        runner = GatewayRunner(
            store, inbox, agents, adapters=platforms, compression=settings.compression, events=events,
            lock_ttl_seconds=settings.gateway.lock_ttl_seconds, max_concurrent_chats=settings.gateway.max_concurrent_chats,
            cache_ttl=settings.prompt_caching.cache_ttl, stream_replies=settings.delivery.stream_replies,
            gates=gates(budget, settings.delivery), coalesce_backlog=settings.gateway.coalesce_backlog,
            coalesce_max_messages=settings.gateway.coalesce_max_messages,
            coalesce_max_tokens=settings.gateway.coalesce_max_tokens,
            max_message_tokens=settings.gateway.max_message_tokens,
            outage_retry_seconds=settings.gateway.outage_retry_seconds,
        )
        await runner.start()
        encoding()  # the tokenizer loads now rather than on the first message
    except BaseException:
        await _release(runner, agents, store, redis, embedded)
        raise
    return Gateway(settings, runner, store, events, agents, redis, embedded, activity, budget, live)


async def _release(runner: GatewayRunner | None, agents: AgentBuilder | None, store: SessionStore | None,
                   redis: Any, embedded: EmbeddedRedis | None) -> None:
    """Close what a half-opened gateway holds, so a failed start leaves no server or connection behind."""
    steps = [runner.stop if runner else None, agents.aclose if agents else None,
             store.channel.aclose if store else None, redis.aclose, embedded.stop if embedded else None]
    for step in steps:
        if step is not None:
            with contextlib.suppress(Exception):
                await step()


def settle_process() -> None:
    """Once the serving process is up: what startup built lives as long as the process, so full
    garbage collections need not walk it again (it halves their pauses, which otherwise land on
    some message's reply time). Not for code that opens gateways again and again, such as tests:
    frozen objects are never collected as cycles."""
    gc.collect()  # what is garbage now is not frozen with the rest
    gc.freeze()


def _print_compactions(out: TextIO) -> Any:
    def show(event: Event) -> None:
        if isinstance(event, CompressEvent):
            out.write(
                f"\n🧹 {event.trigger} compaction of {event.chat}: {event.tokens_before:,} → {event.tokens_after:,}"
                f" tokens (summary: {event.summarizer}; session {event.session_id}"
                f"{', in place' if event.in_place else ', continued from ' + event.old_session_id})\n"
            )
            out.flush()

    return show


def run_demo(settings: Settings, out: TextIO = sys.stdout) -> int:
    """``foldgate run --demo``: the demo in a throwaway gateway, so it plays in full every time and
    the user's own chats stay exactly as they were."""
    with throwaway_gateway(settings, "demo") as scratch:
        code = run_gateway_loop(serve(scratch, demo=True, out=out))
    out.write(f"foldgate: the demo ran in a throwaway gateway, now removed; your own ({describe_gateway(settings)})"
              " is untouched, and `foldgate run` chats with the bot there.\n")
    return code


async def open_terminal_chat(gateway: Gateway, out: TextIO, chat_id: str = "terminal") -> None:
    """The terminal chat's first words: the demo on a chat with no history, else which conversation goes on."""
    chat = f"{TerminalAdapter.platform}:{chat_id}"
    sid = await gateway.store.current_session(chat)
    meta = await gateway.store.meta(chat, sid)
    if not meta.count:
        await play_demo(gateway, out, chat_id)
        return
    last = meta.last_activity_at or meta.updated_at
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(last)) if last else "unknown"
    out.write(f"↩️  Resumed this chat's conversation: session {sid}, {meta.count} messages, last activity {when}."
              " /new starts a fresh one, /sessions lists them all.\n")
    out.flush()


async def play_demo(gateway: Gateway, out: TextIO, chat_id: str = "terminal") -> None:
    """Replay the bundled overnight backlog into the local chat, then ask the morning question."""
    from gateway.demo import overnight

    script = overnight(chat_id)
    chat = script.question.chat
    out.write(f"📥 Replaying an overnight team chat: {len(script.backlog)} messages arrive while the bot only listens…\n")
    for message in script.backlog:
        await gateway.runner.intake(message)
    await gateway.runner.wait_idle(timeout=120)
    meta = await gateway.store.meta(chat, await gateway.store.current_session(chat))
    window = gateway.agents.context_length(gateway.agents.default_model)
    out.write(f"🌙 Overnight backlog stored: {meta.count} messages, {meta.tokens:,} tokens of a {window:,}-token window"
              f" ({100 * meta.tokens / window:.0f}%).\n☀️  Morning question: {script.question.text}\n")
    out.flush()
    await gateway.runner.intake(script.question)
    await gateway.runner.wait_idle(timeout=120)


async def verify_platforms(adapters: dict[str, PlatformAdapter]) -> None:
    """Each platform's identity check (Telegram's getMe, Discord's HTTP login), side by side, before the
    gateway opens: the first failure is raised, after every adapter's client is closed again."""
    checks = [adapter.verify() for adapter in adapters.values()]
    results = await asyncio.gather(*checks, return_exceptions=True)
    failure = next((result for result in results if isinstance(result, BaseException)), None)
    if failure is not None:
        await _stop_all(adapters)
        raise failure


async def _stop_all(adapters: dict[str, PlatformAdapter]) -> None:
    """Stop adapters that may never have started, so no HTTP session or client outlives a failed start."""
    for adapter in adapters.values():
        with contextlib.suppress(Exception):
            await adapter.stop()


def _adapters(settings: Settings, out: TextIO) -> dict[str, PlatformAdapter]:
    adapters: dict[str, PlatformAdapter] = {}
    if settings.platforms.local.enabled and not settings.platforms.local.web:  # the web chat is a page (serve_web)
        adapters["local"] = TerminalAdapter(stdout=out)
    if settings.platforms.telegram.enabled:
        from gateway.platforms.telegram import TelegramAdapter

        adapters["tg"] = TelegramAdapter.from_settings(settings)
    if settings.platforms.discord.enabled:
        from gateway.platforms.discord import DiscordAdapter

        adapters["dc"] = DiscordAdapter.from_settings(settings)
    return adapters


def _print_notice(out: TextIO) -> Any:
    def show(text: str) -> None:
        out.write(text + "\n")
        out.flush()

    return show


#: Seconds a SIGTERM (a service manager stopping foldgate) lets running turns finish before they are cancelled.
TERM_GRACE_SECONDS = 60.0  # the shipped service files allow 90 s before they kill


class ShutdownSignals:
    """How the process was asked to end. Ctrl-C (SIGINT) ends it at once: running turns are cancelled and
    their messages, still in the inbox, are answered on the next start. SIGTERM lets them finish for
    :data:`TERM_GRACE_SECONDS`; a second signal of either kind ends it at once."""

    def __init__(self) -> None:
        self.received: list[int] = []
        #: Set by the first signal: the process ends.
        self.stop = asyncio.Event()
        #: Set when running turns are not to be waited for.
        self.at_once = asyncio.Event()

    def __call__(self, sig: int) -> None:
        self.received.append(sig)
        self.stop.set()
        if sig == signal.SIGINT or len(self.received) > 1:
            self.at_once.set()

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):  # loops without signal support: Ctrl-C still ends the run
                loop.add_signal_handler(sig, self, sig)

    @property
    def grace_seconds(self) -> float:
        return 0.0 if self.at_once.is_set() else TERM_GRACE_SECONDS


async def shut_down(gateway: Gateway, signals: ShutdownSignals, out: TextIO) -> None:
    """Close the gateway as the signals ask, saying in one line what happens to turns still running."""
    lead = "\n" if is_terminal(out) else ""  # the terminal chat may be showing its "working" status
    busy = gateway.runner.busy_chats
    if busy and not signals.at_once.is_set():
        out.write(f"{lead}foldgate: waiting up to {signals.grace_seconds:g} s for {plural(busy, 'reply')} being"
                  " written; Ctrl-C or a second SIGTERM ends at once\n")
        out.flush()
        lead = ""
    cancelled = await gateway.close(grace_seconds=signals.grace_seconds, cut_short=signals.at_once)
    if cancelled:
        out.write(f"{lead}foldgate: stopped; {plural(cancelled, 'message')} being answered will be answered"
                  " on the next start\n")
        out.flush()


async def serve(settings: Settings, *, demo: bool, out: TextIO = sys.stdout) -> int:
    adapters = _adapters(settings, out)
    if not demo:  # before anything is printed: a wrong token or address is then the only line on the screen
        await verify_platforms(adapters)
    try:
        gateway = await open_gateway(settings, adapters, exclusive=True, notice=_print_notice(out))
    except BaseException:  # the verified platforms hold HTTP sessions; nothing else will close them
        await _stop_all(adapters)
        raise
    settle_process()
    gateway.events.subscribe(_print_compactions(out))
    _announce(settings, gateway, adapters, out)
    signals = ShutdownSignals()
    signals.install(asyncio.get_running_loop())
    servers = None
    try:  # from here on a failure still closes the gateway: no embedded server or connection outlives it
        servers = await serve_web(settings, gateway, adapters, out)
        terminal = adapters.get("local")
        if terminal is not None and settings.model.provider == "local":
            await open_terminal_chat(gateway, out)
        if demo:
            return 0
        for adapter in adapters.values():
            await adapter.start(gateway.runner.intake)
        return await _until_done(settings, gateway, adapters, signals.stop)
    finally:
        if servers is not None:
            await servers.close()
        await shut_down(gateway, signals, out)


def _announce(settings: Settings, gateway: Gateway, adapters: Mapping[str, PlatformAdapter], out: TextIO) -> None:
    """The one line saying what runs where, and what prompt caching will do."""
    if gateway.embedded is None:
        where = "Redis at " + without_credentials(settings.redis.url)
    else:
        where = f"{'embedded' if gateway.embedded.owns_server else 'shared embedded'} Redis at {gateway.embedded.url}"
    served = [*adapters, *([WEB_PLATFORM] if settings.platforms.local.enabled and settings.platforms.local.web else [])]
    out.write(f"foldgate: {', '.join(served) or 'no platform'} on {where}; model {settings.model.name}"
              f" ({settings.model.provider}, {gateway.agents.api_mode}), engine {settings.context.engine}\n")
    out.write(gateway.agents.caching_status + "\n")


async def serve_web(settings: Settings, gateway: Gateway, adapters: Mapping[str, PlatformAdapter],
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
            await servers.serve_chat(WebChat(gateway.store, gateway.runner.inbox, gateway.runner.intake, gateway.live),
                                     local.host, local.port)
    except BaseException:
        await servers.close()
        raise
    for what, url in servers.addresses.items():
        out.write(f"foldgate: {what} at {url}\n")
    return servers


async def _until_done(settings: Settings, gateway: Gateway, adapters: Mapping[str, PlatformAdapter],
                      stop: asyncio.Event) -> int:
    """Run until a signal, the terminal chat's end, or an adapter that stops on its own; the exit code."""
    terminal = adapters.get("local")
    waiters = [asyncio.create_task(stop.wait())]
    if isinstance(terminal, TerminalAdapter) and len(adapters) == 1:
        waiters.append(asyncio.create_task(terminal.closed.wait()))
    failures = [asyncio.create_task(adapter.failed()) for adapter in adapters.values()]  # one that stops on its own ends the process
    done, _ = await asyncio.wait([*waiters, *failures], return_when=asyncio.FIRST_COMPLETED)
    for waiter in [*waiters, *failures]:
        waiter.cancel()
    failed = [task for task in done if task in failures]
    if failed:
        failure = failed[0].result()
        print(f"foldgate: {explain(failure, settings) or failure}", file=sys.stderr)
        return 1
    if not stop.is_set():  # the terminal chat ended: answer what it sent, unless a signal comes first
        idle = asyncio.create_task(gateway.runner.wait_idle(timeout=60))
        interrupted = asyncio.create_task(stop.wait())
        await asyncio.wait((idle, interrupted), return_when=asyncio.FIRST_COMPLETED)
        interrupted.cancel()
        if idle.done():
            idle.result()
        else:
            idle.cancel()
    return 0


def run_gateway_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run the gateway's event loop: uvloop where it is installed (≈8% less CPU per message), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_where(settings: Settings, stdin: TextIO) -> Path | None:
    """Set up logging: to stderr, except under an interactive terminal chat, where a log line would
    break into the conversation; there it goes to ``<home>/foldgate.log`` (returned)."""
    if not (settings.platforms.local.enabled and is_terminal(stdin)):
        logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT)
        return None
    path = settings.home_path / "foldgate.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT, filename=path, encoding="utf-8", force=True)
    return path


def run_command(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
    except ConfigError as error:
        print(f"foldgate: invalid configuration\n{error}", file=sys.stderr)
        return 2
    log_where(settings, sys.stdin)
    if getattr(args, "demo", False):
        return exit_code_of("foldgate", settings, lambda: run_demo(settings))
    return exit_code_of("foldgate", settings, lambda: run_gateway_loop(serve(settings, demo=False)))
