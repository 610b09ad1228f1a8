"""The discord.py client the Discord adapter runs on, and its login (see :mod:`gateway.platforms.discord`).

The client asks for the few intents the bot needs and never pings anyone. The login runs over HTTP
only, at start and in ``foldgate doctor``: a token of the wrong shape is refused before anything is
sent; an API that cannot be reached is tried again under :data:`agent.retrying.DISCORD_LOGIN`,
within one deadline for every attempt together (a firewalled network fails in seconds); anything
else — a rejected token, an answer discord.py cannot read, a refusal — becomes one line naming the
setting to fix (:class:`DiscordAdapterError`) instead of discord.py's traceback.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from typing import Any

import aiohttp
import discord

from agent.retrying import DISCORD_LOGIN, Policy, Sleep, retried
from gateway.platforms.discord_answers import Reader, UnreadableDiscordAnswer
from gateway.platforms.discord_replies import NO_PINGS
from gateway.platforms.discord_tokens import TOKEN_HINT, token_shape_problem
from gateway.startup_errors import StartupError

#: Seconds the login at start (and in ``foldgate doctor``) may take, every attempt included, before
#: Discord counts as unreachable: a firewalled network fails in seconds.
LOGIN_TIMEOUT = 8.0


class DiscordAdapterError(StartupError):
    """The adapter cannot start or go on; ``setting`` names the configuration key to look at and the
    message says what to do, so start-up prints one line instead of discord.py's traceback."""

    def __init__(self, message: str, *, setting: str = "platforms.discord") -> None:
        super().__init__(message, setting=setting)


class DiscordTokenRejected(DiscordAdapterError, discord.LoginFailure):
    """Discord answered the login with 401; still a ``LoginFailure`` for code that catches discord.py's type."""


class DiscordTokenMalformed(DiscordAdapterError, discord.LoginFailure):
    """The token is not shaped like a bot token, so it was not sent; a ``LoginFailure`` like a rejected one."""


def api_base() -> str:
    """The REST API base discord.py sends to (tests point it at a fake)."""
    return str(discord.http.Route.BASE)


def discord_intents() -> discord.Intents:
    """Servers, server messages, DMs and message content — nothing else (no member list, no presence)."""
    intents = discord.Intents.none()
    intents.guilds = True
    intents.guild_messages = True
    intents.dm_messages = True
    intents.message_content = True
    return intents


def build_client(
    *,
    shard_ids: Sequence[int] | None = None,
    shard_count: int | None = None,
    http_trace: aiohttp.TraceConfig | None = None,
) -> discord.Client:
    """A plain client, or an ``AutoShardedClient`` for exactly ``shard_ids`` of ``shard_count``; ``http_trace``
    sees every REST request it makes."""
    options: dict[str, Any] = dict(
        intents=discord_intents(), allowed_mentions=NO_PINGS, chunk_guilds_at_startup=False, http_trace=http_trace
    )
    # the bot never joins voice: skip discord.py's start-up warnings about missing voice libraries
    discord.VoiceClient.warn_nacl = discord.VoiceClient.warn_dave = False
    if shard_ids is None and shard_count is None:
        return discord.Client(**options)
    return discord.AutoShardedClient(
        shard_ids=list(shard_ids) if shard_ids is not None else None, shard_count=shard_count, **options
    )


def unreachable(error: BaseException) -> bool:
    """The ``retryable`` hook of the login: the API could not be reached (the network may still be coming up)."""
    return isinstance(error, (aiohttp.ClientError, OSError))


async def log_in(
    client: discord.Client,
    reader: Reader,
    token: str,
    *,
    timeout: float = LOGIN_TIMEOUT,
    policy: Policy = DISCORD_LOGIN,
    sleep: Sleep = asyncio.sleep,
) -> discord.ClientUser:
    """Log ``client`` in over HTTP (no gateway connection) with ``token``, trying an unreachable API again
    under ``policy`` within ``timeout`` seconds in all; the bot's account, or a :class:`DiscordAdapterError`
    that names the setting to fix (see the module docstring). The caller closes the client either way."""
    problem = token_shape_problem(token)
    if problem:
        raise DiscordTokenMalformed(
            f"not a Discord bot token ({problem}) — {TOKEN_HINT}", setting="platforms.discord.token"
        )
    made = 0

    async def attempt() -> None:
        nonlocal made
        made += 1
        await reader.read(functools.partial(client.login, token))

    async def before_retry(error: Exception, retry: int, wait: float) -> None:
        await reopen_http(client)

    try:
        async with asyncio.timeout(timeout):
            await retried(policy, attempt, retryable=unreachable, before_retry=before_retry, sleep=sleep)
    except UnreadableDiscordAnswer as error:  # logging in again gets the same answer
        raise DiscordAdapterError(f"{error.sentence} — {error.fix}", setting=error.setting) from error
    except discord.LoginFailure as error:
        raise DiscordTokenRejected(
            f"Discord rejected the bot token (401 Unauthorized) — {TOKEN_HINT}", setting="platforms.discord.token"
        ) from error
    except discord.HTTPException as error:
        said = error.text or (error.response.reason if error.response is not None else "")
        raise DiscordAdapterError(
            f"Discord refused the login (HTTP {error.status}: {said}) — check "
            "platforms.discord.token, or try again later if Discord has an outage"
        ) from error
    except TimeoutError as error:
        raise DiscordAdapterError(
            f"no answer from the Discord API at {api_base()} within {timeout:g} s — check "
            "this machine's network and firewall"
        ) from error
    except (aiohttp.ClientError, OSError) as error:
        tries = f"after {made} attempt{'s' if made != 1 else ''}"
        raise DiscordAdapterError(
            f"cannot reach the Discord API at {api_base()} {tries} ({type(error).__name__}: "
            f"{error}) — check this machine's network and firewall"
        ) from error
    assert client.user is not None
    return client.user


async def reopen_http(client: discord.Client) -> None:
    """Close the HTTP session a failed login left open: discord.py opens a new one at every login,
    and the closed session's connector goes with it, so the next login gets a connector of its own."""
    await client.http.close()
    client.http.connector = aiohttp.TCPConnector(limit=0)
