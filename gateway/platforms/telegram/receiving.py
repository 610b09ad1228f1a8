"""One Telegram update (or one album's updates) in, by polling or by webhook: read as a message (or not),
then handed to the intake.

An update that cannot be read as a message is logged once and acknowledged: offering it again
would fail the same way and hold up every chat's updates behind it, for good. What an update that
cannot be stored becomes is :func:`gateway.platforms.intake.hand_over`'s, the same as on Discord.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from aiogram.types import Update

from gateway.platforms.base import IncomingMessage, Intake
from gateway.platforms.intake import HandOver, Outcome, Source, hand_over

log = logging.getLogger("gateway.platforms.telegram")  # the adapter's log: one logger to filter for Telegram

#: How the intake's log lines name Telegram and what it hands over.
TELEGRAM = Source("telegram", "update", log)

#: Turns the updates of one message (one update, or an album's parts oldest first) into the gateway's
#: message, or None when it is not recorded.
Reader = Callable[[Sequence[Update]], IncomingMessage | None]


async def take_in(updates: Sequence[Update], read: Reader, intake: Intake, *, then: str) -> HandOver | None:
    """Read ``updates`` (one message's) and hand them to ``intake``; None when they are not recorded (nothing
    to store, acknowledge them). ``then`` says what happens to updates not stored this time."""
    try:
        message = read(updates)
    except Exception:
        log.exception(
            "telegram: skipped update %s: it cannot be read as a message",
            ", ".join(str(update.update_id) for update in updates),
        )
        return HandOver(Outcome.SKIPPED)
    if message is None:
        return None
    return await hand_over(intake, message, TELEGRAM, then=then)
