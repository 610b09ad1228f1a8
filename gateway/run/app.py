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
from typing import TextIO

from gateway.bots import Fleet
from gateway.config import ConfigError, Settings, load_settings
from gateway.platforms.local import TerminalAdapter
from gateway.run.greeting import announce, open_terminal_chat, print_compactions, print_notice
from gateway.run.logging_setup import log_where
from gateway.run.process import run_gateway_loop, settle_process
from gateway.run.registry import process_registered
from gateway.run.scratch import describe_gateway, throwaway_gateway
from gateway.run.signals import ReloadSignal, ShutdownSignals, shut_down
from gateway.run.web_serving import serve_web
from gateway.startup_errors import exit_code_of


def run_demo(settings: Settings, out: TextIO = sys.stdout) -> int:
    """``foldgate run --demo``: the demo in a throwaway gateway, so it plays in full every time and
    the user's own chats stay exactly as they were."""
    with throwaway_gateway(settings, "demo") as scratch:
        code = run_gateway_loop(serve(scratch, demo=True, out=out))
    out.write(
        f"foldgate: the demo ran in a throwaway gateway, now removed; your own ({describe_gateway(settings)})"
        " is untouched, and `foldgate run` chats with the bot there.\n"
    )
    return code


async def serve(settings: Settings, *, demo: bool, out: TextIO = sys.stdout, config_path: str | None = None) -> int:
    fleet = await Fleet.open(settings, out, exclusive=True, verify=not demo, notice=print_notice(out))
    settle_process()
    for running in fleet.running.values():
        running.gateway.events.subscribe(print_compactions(out))
    announce(fleet, out)
    signals = ShutdownSignals()
    signals.install(asyncio.get_running_loop())
    fleet.cut_short = signals.at_once  # Ctrl-C or a second SIGTERM also ends the waits of bots being stopped
    reload = ReloadSignal()
    reload.install(asyncio.get_running_loop())
    servers = None
    try:  # from here on a failure still closes the bots: no embedded server or connection outlives them
        servers = await serve_web(fleet, out)
        front = fleet.front_gateway
        terminal = fleet.running[fleet.front].adapters.get("local") if front is not None else None
        local_model = front is not None and fleet.running[fleet.front].bot.settings.model.provider == "local"
        if terminal is not None and local_model:
            await open_terminal_chat(front, out)
        if demo:
            return 0
        await fleet.start_receiving()
        with process_registered(settings.home_path):
            return await _until_done(fleet, signals, reload, config_path)
    finally:
        if servers is not None:
            await servers.close()
        await shut_down(fleet, signals, out)


async def _until_done(fleet: Fleet, signals: ShutdownSignals, reload: ReloadSignal, config_path: str | None) -> int:
    """Run until a signal, the terminal chat's end, or no bot left running (the exit code); reload on SIGHUP."""
    while True:
        terminal = _lone_terminal(fleet)
        waiters = [
            asyncio.create_task(signals.stop.wait()),
            asyncio.create_task(reload.requested.wait()),
            asyncio.create_task(fleet.changed.wait()),
        ]
        if terminal is not None:
            waiters.append(asyncio.create_task(terminal.closed.wait()))
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        for waiter in waiters:
            waiter.cancel()
        if signals.stop.is_set():
            return 0
        if reload.requested.is_set():
            reload.requested.clear()
            if not await _reload_unless_stopped(fleet, config_path, signals):
                return 0
        fleet.changed.clear()
        if not fleet.running:
            print(f"foldgate: {fleet.failure_line()}", file=sys.stderr)
            return 1
        if terminal is not None and terminal.closed.is_set():
            break
    # the terminal chat ended: answer what it sent, unless a signal comes first
    front = fleet.running.get(fleet.front)
    if front is None:
        return 0
    idle = asyncio.create_task(front.gateway.runner.wait_idle(timeout=60))
    interrupted = asyncio.create_task(signals.stop.wait())
    await asyncio.wait((idle, interrupted), return_when=asyncio.FIRST_COMPLETED)
    interrupted.cancel()
    if idle.done():
        idle.result()
    else:
        idle.cancel()
    return 0


def _lone_terminal(fleet: Fleet) -> TerminalAdapter | None:
    """The terminal chat when it is all the process serves (its end then ends the run), else None."""
    front = fleet.running.get(fleet.front)
    terminal = front.adapters.get("local") if front is not None else None
    if isinstance(terminal, TerminalAdapter) and len(fleet.running) == 1 and len(front.adapters) == 1:  # type: ignore[union-attr]
        return terminal
    return None


async def _reload_unless_stopped(fleet: Fleet, config_path: str | None, signals: ShutdownSignals) -> bool:
    """Reload; a stop signal meanwhile cuts the reload's waits short (the service manager's limit stands).
    False when the process is to end."""
    reloading = asyncio.create_task(_reload(fleet, config_path))
    stopping = asyncio.create_task(signals.stop.wait())
    await asyncio.wait((reloading, stopping), return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if not reloading.done():
        fleet.cut_short.set()  # the bots being stopped stop waiting for their turns
        await reloading
    return not signals.stop.is_set()


async def _reload(fleet: Fleet, config_path: str | None) -> None:
    """Read the configuration again; an invalid one is refused in one line and the running one stays."""
    try:
        settings = load_settings(config_path)
    except ConfigError as error:
        print(f"foldgate: reload refused, the running configuration stays: {error.one_line()}", file=sys.stderr)
        return
    lines = await fleet.reload(settings)
    print(f"foldgate: reloaded{': ' + '; '.join(lines) if lines else ', nothing changed'}", flush=True)


def run_command(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
    except ConfigError as error:
        print(f"foldgate: invalid configuration\n{error}", file=sys.stderr)
        return 2
    log_where(settings, sys.stdin)
    if args.demo:
        return exit_code_of("foldgate", settings, lambda: run_demo(settings))
    return exit_code_of(
        "foldgate", settings, lambda: run_gateway_loop(serve(settings, demo=False, config_path=args.config))
    )
