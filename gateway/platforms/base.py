"""What every platform adapter is: platform events in, one ``IncomingMessage`` shape out, replies back.

Adapters never touch Redis or compression. They hand each update to the gateway's
intake (which makes it durable before the platform is acknowledged) and send the
replies the runner gives them, split to the platform's limit.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gateway.media.errors import MediaError, MediaTooLarge


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


class MediaItem(BaseModel):
    """A photo, file or voice message as the platform announced it: enough to fetch it later, nothing fetched yet.

    ``file_id`` is the platform's own handle to fetch it again (Telegram's file_id, a Discord
    attachment URL, ``path:<absolute path>`` in the terminal, ``upload:<sha256>`` for bytes already
    stored). ``size`` is what the platform reports (0 unknown), so a file over the limit is refused
    before a byte is downloaded.
    """

    model_config = ConfigDict(frozen=True)

    kind: Literal["image", "document", "audio", "voice"]
    file_id: str = Field(min_length=1)
    name: str = ""
    mime: str = ""
    size: int = Field(default=0, ge=0)
    width: int = Field(default=0, ge=0)
    height: int = Field(default=0, ge=0)
    duration: float = Field(default=0.0, ge=0)

    @field_validator("file_id", "name", "mime", mode="after")
    @classmethod
    def _valid_unicode(cls, value: str) -> str:
        """A file name is a person's text like any other: storable whatever the platform sent."""
        return valid_text(value)


@dataclass(frozen=True)
class OutgoingFile:
    """A photo or file the bot sends the person (an image the model made, a tool's file): bytes and name."""

    kind: Literal["image", "document", "audio", "voice"]
    data: bytes = field(repr=False)
    name: str
    mime: str

    @property
    def caption(self) -> str:
        """The line a platform that cannot send files shows in its place."""
        return f"[{self.kind}: {self.name or self.kind}, not shown here]"


@dataclass(frozen=True)
class ApprovalPrompt:
    """A question the bot asks before it runs a tool: "may I?", answered yes or no by the person who asked."""

    approval_id: str
    question: str

    @property
    def text(self) -> str:
        """The question as a platform without buttons shows it: with the commands that answer it."""
        return f"{self.question}\nAnswer /approve {self.approval_id} or /refuse {self.approval_id}."


def approval_command(approval_id: str, approved: bool) -> str:
    """The text a button press stands for: ``/approve <id>`` or ``/refuse <id>``."""
    return f"/{'approve' if approved else 'refuse'} {approval_id}"


def check_size(item: MediaItem, limit: int) -> None:
    """Refuse ``item`` before any download when the platform reported a size over ``limit``."""
    if item.size > limit:
        raise MediaTooLarge(item.name, item.size, limit)


@dataclass(frozen=True)
class TurnRefusal:
    """Why a message is kept but not answered now, by kind: told to the adapter beside the notice every platform
    sends, so one that answers a waiting request with a status (the API's 503 and 429) reads the kind, never the
    notice's wording."""

    #: ``provider_away``: the provider does not answer (the message is answered once it is back);
    #: ``over_budget``: a budget is used up until it resets; ``rate_limited``: the sender sends too fast.
    kind: Literal["provider_away", "over_budget", "rate_limited"]
    #: The notice the person is told (what was spent and until when, what the provider said).
    text: str = ""
    #: Seconds after which asking again makes sense, when known (the provider's own ``Retry-After``).
    retry_after: float | None = None
    #: When a used-up budget resets (seconds since the epoch), for ``over_budget``.
    resets_at: float | None = None


class ToolResult(BaseModel):
    """The result of one call of a client's own tool, as the client's next request brings it (a ``role: "tool"``
    message): the call it answers and what the tool said."""

    model_config = ConfigDict(frozen=True)

    tool_call_id: str = Field(min_length=1)
    content: str = ""

    @field_validator("tool_call_id", "content", mode="after")
    @classmethod
    def _valid_unicode(cls, value: str) -> str:
        return valid_text(value)


class IncomingMessage(BaseModel):
    """One message from a person on a platform, as the gateway sees it.

    ``update_id`` is the platform's own id for the delivery (Telegram's update_id, Discord's
    message id) and is what duplicates are recognised by. ``respond`` is False for messages
    the bot only records (group chatter that did not address it). ``items`` are the photos,
    files and voice messages it carries (an album is one message with several, or several messages
    sharing ``album``); ``text`` may be empty when there are items (the platforms hand in no message
    that has neither).
    """

    model_config = ConfigDict(frozen=True)

    platform: str = Field(min_length=1)
    chat_id: str = Field(min_length=1)
    user_id: str = ""
    user_name: str = ""
    update_id: str = Field(min_length=1)
    text: str = ""
    ts: float = Field(default_factory=time.time)
    respond: bool = True
    items: tuple[MediaItem, ...] = ()
    #: The album this message is one part of (Telegram's ``media_group_id``) when its parts arrive as
    #: messages of their own (a webhook): the turn waits for the rest and answers them together.
    album: str = ""
    #: Set by the gateway's intake, never by a platform: its sender sends faster than ``access.messages_per_minute``,
    #: so it is kept unanswered (and the sender told once a minute).
    limited: bool = False
    #: Function tools the sender runs itself (an OpenAI-compatible client's ``tools``, in that shape), offered to
    #: the model beside the bot's own; a reply that calls them ends with those calls for the sender to run
    #: (:meth:`PlatformAdapter.client_tool_calls`).
    client_tools: tuple[dict[str, Any], ...] = ()
    #: The sender's results for the calls the session's last reply ended with: the turn starts from them instead
    #: of a text (which may then be empty).
    tool_results: tuple[ToolResult, ...] = ()
    #: An OpenAI-compatible client's system message: its session's system prompt from this message's turn on,
    #: stored by that turn under the chat's lock (None: the session's prompt stays as it is).
    system_prompt: str | None = None
    #: The sender waits for the answer to this very message (an API request holds its HTTP answer open for it):
    #: its turn answers it alone, never taking in the messages behind it nor taken into an earlier one's.
    awaits_own_reply: bool = False
    #: The platform says the chat is a direct conversation between the bot and the sender alone (a Discord DM):
    #: what the bot learns there is the sender's private memory (:mod:`gateway.memory.scopes`).
    direct: bool = False

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


