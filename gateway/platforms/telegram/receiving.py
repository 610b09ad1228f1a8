"""One Telegram update in, by polling or by webhook: read as a message (or not), then handed to the intake.

An update that cannot be read as a message is logged once and acknowledged: offering it again
would fail the same way and hold up every chat's updates behind it, for good. What an update that
cannot be stored becomes is :func:`gateway.platforms.intake.hand_over`'s, the same as on Discord.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Optional

from aiogram.types import Update

from gateway.platforms.base import IncomingMessage, Intake
from gateway.platforms.intake import HandOver, Outcome, Source, hand_over

log = logging.getLogger("gateway.platforms.telegram")  # the adapter's log: one logger to filter for Telegram

#: How the intake's log lines name Telegram and what it hands over.
TELEGRAM = Source("telegram", "update", log)

#: Turns an update into the gateway's message, or None when it is not recorded.
Reader = Callable[[Update], Optional[IncomingMessage]]


async def take_in(update: Update, read: Reader, intake: Intake, *, then: str) -> Optional[HandOver]:
    """Read ``update`` and hand it to ``intake``; None when it is not recorded (nothing to store, acknowledge it).
    ``then`` says what happens to an update not stored this time."""
    try:
        message = read(update)
    except Exception:
        log.exception("telegram: skipped update %s: it cannot be read as a message", update.update_id)
        return HandOver(Outcome.SKIPPED)
    if message is None:
        return None
    return await hand_over(intake, message, TELEGRAM, then=then)
