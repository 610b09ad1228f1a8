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
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TextIO, TypeVar

from redis.exceptions import RedisError

from agent.tokens import encoding
from gateway.agents import AgentBuilder
from gateway.config import ConfigError, Settings, load_settings
from gateway.events import CompressEvent, Event, EventBus
from gateway.inbox import Inbox
from gateway.delivery.budget import SendBudget
from gateway.delivery.gate import gates
from gateway.platforms.base import PlatformAdapter
from gateway.platforms.local import TerminalAdapter
from gateway.redis_channel import channel_for
from gateway.redis_server import EmbeddedRedis, connect_or_embed
from gateway.runner import GatewayRunner
from gateway.startup_errors import REDIS_CONNECT_SECONDS, StartupError, exit_code_of, explain, redis_failure
from gateway.scratch import describe_gateway, throwaway_gateway, without_credentials
from gateway.store import SessionStore

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

    async def close(self) -> None:
        await self.runner.stop()
        for adapter in self.runner.adapters.values():
            with contextlib.suppress(Exception):
                await adapter.stop()
        await self.agents.aclose()
        await self.store.channel.aclose()
        await self.redis.aclose()
        if self.embedded:
            await self.embedded.stop()


def message_path(redis: Any, settings: Settings) -> tuple[SessionStore, Inbox]:
    """The store and inbox a gateway's workers use, on one shared channel to Redis.

    The caller closes the channel (``store.channel.aclose()``) before the redis-py client.
    """
    channel = channel_for(redis)
    store = SessionStore(redis, settings.redis.key_prefix, channel=channel,
                         transcript_cache_tokens=settings.gateway.transcript_cache_tokens)
    inbox = Inbox(redis, settings.redis.key_prefix, dedupe_ttl_seconds=settings.gateway.dedupe_ttl_seconds, channel=channel)
    return store, inbox


async def open_gateway(settings: Settings, adapters: dict[str, PlatformAdapter], **builder_options: Any) -> Gateway:
    """Connect to Redis (or start the embedded server) and build a started runner.

    A Redis that cannot be reached raises :class:`~gateway.startup_errors.StartupError` naming
    ``redis.url``; whatever was opened before a failure is closed again.
    """
    try:  # a configured server gets a deadline: a firewall that drops packets must not hang the start
        async with asyncio.timeout(REDIS_CONNECT_SECONDS if settings.redis.url.strip() else None):
            redis, embedded = await connect_or_embed(settings.redis.url or None, settings.home_path,
                                                     cluster=settings.redis.cluster, notice=builder_options.get("notice"))
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
        agents = AgentBuilder(settings, **builder_options)
        budget = SendBudget(store.channel, settings.redis.key_prefix)
        runner = GatewayRunner(
            store, inbox, agents, adapters=adapters, compression=settings.compression, events=events,
            lock_ttl_seconds=settings.gateway.lock_ttl_seconds, max_concurrent_chats=settings.gateway.max_concurrent_chats,
            cache_ttl=settings.prompt_caching.cache_ttl, stream_replies=settings.delivery.stream_replies,
            gates=gates(budget, settings.delivery), coalesce_backlog=settings.gateway.coalesce_backlog,
            coalesce_max_messages=settings.gateway.coalesce_max_messages,
            coalesce_max_tokens=settings.gateway.coalesce_max_tokens,
        )
        await runner.start()
        encoding()  # the tokenizer loads now rather than on the first message
    except BaseException:
        await _release(runner, agents, store, redis, embedded)
        raise
    return Gateway(settings, runner, store, events, agents, redis, embedded)


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


def _adapters(settings: Settings, out: TextIO) -> dict[str, PlatformAdapter]:
    adapters: dict[str, PlatformAdapter] = {}
    if settings.platforms.local.enabled:
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


async def serve(settings: Settings, *, demo: bool, out: TextIO = sys.stdout) -> int:
    adapters = _adapters(settings, out)
    gateway = await open_gateway(settings, adapters, notice=_print_notice(out))
    settle_process()
    gateway.events.subscribe(_print_compactions(out))
    if gateway.embedded is None:
        where = "Redis at " + without_credentials(settings.redis.url)
    else:
        where = f"{'embedded' if gateway.embedded.owns_server else 'shared embedded'} Redis at {gateway.embedded.url}"
    out.write(f"foldgate: {', '.join(adapters) or 'no platform'} on {where}; model {settings.model.name}"
              f" ({settings.model.provider}, {gateway.agents.api_mode}), engine {settings.context.engine}\n")
    out.write(gateway.agents.caching_status + "\n")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):  # loops without signal support: Ctrl-C still ends the run
            loop.add_signal_handler(sig, stop.set)
    metrics = None
    try:  # from here on a failure still closes the gateway: no embedded server or connection outlives it
        if settings.gateway.metrics_port:
            from gateway.metrics import serve_metrics

            try:
                metrics = await serve_metrics(gateway.events, gateway.runner, "0.0.0.0", settings.gateway.metrics_port)
            except OSError as error:
                raise StartupError(f"cannot serve metrics on port {settings.gateway.metrics_port} "
                                   f"({error.strerror or error}) — pick a free port, or 0 to serve none",
                                   setting="gateway.metrics_port") from error
        terminal = adapters.get("local")
        if terminal is not None and settings.model.provider == "local":
            await open_terminal_chat(gateway, out)
        if demo:
            return 0
        for adapter in adapters.values():
            await adapter.start(gateway.runner.intake)
        waiters = [asyncio.create_task(stop.wait())]
        if isinstance(terminal, TerminalAdapter) and len(adapters) == 1:
            waiters.append(asyncio.create_task(terminal.closed.wait()))
        failures = {  # an adapter that stops on its own (e.g. a second poller on one token) ends the process
            asyncio.create_task(adapter.failed()): name  # type: ignore[attr-defined]
            for name, adapter in adapters.items() if callable(getattr(adapter, "failed", None))
        }
        done, _ = await asyncio.wait([*waiters, *failures], return_when=asyncio.FIRST_COMPLETED)
        for waiter in [*waiters, *failures]:
            waiter.cancel()
        failed = [failures[task] for task in done if task in failures]
        if failed:
            failure = adapters[failed[0]].failure  # type: ignore[attr-defined]
            print(f"foldgate: {explain(failure, settings) or failure}", file=sys.stderr)
            return 1
        if not stop.is_set():  # the terminal chat ended: answer what it sent; a signal only lets running turns finish
            await gateway.runner.wait_idle(timeout=60)
        return 0
    finally:
        if metrics is not None:
            await metrics.cleanup()
        await gateway.close()


def run_gateway_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run the gateway's event loop: uvloop where it is installed (≈8% less CPU per message), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


def run_command(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = load_settings(args.config)
    except ConfigError as error:
        print(f"foldgate: invalid configuration\n{error}", file=sys.stderr)
        return 2
    if getattr(args, "demo", False):
        return exit_code_of("foldgate", settings, lambda: run_demo(settings))
    return exit_code_of("foldgate", settings, lambda: run_gateway_loop(serve(settings, demo=False)))
