"""How a Bot API call is tried again: the backoff every Telegram retry waits, and the final-send policy.

Final sends — whole replies, a streamed reply's final messages, ``setWebhook`` — all go through
:func:`send_retry`'s :class:`~gateway.platforms.retry.SendRetry`: a 429 is waited out exactly as long
as Telegram asks, as often as it asks (a streamed reply's through the shared send budget); network and
5xx errors are retried ``network_retries`` times where the reply is sent whole.
A message too large for Telegram is a refusal, although aiogram reports it as a network error.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiogram.exceptions import (
    TelegramAPIError,
    TelegramEntityTooLarge,
    TelegramNetworkError,
    TelegramRetryAfter,
    TelegramServerError,
)

from gateway.platforms.base import PlatformRateLimited
from gateway.platforms.retry import SendRetry, Sleep, doubling

T = TypeVar("T")

#: Seconds before retry ``n`` of any Bot API call: half a second, doubling, at most 30.
backoff = doubling(0.5, 30.0)


def is_transient(error: BaseException) -> bool:
    """A network failure or a 5xx, worth another attempt; an entity too large never is."""
    return isinstance(error, (TelegramNetworkError, TelegramServerError)) and not isinstance(error, TelegramEntityTooLarge)


def _described(error: BaseException) -> str:
    return error.message if isinstance(error, TelegramAPIError) else str(error)


def send_retry(log: logging.Logger, *, network_retries: int, sleep: Sleep) -> SendRetry:
    """The Telegram adapter's one retry policy for final sends."""
    return SendRetry(log=log, transient=is_transient, retries=network_retries, backoff=backoff, sleep=sleep,
                     describe=_described)


async def once(request: Callable[[], Awaitable[T]], what: str) -> T:
    """One Bot API call; its 429 raised as :class:`PlatformRateLimited`, which every retry policy understands."""
    try:
        return await request()
    except TelegramRetryAfter as error:
        raise PlatformRateLimited(error.retry_after, what) from error
