"""Handing one platform message to the gateway's intake: what is logged, and what the platform is told.

Every platform hands its messages over the same way, so an update that cannot be stored is treated
the same on Telegram and Discord:

- stored, or recognised as already stored: acknowledge it to the platform;
- it can never be stored (:data:`~gateway.platforms.base.UNSTORABLE`: it cannot be encoded, or the
  entry is refused as invalid): one error line, no traceback, and acknowledge it all the same —
  asking for it again would hold up every message behind it, for good;
- not stored this time (Redis restarts): one warning line while Redis does not answer (a traceback
  for anything else), and do NOT acknowledge it, so it comes again and nothing is lost.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass

from gateway.outage import is_redis_outage
from gateway.platforms.base import UNSTORABLE, IncomingMessage, Intake


class Outcome(enum.Enum):
    """What became of one message handed to the intake."""

    STORED = "stored"
    DUPLICATE = "duplicate"
    #: It can never be stored: logged once and acknowledged, so it holds up nothing.
    SKIPPED = "skipped"
    #: Not stored this time: not acknowledged, so the platform (or the adapter) offers it again.
    NOT_STORED = "not stored"


@dataclass(frozen=True)
class HandOver:
    """The outcome of one hand-over; ``error`` is why a message was not stored."""

    outcome: Outcome
    error: Exception | None = None

    @property
    def acknowledged(self) -> bool:
        """Whether the platform may be told the message arrived (it will not be offered again)."""
        return self.outcome is not Outcome.NOT_STORED


@dataclass(frozen=True)
class Source:
    """Who hands messages over, as the log names it: ``telegram`` and its ``update``, ``discord`` and its
    ``message``."""

    name: str
    unit: str
    log: logging.Logger


async def hand_over(intake: Intake, message: IncomingMessage, source: Source, *, then: str) -> HandOver:
    """Give ``message`` to ``intake`` and log what went wrong, once; ``then`` says what happens to a
    message not stored this time (e.g. ``"it will be fetched again"``)."""
    try:
        queued = await intake(message)
    except UNSTORABLE as error:
        source.log.error(
            "%s: skipped %s %s in chat %s: the message cannot be stored (%s: %.200s)",
            source.name,
            source.unit,
            message.update_id,
            message.chat_id,
            type(error).__name__,
            error,
        )
        return HandOver(Outcome.SKIPPED, error)
    except Exception as error:
        if is_redis_outage(error):
            source.log.warning(
                "%s: could not store %s %s, Redis does not answer (%s); %s",
                source.name,
                source.unit,
                message.update_id,
                error,
                then,
            )
        else:
            source.log.exception("%s: could not store %s %s; %s", source.name, source.unit, message.update_id, then)
        return HandOver(Outcome.NOT_STORED, error)
    return HandOver(Outcome.STORED if queued else Outcome.DUPLICATE)
