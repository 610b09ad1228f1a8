"""The platform adapters the settings enable, checked before the gateway opens and stopped after a failed start.

``foldgate run`` builds them here, apart from the gateway's wiring: which platforms run is the
configuration's choice, and a wrong token must stop the start before anything else is opened.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TextIO

from gateway.config import Settings
from gateway.platforms.base import PlatformAdapter
from gateway.platforms.local import TerminalAdapter


def enabled_adapters(settings: Settings, out: TextIO, *, local: bool = True) -> dict[str, PlatformAdapter]:
    """One adapter per enabled platform, by its short name (``local``, ``tg``, ``dc``); none started yet.
    ``local`` False leaves out the terminal chat (of several bots, one has it)."""
    adapters: dict[str, PlatformAdapter] = {}
    if local and settings.platforms.local.enabled and not settings.platforms.local.web:  # the web chat is a page
        adapters["local"] = TerminalAdapter(stdout=out)
    if settings.platforms.telegram.enabled:
        from gateway.platforms.telegram import TelegramAdapter

        adapters["tg"] = TelegramAdapter.from_settings(settings)
    if settings.platforms.discord.enabled:
        from gateway.platforms.discord import DiscordAdapter

        adapters["dc"] = DiscordAdapter.from_settings(settings)
    return adapters


async def verify_platforms(adapters: dict[str, PlatformAdapter]) -> None:
    """Each platform's identity check (Telegram's getMe, Discord's HTTP login), side by side, before the
    gateway opens: the first failure is raised, after every adapter's client is closed again."""
    checks = [adapter.verify() for adapter in adapters.values()]
    results = await asyncio.gather(*checks, return_exceptions=True)
    failure = next((result for result in results if isinstance(result, BaseException)), None)
    if failure is not None:
        await stop_adapters(adapters)
        raise failure


async def stop_adapters(adapters: dict[str, PlatformAdapter]) -> None:
    """Stop adapters that may never have started, so no HTTP session or client outlives a failed start."""
    for adapter in adapters.values():
        with contextlib.suppress(Exception):
            await adapter.stop()
