"""What every platform adapter is: platform events in, one ``IncomingMessage`` shape out, replies back.

Adapters never touch Redis or compression. They hand each update to the gateway's
intake (which makes it durable before the platform is acknowledged) and send the
replies the runner gives them, split to the platform's limit.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from typing import Optional, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator


def valid_text(text: str) -> str:
    """``text`` as valid Unicode: lone surrogates become U+FFFD, split surrogate pairs are joined.

    A platform's JSON may carry a lone surrogate (``"\\ud800"``); Python accepts it, but no UTF-8
    encoder does, so storing the message would fail and, retried, hold up every update after it.
    One UTF-16 unit is replaced by one, so Telegram's entity offsets stay right.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


class IncomingMessage(BaseModel):
    """One message from a person on a platform, as the gateway sees it.

    ``update_id`` is the platform's own id for the delivery (Telegram's update_id, Discord's
    message id) and is what duplicates are recognised by. ``respond`` is False for messages
    the bot only records (group chatter that did not address it).
    """

    model_config = ConfigDict(frozen=True)

    platform: str = Field(min_length=1)
    chat_id: str = Field(min_length=1)
    user_id: str = ""
    user_name: str = ""
    update_id: str = Field(min_length=1)
    text: str
    ts: float = Field(default_factory=time.time)
    respond: bool = True

    @field_validator("platform", "chat_id", "user_id", "user_name", "update_id", "text", mode="after")
    @classmethod
    def _valid_unicode(cls, value: str) -> str:
        """Every platform's text is made storable here, at the one boundary they all pass."""
        return valid_text(value)

    @property
    def chat(self) -> str:
        """The chat's key in the store, e.g. ``tg:123456``."""
        return f"{self.platform}:{self.chat_id}"

    @property
    def entry_id(self) -> str:
        """The id the message's inbox entry is recorded under in the session meta, e.g. ``tg:9001``."""
        return f"{self.platform}:{self.update_id}"


#: The gateway's intake: makes the message durable and returns once it is safe to acknowledge.
Intake = Callable[[IncomingMessage], Awaitable[bool]]

#: What an intake raises for a message that no retry can store (it cannot be encoded or is
#: refused as invalid), as opposed to a store that is down: such a message is skipped, not retried.
UNSTORABLE: tuple[type[Exception], ...] = (ValueError, TypeError, UnicodeError)


class PlatformRateLimited(Exception):
    """The platform refused a call for sending too fast; ``retry_after`` is its requested pause in seconds."""

    def __init__(self, retry_after: float, what: str = "") -> None:
        super().__init__(f"{what}: rate limited for {retry_after:g} s".lstrip(": "))
        self.retry_after = retry_after


class SendGate(Protocol):
    """The send budget as a platform sees it for one reply (``gateway.delivery.budget`` provides it)."""

    async def allow_preview(self) -> bool:
        """Whether a preview update may go out now (previews are dropped, never queued, when it is short)."""
        ...

    async def await_final(self) -> None:
        """Wait until a final message may go out."""
        ...

    async def rate_limited(self, retry_after: float) -> None:
        """The platform answered 429: every process pauses this reply's buckets for ``retry_after`` seconds."""
        ...


class Journal(Protocol):
    """Where a reply records its messages on the platform, so an attempt after a crash reuses them
    (``gateway.store.journal`` provides it)."""

    async def load(self) -> dict[str, str]:
        """What an earlier attempt recorded (empty for a first one)."""
        ...

    async def record(self, facts: Mapping[str, str]) -> None:
        """Record facts (field -> value) before the reply goes on."""
        ...


class OpenGate:
    """No shared budget: everything may go now (a single local chat, tests)."""

    async def allow_preview(self) -> bool:
        return True

    async def await_final(self) -> None:
        return None

    async def rate_limited(self, retry_after: float) -> None:
        return None


class Surface(Protocol):
    """Where one reply is shown while it streams, and delivered when it is done (see ``gateway.delivery``).

    ``interval`` is the shortest gap between two previews the platform wants.
    """

    interval: float

    async def preview(self, text: str) -> bool:
        """Show ``text`` (the whole reply so far) as the in-progress reply; False when it cannot be shown now."""
        ...

    async def finish(self, text: str) -> None:
        """Deliver the final reply completely (split as the platform requires), replacing the preview."""
        ...


class PlatformAdapter(ABC):
    """A chat platform: receives messages into the intake, sends replies, shows typing."""

    #: Platform prefix used in chat keys (``tg``, ``dc``, ``local``).
    platform: str
    #: Longest message the platform accepts, in the platform's own units.
    max_message_length: int

    @abstractmethod
    async def start(self, intake: Intake) -> None:
        """Begin receiving; every message goes to ``intake`` before it is acknowledged."""

    @abstractmethod
    async def stop(self) -> None:
        """Stop receiving and release connections."""

    @abstractmethod
    async def send(self, chat_id: str, text: str, *, reply_to: Optional[str] = None) -> None:
        """Deliver ``text`` completely (split as the platform requires), retrying as it asks."""

    def reply_surface(self, chat_id: str, gate: SendGate, *, reply_to: Optional[str] = None,
                      journal: Optional[Journal] = None) -> Optional[Surface]:
        """Where a reply to ``chat_id`` (answering update ``reply_to``) is shown and delivered, paced by ``gate``
        and recorded in ``journal``; None where replies are sent whole by :meth:`send`."""
        return None

    async def typing(self, chat_id: str) -> None:
        """Show that a reply is being prepared; platforms without an indicator do nothing."""

    async def verify(self) -> None:
        """Check the platform takes our credentials (Telegram's getMe, Discord's login) before the gateway
        opens, raising an error that says what to fix; platforms with nothing to check return at once."""

    async def failed(self) -> Exception:
        """Wait until the adapter stops receiving on its own (a second poller on one token, a revoked
        token) and return why; platforms that cannot stop that way wait for ever."""
        await asyncio.Event().wait()
        raise AssertionError("unreachable")
