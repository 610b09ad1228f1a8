"""``foldgate doctor``: make once the first contact ``foldgate run`` makes, and say what to fix.

``foldgate config check`` reads the file and the environment. A valid configuration can still
fail to start: Redis is down, a token was revoked, the provider sits behind a proxy. The doctor
reaches each part the way the gateway does — PING, a one-token model answer, Telegram's getMe,
Discord's HTTP login (no gateway connection), and when voice is transcribed (``media.transcription``
not ``off``) half a second of silence sent to the transcription endpoint — each within ten seconds at
most, so a black-holed host costs seconds, not minutes, and prints one row per check. The platform
checks are the ones ``foldgate run`` makes before it prints anything, with the same attempts and
deadlines. It leaves nothing running: an embedded Redis it started for the check is stopped again,
and every client it opened is closed.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib
import logging
import os
import shlex
import shutil
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, TextIO

from redis.exceptions import RedisError

from gateway.cli.doctor_check import PROVIDER_TIMEOUT, REDIS_TIMEOUT, Check
from gateway.cli.doctor_extras import check_mcp_server, check_transcription
from gateway.config import ConfigError, Settings, load_settings, resolve_config_path
from gateway.startup_errors import explain, one_line, redis_address, redis_failure, setting_label

if TYPE_CHECKING:
    from agent.windows import WindowBook
    from gateway.agents import AgentBuilder


def _failed(error: BaseException, settings: Settings, fallback_setting: str) -> str:
    """The shared one-line explanation, or the error itself under the setting the check is about."""
    return explain(error, settings) or f"{setting_label(fallback_setting)}: {type(error).__name__}: {one_line(error)}"


# --------------------------------------------------------------------------- the checks


def check_config(path: str | None) -> tuple[Check, Settings | None]:
    """Load the configuration as ``foldgate run`` does; a failure names every key that is wrong."""
    try:
        settings = load_settings(path)
    except ConfigError as error:
        return Check("config", "FAIL", "; ".join(error.problems) or str(error)), None
    where = resolve_config_path(path, os.environ)
    return Check("config", "ok", f"{where or 'built-in defaults (no config file)'} + environment"), settings


async def check_redis(settings: Settings) -> Check:
    """PING the configured Redis; without a URL, the embedded server (started briefly, or the running one shared)."""
    from gateway.server.lifecycle import connect_or_embed

    url = settings.redis.url.strip()
    timeout = REDIS_TIMEOUT if url else None  # the embedded server has its own start deadline; cancelling
    notices: list[str] = []  # its start half-way could leave the child running
    try:
        async with asyncio.timeout(timeout):
            client, embedded = await connect_or_embed(
                url or None, settings.home_path, cluster=settings.redis.cluster, notice=notices.append
            )
    except (OSError, TimeoutError, ValueError, RedisError) as error:
        failure = redis_failure(error, settings, timeout=REDIS_TIMEOUT)
        return Check("redis", "FAIL", _failed(failure, settings, "redis.url"))
    try:
        from gateway.store.channel import channel_for

        channel = channel_for(client)  # the gateway's message path logs in on a connection of its own
        try:
            async with asyncio.timeout(REDIS_TIMEOUT):
                await channel.call("PING")
        except (OSError, TimeoutError, RedisError) as error:
            return Check(
                "redis", "FAIL", _failed(redis_failure(error, settings, timeout=REDIS_TIMEOUT), settings, "redis.url")
            )
        finally:
            await channel.aclose()
        version = ""
        try:
            async with asyncio.timeout(REDIS_TIMEOUT):
                info = await client.info("server")
            name = "valkey" if "valkey_version" in info else "redis"
            version = f" ({name} {info.get('valkey_version') or info.get('redis_version')})"
        except Exception:  # INFO is a courtesy (a locked-down user may not run it): PING already answered
            pass
        if embedded is None:
            return Check("redis", "ok", f"{redis_address(url)} answers PING{version}")
        how = (
            "started for this check and stopped again"
            if getattr(embedded, "owns_server", True)
            else "shared with the foldgate already running on this home"
        )
        said = "".join(f"; {one_line(notice)}" for notice in notices)  # e.g. a left-behind server was stopped first
        return Check(
            "redis", "ok", f"embedded server under {settings.home_path / 'redis'} answers PING{version}; {how}{said}"
        )
    finally:
        await client.aclose()
        if embedded is not None:
            await embedded.stop()


def _probe_settings(settings: Settings) -> Settings:
    """The settings with the provider's retries off and its timeouts inside the check's own."""
    model = settings.model.model_copy(
        update={
            "max_retries": 0,
            "timeout_seconds": min(settings.model.timeout_seconds, PROVIDER_TIMEOUT),
            "connect_timeout_seconds": min(settings.model.connect_timeout_seconds, PROVIDER_TIMEOUT),
        }
    )
    return settings.model_copy(update={"model": model})


async def check_provider(settings: Settings) -> Check:
    """Ask the configured model for a one-token answer through the same client a turn uses, then each model's
    window and where it came from."""
    from gateway.agents import AgentBuilder, resolve_api_mode

    model = settings.model
    if model.provider == "local":
        return Check("provider", "ok", f"{model.name}: the local demo model (model.provider local), no network needed")
    if resolve_api_mode(model.provider, model.api_mode) == "codex_app_server":
        program = (shlex.split(model.app_server_command) or [""])[0]
        if shutil.which(program):
            return Check(
                "provider", "ok", f"{model.name} through `{model.app_server_command}` ({shutil.which(program)})"
            )
        return Check(
            "provider",
            "FAIL",
            f"{setting_label('model.app_server_command')}: {program!r} is not on the PATH"
            " — install the codex CLI, or give its full path",
        )
    agents = AgentBuilder(_probe_settings(settings))
    try:
        answered = await _answer(agents, settings)
        if isinstance(answered, Check):
            return answered
        windows = await _window_lines(agents, settings)  # it answered, so it can be asked about its models too
    finally:
        await agents.aclose()
    return Check("provider", "ok", "; ".join([answered, *windows]))


async def _answer(agents: AgentBuilder, settings: Settings) -> str | Check:
    """What the model said to a one-token request, or the failed row that says what to fix."""
    from agent.llm.errors import BadResponse, ProviderError
    from agent.models import api_model_id

    model, where = settings.model, agents.base_url
    try:
        async with asyncio.timeout(PROVIDER_TIMEOUT):
            await agents.chat_model.complete(
                [{"role": "user", "content": "Reply with the word OK."}], model=api_model_id(model.name), max_tokens=1
            )
    except BadResponse as error:  # e.g. a reasoning model spends one token thinking: it was reached and answered
        return f"{model.name} at {where} answered ({one_line(error, 120)})"
    except ProviderError as error:
        return Check("provider", "FAIL", _failed(error, settings, "model.base_url"))
    except TimeoutError:
        return Check(
            "provider",
            "FAIL",
            f"{setting_label('model.base_url')}: no answer from {where} within "
            f"{PROVIDER_TIMEOUT:g} s — check model.base_url, the network, and "
            "model.proxy / HTTPS_PROXY if this network needs a proxy",
        )
    return f"{model.name} at {where} answered"


async def _window_lines(agents: AgentBuilder, settings: Settings) -> list[str]:
    """Each model's window and where it came from, what refusals taught the running gateways included; nothing
    when the provider does not say within the check's time (the answer's own check says why)."""
    try:
        async with asyncio.timeout(PROVIDER_TIMEOUT / 2):
            return await agents.settle_windows(await _learned_windows(settings))
    except TimeoutError:
        return []


async def _learned_windows(settings: Settings) -> WindowBook | None:
    """The windows refusals taught the running gateways, from the configured Redis (None without one, or when it
    does not answer: the redis row says why)."""
    from gateway.store.windows import read_learned

    if not settings.redis.url.strip():
        return None
    return await read_learned(settings.redis.url, settings.redis.key_prefix, timeout=REDIS_TIMEOUT)


async def check_telegram(settings: Settings) -> Check:
    """getMe with the configured token and Bot API server: the bot's @username when it works."""
    telegram = settings.platforms.telegram
    if not telegram.enabled:
        return Check("telegram", "skipped", "platforms.telegram.enabled is false")
    from gateway.platforms.telegram import DEFAULT_API_SERVER, TelegramAdapter, TelegramAdapterError

    try:
        adapter = TelegramAdapter.from_settings(settings)
    except TelegramAdapterError as error:
        return Check("telegram", "FAIL", _failed(error, settings, "platforms.telegram.token"))
    where = telegram.api_server or DEFAULT_API_SERVER
    try:
        me = await adapter.identify()
    except TelegramAdapterError as error:
        return Check("telegram", "FAIL", _failed(error, settings, "platforms.telegram.token"))
    finally:
        await adapter.bot.session.close()
    return Check("telegram", "ok", f"@{me.username} (bot id {me.id}) at {where}, {telegram.mode} mode")


