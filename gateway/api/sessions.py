"""Which session a request continues, and what the request brings to it besides its new turn.

A session is a chat of its own (platform ``api``, chat id ``<key name>/<session id>``), so two keys that send
the same header value, or the same history, still talk in two sessions. :meth:`ApiSessions.choose` is the one
place that decides:

- With the ``X-Foldgate-Session`` header, the session it names; nothing is matched.
- Without it, the request's history is looked up among the key's recorded conversations
  (:class:`gateway.store.api_sessions.ApiSessionIndex`). A request that ``continues`` a session brings only
  what follows its last assistant message; its resent history is not read, the session's own (compacted)
  transcript is what the provider gets. A request that ``forks`` (a regenerated or edited turn) or that no
  session knows starts a new session, seeded with the client's own history before its new turn; the session
  it forked from is never touched.

Once the turn is answered the conversation is recorded as the client will resend it (the request and the
reply), for header sessions too, so a client may drop the header and still be found.

A request's system (and developer) messages are the session's system prompt, sent first in every request of
the session instead of the bot's own; the message carries it to the turn, which stores it with the session
under the chat's lock. They are therefore never part of a seeded history.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from agent.messages import InvalidMessage
from gateway.api.adapter import chat_key
from gateway.api.errors import invalid, not_stored
from gateway.api.matching import Conversation, conversation, seed_messages
from gateway.api.turns import STORE_RETRY_SECONDS
from gateway.platforms.base import UNSTORABLE, valid_text
from gateway.store.api_sessions import NO_MATCH, ApiSessionIndex, Match, seed_session
from gateway.store.errors import StoreError
from gateway.store.session_store import SessionStore

log = logging.getLogger(__name__)

#: The request and response header naming the session.
SESSION_HEADER = "X-Foldgate-Session"
_SESSION_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
#: The roles whose messages are instructions to the model: the session's prompt, not its transcript.
SYSTEM_ROLES = ("system", "developer")


def new_session_id() -> str:
    return f"s_{uuid.uuid4().hex}"


def checked_header(header: str) -> str:
    """The header's session id; 400 naming the header when it is not one."""
    if not _SESSION_ID.fullmatch(header):
        raise invalid(SESSION_HEADER, f"{SESSION_HEADER} must be 1-128 characters of A-Z, a-z, 0-9, _ . : and -.")
    return header


def chat_id(key_name: str, session_id: str) -> str:
    """The chat id of a key's session: the key's name first, so no other key reaches it."""
    return f"{key_name}/{session_id}"


def _fields(message: Any) -> Mapping[str, Any]:
    if isinstance(message, Mapping):
        return message
    return dict(message.model_dump(exclude_none=True))


def _text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else ()
    return "\n".join(str(part.get("text", "")) for part in parts if isinstance(part, Mapping))


def system_prompt_of(messages: Sequence[Any]) -> str | None:
    """The request's system and developer messages as one prompt (None when it has none): the session's prompt
    from this request's turn on. Several are kept all, in order, a blank line apart."""
    texts = [_text(fields) for fields in map(_fields, messages) if fields.get("role") in SYSTEM_ROLES]
    prompt = "\n\n".join(text.strip() for text in texts if text.strip())
    return valid_text(prompt) if prompt else None


@dataclass(frozen=True)
class ChosenSession:
    """The session a request goes to, and how its answer is recorded."""

    session_id: str
    #: How the request stands to the key's sessions (``continues`` for a request that sent the header).
    match: Match
    key_name: str
    request: Conversation
    index: ApiSessionIndex

    async def record(self, reply: Mapping[str, Any]) -> None:
        """Record the conversation as the client will resend it, now that ``reply`` (the assistant message the
        client got) answers it. A store that does not answer costs only the match of the client's next request
        (it then starts a new session)."""
        point = self.request.after_reply(reply)
        try:
            await self.index.record(self.key_name, self.session_id, point)
        except (RedisError, OSError) as error:
            log.warning("api: the answered turn of a session could not be recorded for matching (%s)", error)


class ApiSessions:
    """The API sessions of one bot: its store (where a new session is seeded) and the index of the
    conversations its clients will resend."""

    def __init__(self, store: SessionStore, *, lock_ttl_seconds: float = 30.0) -> None:
        self.store = store
        self.index = ApiSessionIndex(store.channel, store.prefix)
        self.lock_ttl_seconds = lock_ttl_seconds

    async def choose(self, key_name: str, header: str | None, messages: Sequence[Any]) -> ChosenSession:
        """The session the request of key ``key_name`` goes to (see the module docstring); a new session with a
        history is seeded with it before this returns, so before the request's message is handed in."""
        request = conversation(messages)
        if header is not None:
            return ChosenSession(checked_header(header), NO_MATCH, key_name, request, self.index)
        match = await self._lookup(key_name, request)
        if match.kind == "continues" and match.session_id is not None:
            return ChosenSession(match.session_id, match, key_name, request, self.index)
        session_id = new_session_id()
        if request.end:
            await self._seed(key_name, session_id, messages, request.end)
        return ChosenSession(session_id, match, key_name, request, self.index)

    async def _lookup(self, key_name: str, request: Conversation) -> Match:
        try:
            return await self.index.lookup(key_name, request)
        except (RedisError, OSError) as error:
            raise not_stored(STORE_RETRY_SECONDS) from error

    async def _seed(self, key_name: str, session_id: str, messages: Sequence[Any], end: int) -> None:
        """Give the new session the client's history before its new turn (its system messages are the prompt,
        which the turn stores). 400 for a message that cannot be stored, 503 when the store does not answer."""
        try:
            history = [message for message in seed_messages(messages, end) if message["role"] != "system"]
        except InvalidMessage as error:
            raise invalid("messages", f"The history cannot be stored: {error}") from None
        chat = chat_key(chat_id(key_name, session_id))
        try:
            await seed_session(self.store, chat, history, lock_ttl_seconds=self.lock_ttl_seconds)
        except UNSTORABLE:
            raise invalid("messages", "The history cannot be stored.") from None
        except (RedisError, OSError, StoreError) as error:  # a new session's chat is locked by nobody else
            raise not_stored(STORE_RETRY_SECONDS) from error
