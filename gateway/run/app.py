"""``foldgate run``: one run of the gateway, from the settings to the exit code.

The parts it joins each live in a module of their own: the wiring (:mod:`gateway.run.assembly`), the
enabled platforms (:mod:`gateway.run.platforms`), what is printed (:mod:`gateway.run.greeting`),
the web servers (:mod:`gateway.run.web_serving`), signals (:mod:`gateway.run.signals`), logging
(:mod:`gateway.run.logging_setup`) and the process's loop (:mod:`gateway.run.process`). Here stands only
their order: verify, open, announce, serve, wait, shut down.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Mapping
from typing import TextIO

from gateway.config import ConfigError, Settings, load_settings
from gateway.platforms.base import PlatformAdapter
from gateway.platforms.local import TerminalAdapter
from gateway.run.assembly import RunningGateway, open_gateway
from gateway.run.greeting import announce, open_terminal_chat, print_compactions, print_notice
from gateway.run.logging_setup import log_where
from gateway.run.platforms import enabled_adapters, stop_adapters, verify_platforms
from gateway.run.process import run_gateway_loop, settle_process
from gateway.run.scratch import describe_gateway, throwaway_gateway
from gateway.run.signals import ShutdownSignals, shut_down
from gateway.run.web_serving import serve_web
from gateway.startup_errors import exit_code_of, explain


def run_demo(settings: Settings, out: TextIO = sys.stdout) -> int:
    """``foldgate run --demo``: the demo in a throwaway gateway, so it plays in full every time and
    the user's own chats stay exactly as they were."""
    with throwaway_gateway(settings, "demo") as scratch:
        code = run_gateway_loop(serve(scratch, demo=True, out=out))
    out.write(f"foldgate: the demo ran in a throwaway gateway, now removed; your own ({describe_gateway(settings)})"
              " is untouched, and `foldgate run` chats with the bot there.\n")
    return code


async def serve(settings: Settings, *, demo: bool, out: TextIO = sys.stdout) -> int:
    adapters = enabled_adapters(settings, out)
    if not demo:  # before anything is printed: a wrong token or address is then the only line on the screen
        await verify_platforms(adapters)
    try:
        gateway = await open_gateway(settings, adapters, exclusive=True, notice=print_notice(out))
    except BaseException:  # the verified platforms hold HTTP sessions; nothing else will close them
        await stop_adapters(adapters)
        raise
    settle_process()
    gateway.events.subscribe(print_compactions(out))
    announce(settings, gateway, adapters, out)
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


async def _until_done(settings: Settings, gateway: RunningGateway, adapters: Mapping[str, PlatformAdapter],
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


def run_command(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
    except ConfigError as error:
        print(f"foldgate: invalid configuration\n{error}", file=sys.stderr)
        return 2
    log_where(settings, sys.stdin)
    if args.demo:
        return exit_code_of("foldgate", settings, lambda: run_demo(settings))
    return exit_code_of("foldgate", settings, lambda: run_gateway_loop(serve(settings, demo=False)))
