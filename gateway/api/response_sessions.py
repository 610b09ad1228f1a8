"""Which session a ``POST /v1/responses`` request goes to.

- ``previous_response_id``: the kept response names its session and where its turn left it (the last message id
  of the session's conversation then). When the session is still there, nothing said since, the request continues
  it. When it has gone on (a later response, a chat request, a ``/new``), the request forks: a new session seeded
  with the old conversation's messages up to that point, its archive included (what compactions folded away is
  there whole, their summaries and shortened copies are not), and the old session's prompt. The old session is
  only read.
- ``conversation``: the session it names, as the ``X-Foldgate-Session`` header does (which also works here).
- Neither: a new session, seeded with the input's history when it brings some.

A response the client did not keep (``store`` false), or one of another key, is not found (404). How a request
that continues a session records where its own turn left it is :func:`recorded`'s part.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from redis.exceptions import RedisError

from agent.messages import InvalidMessage, Message, is_summary
from gateway.api.adapter import chat_key
from gateway.api.errors import ApiError, invalid, not_stored
from gateway.api.matching import seed_messages
from gateway.api.requests import ChatMessage
from gateway.api.response_requests import ResponseRequest
from gateway.api.sessions import SYSTEM_ROLES, chat_id, checked_header, new_session_id
from gateway.api.turns import STORE_RETRY_SECONDS
from gateway.platforms.base import UNSTORABLE
from gateway.session_source import conversation_messages
from gateway.store.api_responses import ApiResponses, StoredResponse
from gateway.store.api_sessions import seed_session
from gateway.store.errors import StoreError
from gateway.store.session_store import SessionStore

_RESPONSE_ID = re.compile(r"resp_[0-9a-f]{32}")
#: foldgate's marks on a message read back from a store (an id, its size, an archive's flags): a seeded copy is
#: a new message of the new session and gets its own.
_STORE_MARKS = ("_id", "_tok", "_orig_id", "_session", "active", "compacted")


@dataclass(frozen=True)
class ResponseSession:
    """The session a request goes to, and the prompt a fork carries over from the session it came from."""

    session_id: str
    carried_prompt: str | None = None


def response_not_found(response_id: str, param: str | None = None) -> ApiError:
    return ApiError(
        404, f"Response with id {response_id!r} not found.", type="invalid_request_error", code=None, param=param
    )


async def find_response(responses: ApiResponses, key_name: str, response_id: str, param: str | None) -> StoredResponse:
    """The kept response ``response_id`` of the key; 404 (naming ``param``) for one never kept or not this key's."""
    if not _RESPONSE_ID.fullmatch(response_id):
        raise response_not_found(response_id, param)
    try:
        found = await responses.get(key_name, response_id)
    except (RedisError, OSError) as error:
        raise not_stored(STORE_RETRY_SECONDS) from error
    if found is None:
        raise response_not_found(response_id, param)
    return found


async def choose_session(
    store: SessionStore, responses: ApiResponses, key_name: str, header: str | None, asked: ResponseRequest
) -> ResponseSession:
    """The session the request of key ``key_name`` goes to (see the module docstring); a new session with a
    history is seeded before this returns, so before the request's message is handed in."""
    if asked.previous_response_id is not None:
        previous = await find_response(responses, key_name, asked.previous_response_id, "previous_response_id")
        return await _after(store, key_name, previous)
    named = asked.conversation_id or (checked_header(header) if header is not None else None)
    history = [message for message in asked.messages() if message.role not in SYSTEM_ROLES][:-1]
    if named is not None:
        if history:
            raise invalid("input", "The session holds the history: send only the new message.")
        return ResponseSession(named)
    session = new_session_id()
    if history:
        await _seed(store, key_name, session, _history(history))
    return ResponseSession(session)


async def _after(store: SessionStore, key_name: str, previous: StoredResponse) -> ResponseSession:
    """The session that goes on from ``previous``: its own while nothing followed it, else a fork."""
    chat = chat_key(chat_id(key_name, previous.session_id))
    try:
        current = await store.stored_session(chat)
        head = (await store.meta(chat, current)).next_id if current == previous.store_session else None
    except (RedisError, OSError, StoreError) as error:
        raise not_stored(STORE_RETRY_SECONDS) from error
    if head == previous.position:
        return ResponseSession(previous.session_id)
    try:
        said = await conversation_messages(store, chat, previous.store_session)
    except (RedisError, OSError, StoreError) as error:
        raise not_stored(STORE_RETRY_SECONDS) from error
    session = new_session_id()
    await _seed(store, key_name, session, up_to(said, previous.position))
    return ResponseSession(session, previous.prompt)


def up_to(messages: Sequence[Message], position: int) -> list[Message]:
    """The conversation's messages as they were said, up to message id ``position``: the originals (a copy
    standing in for one, and a compaction's summary, are not what was said), as new messages."""
    kept = [
        message
        for message in messages
        if _number(message) <= position and not is_summary(message) and "_orig_id" not in message
    ]
    kept.sort(key=_number)
    return [_unmarked(message) for message in kept]


def _number(message: Mapping[str, Any]) -> int:
    found = str(message.get("_id") or "")
    return int(found) if found.isdigit() else 1 << 62


def _unmarked(message: Message) -> Message:
    return cast(Message, {key: value for key, value in message.items() if key not in _STORE_MARKS})


def _history(messages: Sequence[ChatMessage]) -> list[Message]:
    try:
        return seed_messages(messages, len(messages))
    except InvalidMessage as error:
        raise invalid("input", f"The history cannot be stored: {error}") from None


async def _seed(store: SessionStore, key_name: str, session_id: str, history: list[Message]) -> None:
    """Give the new session its history: 400 for a message that cannot be stored, 503 when the store does not
    answer (a new session's chat is locked by nobody else)."""
    if not history:
        return
    try:
        await seed_session(store, chat_key(chat_id(key_name, session_id)), history)
    except UNSTORABLE:
        raise invalid("input", "The history cannot be stored.") from None
    except (RedisError, OSError, StoreError) as error:
        raise not_stored(STORE_RETRY_SECONDS) from error