async def check_discord(settings: Settings) -> Check:
    """Discord's HTTP login with the configured token (no gateway connection): the bot's name when it works."""
    if not settings.platforms.discord.enabled:
        return Check("discord", "skipped", "platforms.discord.enabled is false")
    from gateway.platforms.discord import DiscordAdapter, DiscordAdapterError, api_base

    try:
        adapter = DiscordAdapter.from_settings(settings)
    except (DiscordAdapterError, ValueError) as error:
        return Check("discord", "FAIL", _failed(error, settings, "platforms.discord.token"))
    try:
        user = await adapter.login()
    except DiscordAdapterError as error:
        return Check("discord", "FAIL", _failed(error, settings, "platforms.discord.token"))
    finally:
        await adapter.client.close()
    return Check("discord", "ok", f"@{user.name} (bot id {user.id}) at {api_base()}")


# --------------------------------------------------------------------------- the report


#: The checks after the configuration's, by the name their row carries.
SERVICE_CHECKS: dict[str, Callable[[Settings], Awaitable[Check]]] = {
    "redis": check_redis,
    "provider": check_provider,
    "telegram": check_telegram,
    "discord": check_discord,
}


def import_platform_clients(settings: Settings) -> None:
    """Import the enabled platforms' libraries before any check's clock starts: importing aiogram takes
    seconds and blocks the loop, so done inside one check it would run out the others' deadlines."""
    for platform in ("telegram", "discord"):
        if getattr(settings.platforms, platform).enabled:
            importlib.import_module(f"gateway.platforms.{platform}")


