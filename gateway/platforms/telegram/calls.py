"""How a Bot API call is tried again: the backoff every Telegram retry waits, and the final-send policy.

Final sends — whole replies, a streamed reply's final messages, ``setWebhook`` — all go through
:func:`send_retry`'s :class:`~gateway.platforms.retry.SendRetry`: a 429 is waited out exactly as long
as Telegram asks, as often as it asks (a streamed reply's through the shared send budget); network and
5xx errors are retried ``network_retries`` times where the reply is sent whole.
A message too large for Telegram is a refusal, although aiogram reports it as a network error.

An answer foldgate cannot read (:mod:`.answers`) that said ``ok`` means the call took effect: it is
not made again (a message would be sent twice), the caller goes on without what the answer would
have told, and one line says so (:func:`accepted`). One that did not say ``ok`` is treated like an
answer lost on the way: the call may not have happened, so it is tried again like a network failure.
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

from agent.retrying import BOT_API_CALL
from gateway.platforms.base import PlatformRateLimited
from gateway.platforms.retry import SendRetry, Sleep
from gateway.platforms.telegram.answers import UnreadableAnswer

T = TypeVar("T")

#: Seconds before retry ``n`` of any Bot API call (:data:`agent.retrying.BOT_API_CALL`: half a second,
#: doubling, at most 30), for the loops that keep their own count (the poller, the start-up check).
backoff = BOT_API_CALL.delay


def is_transient(error: BaseException) -> bool:
    """A network failure, a 5xx or an unread answer that did not say ``ok``, worth another attempt; an entity
    too large never is."""
    if isinstance(error, UnreadableAnswer):
        return not error.accepted
    return isinstance(error, (TelegramNetworkError, TelegramServerError)) and not isinstance(
        error, TelegramEntityTooLarge
    )


def accepted(log: logging.Logger, error: UnreadableAnswer, what: str) -> bool:
    """Whether the call ``what`` took effect although its answer cannot be read (then one line says so, and
    the caller goes on); False when it may not have, for the caller to raise ``error``."""
    if error.accepted:
        log.warning("telegram: %s; %s went through all the same, so it is not made again", error, what)
    return error.accepted


def _described(error: BaseException) -> str:
    return error.message if isinstance(error, TelegramAPIError) else str(error)


def send_retry(log: logging.Logger, *, network_retries: int, sleep: Sleep) -> SendRetry:
    """The Telegram adapter's one retry policy for final sends: :data:`~agent.retrying.BOT_API_CALL`, with
    ``network_retries`` retries after a network or 5xx failure."""
    return SendRetry(
        log=log,
        transient=is_transient,
        policy=BOT_API_CALL.adjusted(attempts=network_retries + 1),
        sleep=sleep,
        describe=_described,
    )


async def once(request: Callable[[], Awaitable[T]], what: str) -> T:
    """One Bot API call; its 429 raised as :class:`PlatformRateLimited`, which every retry policy understands."""
    try:
        return await request()
    except TelegramRetryAfter as error:
        raise PlatformRateLimited(error.retry_after, what) from error
