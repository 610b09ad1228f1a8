"""Who the bot is (getMe), asked at start and by ``foldgate doctor``: a wrong token or address is one sentence,
and so is an answer foldgate cannot read (an emulator that leaves out a field aiogram requires).

A network failure or a 5xx is tried again within a short deadline, without a log line: the operator
reads one sentence at the end, not a retry per line. Nothing in a sentence shows the bot token.
"""

from __future__ import annotations

import asyncio
import math

from aiogram import Bot
from aiogram.exceptions import (
    TelegramAPIError,
    TelegramNetworkError,
    TelegramRetryAfter,
    TelegramServerError,
    TelegramUnauthorizedError,
)
from aiogram.types import User

from gateway.platforms.retry import Sleep
from gateway.platforms.telegram.answers import DEFAULT_API_SERVER, UnreadableAnswer, api_setting
from gateway.platforms.telegram.calls import backoff
from gateway.platforms.telegram.errors import TelegramAdapterError

#: Attempts of getMe at start: a Bot API briefly out of reach (the network still coming up) gets two more.
START_ATTEMPTS = 3
#: Seconds getMe at start (and in ``foldgate doctor``) may take, every attempt included: a wrong or
#: firewalled address fails in seconds, not after minutes of backoff.
START_SECONDS = 8.0


async def identify(
    bot: Bot, api_server: str | None, *, sleep: Sleep, attempts: int = START_ATTEMPTS, within: float = START_SECONDS
) -> User:
    """Ask Telegram who the bot is (getMe), up to ``attempts`` times within ``within`` seconds in all.

    A rejected token, an unreachable or silent Bot API, an answer foldgate cannot read or a refusal becomes a
    :class:`TelegramAdapterError` naming the setting to fix, because at start nobody but the
    operator can act on it.
    """
    where = api_server or DEFAULT_API_SERVER
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    made = 0
    while True:
        made += 1
        left = deadline - loop.time()
        try:
            async with asyncio.timeout(left):
                return await bot.get_me(request_timeout=max(1, math.ceil(left)))
        except TelegramUnauthorizedError as error:
            raise TelegramAdapterError(
                f"Telegram rejected the bot token ({error.message}) — copy the current token from @BotFather into "
                "platforms.telegram.token or TELEGRAM_BOT_TOKEN",
                setting="platforms.telegram.token",
            ) from error
        except UnreadableAnswer as error:  # asking again gets the same answer: the server is not what aiogram reads
            raise TelegramAdapterError(f"{error.sentence} — {error.fix}", setting=error.setting) from error
        except TimeoutError as error:
            raise unreachable(
                api_server, f"no answer from the Telegram Bot API at {where} within {within:g} s"
            ) from error
        except TelegramRetryAfter as error:
            await sleep(_rate_limit_wait(where, error, left=deadline - loop.time()))
        except (TelegramNetworkError, TelegramServerError) as error:
            left = deadline - loop.time()
            await sleep(_retry_wait(bot, api_server, error, made=made, attempts=attempts, left=left, within=within))
        except TelegramAPIError as error:
            raise TelegramAdapterError(
                f"the Bot API at {where} refused getMe ({redacted(bot, error.message)}) — check "
                "platforms.telegram.token and platforms.telegram.api_server",
                setting="platforms.telegram",
            ) from error


def _rate_limit_wait(where: str, error: TelegramRetryAfter, *, left: float) -> float:
    """The wait a 429 asks for, when it ends before the deadline (``left`` seconds away); else the error."""
    if error.retry_after >= left:
        raise TelegramAdapterError(
            f"the Bot API at {where} asks to wait {error.retry_after} s before the next request (429) — "
            "start again after that",
            setting="platforms.telegram",
        ) from error
    return error.retry_after


def _retry_wait(
    bot: Bot,
    api_server: str | None,
    error: TelegramNetworkError | TelegramServerError,
    *,
    made: int,
    attempts: int,
    left: float,
    within: float,
) -> float:
    """The backoff before getMe is tried again after a network failure or a 5xx; the error instead when aiogram's
    own deadline ran out, the attempts are used up or the wait would end past the deadline (``left`` seconds
    away)."""
    where = api_server or DEFAULT_API_SERVER
    if isinstance(error.__cause__, TimeoutError):  # aiogram's own deadline for the request
        raise unreachable(api_server, f"no answer from the Telegram Bot API at {where} within {within:g} s") from error
    delay = backoff(made)
    if made < attempts and delay < left:
        return delay
    tries = f"after {made} attempt{'s' if made != 1 else ''}"
    reason = redacted(bot, error.message.removeprefix("HTTP Client says - "))
    if isinstance(error, TelegramServerError):
        raise TelegramAdapterError(
            f"the Bot API at {where} failed getMe {tries} ({reason}) — try again later, or check "
            "platforms.telegram.api_server",
            setting=api_setting(api_server),
        ) from error
    raise unreachable(api_server, f"cannot reach the Telegram Bot API at {where} {tries} ({reason})") from error


def unreachable(api_server: str | None, what: str) -> TelegramAdapterError:
    """``what`` went wrong reaching the Bot API, with the setting and the fix that fit this configuration."""
    if api_server:
        return TelegramAdapterError(
            f"{what} — check platforms.telegram.api_server", setting="platforms.telegram.api_server"
        )
    return TelegramAdapterError(
        f"{what} — check this machine's network and firewall (or set "
        "platforms.telegram.api_server to a Bot API server it can reach)",
        setting="platforms.telegram",
    )


def redacted(bot: Bot, text: str) -> str:
    """``text`` without the bot token, which must never reach a log or a terminal."""
    return text.replace(bot.token, "<token>") if bot.token else text