def checks_for(settings: Settings) -> dict[str, Callable[[Settings], Awaitable[Check]]]:
    """The service checks, the transcription endpoint's when voice is transcribed (a row only then), and one
    row per enabled MCP server."""
    checks = dict(SERVICE_CHECKS)
    if settings.media.transcription.provider != "off":
        checks["transcription"] = check_transcription
    for name, server in sorted(settings.tools.mcp_servers.items()):
        if server.enabled:
            checks[f"mcp {name}"] = functools.partial(check_mcp_server, name)
    return checks


def planned_checks(settings: Settings) -> list[tuple[str, Callable[[Settings], Awaitable[Check]], Settings]]:
    """(row name, check, the settings it reads): with ``bots:``, Redis once and every other check per bot,
    its rows named after the bot (``support telegram``), so one bot's revoked token is its own row."""
    if not settings.bots:
        return [(name, check, settings) for name, check in checks_for(settings).items()]
    planned: list[tuple[str, Callable[[Settings], Awaitable[Check]], Settings]] = [("redis", check_redis, settings)]
    for bot in settings.each_bot():
        planned += [
            (f"{bot.name} {name}", check, bot.settings)
            for name, check in checks_for(bot.settings).items()
            if name != "redis"
        ]
    return planned


async def run_checks(settings: Settings) -> list[Check]:
    """Every check after the configuration, at once: the slowest bounds the wait, not their sum."""
    for bot in settings.each_bot():
        import_platform_clients(bot.settings)
    planned = planned_checks(settings)
    results = await asyncio.gather(*(check(checked) for _, check, checked in planned), return_exceptions=True)
    return [
        Check(name, result.status, result.detail)
        if isinstance(result, Check)
        else Check(name, "FAIL", f"the check itself failed ({type(result).__name__}: {one_line(result)})")
        for (name, _, _), result in zip(planned, results)
    ]


def render(checks: Sequence[Check]) -> str:
    """Plain aligned columns: check, result, detail."""
    rows = [("check", "result", "detail"), *((c.name, c.status, c.detail) for c in checks)]
    widths = [max(len(row[column]) for row in rows) for column in range(2)]
    return "\n".join(f"{name:<{widths[0]}}  {status:<{widths[1]}}  {detail}" for name, status, detail in rows)


def summary(checks: Sequence[Check]) -> str:
    failed = [check.name for check in checks if check.status == "FAIL"]
    if not failed:
        return "foldgate doctor: every enabled check passed"
    return (
        f"foldgate doctor: {len(failed)} check{'s' if len(failed) != 1 else ''} failed ({', '.join(failed)}):"
        " fix what those rows say, then run foldgate doctor again"
    )


def doctor(path: str | None, out: TextIO = sys.stdout) -> int:
    """Run every check, print the table and a summary; 0 when every enabled check passed, else 1."""
    config, settings = check_config(path)
    if settings is None:
        checks = [config, *(Check(name, "skipped", "needs a valid configuration") for name in SERVICE_CHECKS)]
    else:
        from gateway.run.process import run_gateway_loop

        checks = [config, *run_gateway_loop(run_checks(settings))]
    out.write(render(checks) + "\n" + summary(checks) + "\n")
    out.flush()
    return 1 if any(check.status == "FAIL" for check in checks) else 0


def doctor_command(args: argparse.Namespace) -> int:
    """``foldgate doctor [--config PATH]``."""
    # Libraries' warnings (retries, unclosed sessions) would break the table; the rows say what failed.
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    try:
        return doctor(getattr(args, "config", None))
    except KeyboardInterrupt:
        return 130