class ReceivingTurn(Protocol):
    """Whether this process may receive now, where one process of the cluster at a time may (one Telegram
    token's getUpdates). The gateway keeps it (a lease in Redis); an adapter only waits on it."""

    async def wait_held(self) -> None:
        """Return once this process may receive."""
        ...

    async def wait_lost(self) -> None:
        """Return once it may not (any longer)."""
        ...


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
    async def send(self, chat_id: str, text: str, *, reply_to: str | None = None) -> None:
        """Deliver ``text`` completely (split as the platform requires), retrying as it asks."""

    async def send_file(self, chat_id: str, file: OutgoingFile, *, reply_to: str | None = None) -> None:
        """Deliver ``file`` as the platform shows one (a photo, a document, an attachment), retrying as it asks;
        a platform that cannot send files sends the line that names it."""
        await self.send(chat_id, file.caption, reply_to=reply_to)

    async def ask_approval(self, chat_id: str, prompt: ApprovalPrompt, *, reply_to: str | None = None) -> str | None:
        """Ask ``prompt`` in the chat, with a yes and a no button where the platform has them (a press comes back
        through the intake as :func:`approval_command`'s text); the id of the message asked in, when it can
        be edited once answered. Without buttons, the question names the commands that answer it."""
        await self.send(chat_id, prompt.text, reply_to=reply_to)
        return None

    async def settle_approval(self, chat_id: str, message_id: str | None, prompt: ApprovalPrompt, outcome: str) -> None:
        """Show what became of the question (``outcome``: "approved by Ann", "no answer …"): the question
        edited where it can be, else one line."""
        await self.send(chat_id, f"{prompt.question}\n→ {outcome}")

    async def client_tool_calls(
        self, chat_id: str, calls: Sequence[Mapping[str, Any]], *, reply_to: str | None = None
    ) -> None:
        """The reply to ``reply_to`` ends with these calls of the sender's own tools (OpenAI ``tool_calls``: id,
        type, function name and JSON arguments), which the sender runs and answers in its next message's
        ``tool_results``. Told before the reply's text is delivered (that text may be empty), so an adapter that
        answers an API request can end that answer with them. Only messages that brought ``client_tools``
        get such a reply; other platforms never hear of it."""

    async def client_request_refused(
        self, chat_id: str, param: str, reason: str, *, reply_to: str | None = None
    ) -> None:
        """The message ``reply_to`` brought client tools or tool results that cannot be taken (``param``: ``tools``
        or ``tool_call_id``; ``reason`` in plain words) and nothing of it was stored; told before the reply that
        says so, so an adapter answering an API request can answer 400 instead."""

    async def turn_refused(self, chat_id: str, refusal: TurnRefusal, *, reply_to: str | None = None) -> None:
        """The message ``reply_to`` is kept but not answered now, for ``refusal``'s reason; told before the notice
        that says so in words (which every platform is sent as usual), so an adapter answering an API request can
        answer with the status the kind stands for instead."""

    def reply_surface(
        self, chat_id: str, gate: SendGate, *, reply_to: str | None = None, journal: Journal | None = None
    ) -> Surface | None:
        """Where a reply to ``chat_id`` (answering update ``reply_to``) is shown and delivered, paced by ``gate``
        and recorded in ``journal``; None where replies are sent whole by :meth:`send`."""
        return None

    async def typing(self, chat_id: str) -> None:
        """Show that a reply is being prepared; platforms without an indicator do nothing."""

    async def fetch(self, item: MediaItem, limit: int) -> bytes:
        """The bytes of ``item``, at most ``limit`` of them: refused before downloading when the platform
        reported more, and cut off with :class:`MediaTooLarge` when more arrive. Raises
        :class:`MediaError` with a sentence a person can be shown."""
        raise MediaError(f"the {self.platform} platform cannot fetch media ({item.name or item.kind})")

    async def verify(self) -> None:
        """Check the platform takes our credentials (Telegram's getMe, Discord's login) before the gateway
        opens, raising an error that says what to fix; platforms with nothing to check return at once."""

    async def failed(self) -> Exception:
        """Wait until the adapter stops receiving on its own (a second poller on one token, a revoked
        token) and return why; platforms that cannot stop that way wait for ever."""
        await asyncio.Event().wait()
        raise AssertionError("unreachable")
