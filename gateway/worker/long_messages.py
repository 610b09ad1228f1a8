"""One message's size bound: a message too long for the model reaches it as an excerpt, never whole.

Unbounded, one pasted megabyte goes to the provider at hundreds of thousands of tokens: the
request is refused, hygiene cannot shrink a session whose newest message alone is over the
window, and every later turn of the chat fails the same way. So a message over the bound is
stored whole in the session's archive and the model gets its beginning and its end
(:mod:`agent.excerpts`). The person is told too, in the reply, what the bot saw.

A chat whose model cannot see images (:func:`agent.models.vision_for`) is told so once — the first
time it sends an image the turn answers — above the reply: the images are kept, and a model that
can see them can be asked about them later. "Told" is remembered per chat in the store
(:class:`gateway.store.told.ToldOnce`, notice ``no_vision``), so it outlives session rotations.
"""

from __future__ import annotations

import logging

from agent.excerpts import FRAMING_TOKENS, excerpt, tokens_over
from agent.messages import Message
from agent.models import vision_for
from agent.tokens import ITEMS_KEY, MESSAGE_OVERHEAD, count_message, image_tokens
from gateway.media.message import ItemIntake
from gateway.media.transcribe import Transcribes
from gateway.platforms.base import IncomingMessage, MediaItem
from gateway.store import SessionStore
from gateway.store.told import ToldOnce
from gateway.worker.chat_turn import AgentFactory, ChatTurn

log = logging.getLogger(__name__)

#: At most this share of the model's window goes to one message, whatever is configured.
WINDOW_SHARE = 4


def token_limit(configured: int, context_length: int) -> int:
    """The longest message, in tokens, the model gets whole: the configured bound, capped by the window."""
    return max(FRAMING_TOKENS * 2, min(configured, context_length // WINDOW_SHARE))


def notice(tokens: int, limit: int) -> str:
    """What the person is told above the reply to a message that reached the model as an excerpt."""
    return (
        f"ℹ️ Your message was very long (about {tokens:,} tokens; I read at most {limit:,} at once), so I saw "
        "only its beginning and its end. It is saved in full, and I can look up any part of it if you ask."
    )


#: The chat's notice (:class:`ToldOnce`) that its model cannot see images.
NO_VISION = "no_vision"


def no_vision_notice(model: str) -> str:
    """What a chat whose model cannot see images is told, once, above the reply to its first image."""
    return (
        f"ℹ️ I keep the images you send, but this chat's model ({model}) cannot see them, so I answer from "
        "your words alone. Switch to a model that can see images (/model) and ask me about them again."
    )


def shows_an_image(message: Message) -> bool:
    """Whether a stored message carries an image that was taken in (one that failed is only a line of text)."""
    return any(
        ref.get("kind") == "image" and ref.get("sha") and not ref.get("error") for ref in message.get(ITEMS_KEY) or ()
    )


def user_message(message: IncomingMessage) -> Message:
    """The person's message as a session message, whole, with who sent it (in a group, notes and search say who
    said what)."""
    stored: Message = {"role": "user", "content": message.text, "_ts": message.ts}
    if message.user_name:
        stored["_from"] = message.user_name
    if message.user_id:
        stored["_user"] = f"{message.platform}:{message.user_id}"
    return stored


def _item_tokens(item: MediaItem, limit: int) -> int:
    """What an item will cost in the request, before it is read: an image by the providers' rule; a document
    or audio at most the message's bound (its text is excerpted past it), audio by speech's pace (~3 tokens/s)."""
    if item.kind == "image":
        return image_tokens(item.width, item.height)
    if item.kind in ("voice", "audio"):
        return min(limit, int(item.duration * 3) + 20) if item.duration else limit
    return min(limit, item.size // 4) if item.size else limit


class MessageBound:
    """Applies the bound to the messages a turn stores (``gateway.max_message_tokens``, capped by the window),
    once their items are taken in (a document's text is bounded like the person's own)."""

    def __init__(
        self,
        store: SessionStore,
        configured: int,
        agents: AgentFactory,
        items: ItemIntake,
        told: ToldOnce,
    ) -> None:
        """``agents`` says each model's window (the bound is capped by it) and the chats' default model."""
        self.store = store
        self.configured = configured
        self.agents = agents
        self.items = items
        #: What each chat was told once (that its model cannot see images).
        self.told = told

    def limit(self, model: str) -> int:
        """The longest message, in tokens, ``model`` gets whole in this gateway."""
        return token_limit(self.configured, self.agents.context_length(model))

    @staticmethod
    def size(message: IncomingMessage, limit: int) -> int:
        """Tokens ``message`` costs in a request once bounded to ``limit`` (nothing is stored to know it)."""
        text = (
            limit + MESSAGE_OVERHEAD
            if tokens_over(message.text, limit) is not None
            else count_message(user_message(message))
        )
        return text + sum(_item_tokens(item, limit) for item in message.items)

    async def whole(
        self, message: IncomingMessage, notes: list[str], transcriber: Transcribes | None = None
    ) -> Message:
        """The person's message with its items taken in (what could not be goes to ``notes``; voice heard by
        ``transcriber`` when given, one that meters the turn's budgets), unbounded."""
        if not message.items:
            return user_message(message)
        taken = await self.items.take(message, transcriber)
        notes.extend(f"⚠️ I could not take in {problem}" for problem in taken.problems)
        return {**user_message(message), "content": taken.content, ITEMS_KEY: taken.refs}

    async def bounded(
        self,
        turn: ChatTurn,
        message: IncomingMessage,
        limit: int,
        notes: list[str],
        *,
        tell_once: bool = True,
        transcriber: Transcribes | None = None,
    ) -> Message:
        """The person's message as the session keeps it: whole, or when over ``limit`` tokens an excerpt
        naming the original, which is stored whole in the archive first (nothing is lost, and a message
        over the window never reaches the provider). What the person is told goes to ``notes``;
        ``tell_once`` False where ``notes`` reach nobody, so a once-per-chat notice is not spent there."""
        whole = await self.whole(message, notes, transcriber)
        if tell_once and message.respond and shows_an_image(whole):
            await self._tell_if_blind(turn, notes)
        content = whole.get("content")
        if not isinstance(content, str):  # never so: a person's message is one text, its items' words joined in
            return whole
        tokens = tokens_over(content, limit)
        if tokens is None:
            return whole
        original_id = await self.store.archive_original(
            turn.chat, turn.session_id, whole, lock=turn.lock, entry_id=message.entry_id
        )
        log.info(
            "%s: update %s is %d tokens, over the bound of %d: archived whole as message %s; the model gets "
            "its head and tail",
            turn.chat,
            message.update_id,
            tokens,
            limit,
            original_id,
        )
        notes.append(notice(tokens, limit))
        return {**whole, "content": excerpt(content, tokens, limit, original_id), "_orig_id": original_id}

    async def _tell_if_blind(self, turn: ChatTurn, notes: list[str]) -> None:
        """Tell the chat, once, that its model cannot see the images it sends (see the module)."""
        model = turn.meta.model or self.agents.default_model
        if not vision_for(model) and await self.told.first(turn.chat, NO_VISION):
            log.info("%s: its model %s cannot see images; told once", turn.chat, model)
            notes.append(no_vision_notice(model))

    async def stored_form(self, turn: ChatTurn, model: str, messages: list[IncomingMessage]) -> list[Message]:
        """The messages as a turn that stores them unanswered keeps them: bounded like any turn's."""
        limit = self.limit(model)
        return [await self.bounded(turn, message, limit, [], tell_once=False) for message in messages]
