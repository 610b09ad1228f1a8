"""Which session a request continues: the one its ``X-Foldgate-Session`` header names, or a new one.

A session is a chat of its own (platform ``api``, chat id ``<key name>/<session id>``), so two keys that send
the same header value still talk in two sessions. :func:`choose_session` is the one place that decides; a
request without the header starts a new session for now (finding the stored session a stateless client's
resent history belongs to is to come here).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence

from gateway.api.errors import invalid
from gateway.api.requests import ChatMessage

#: The request and response header naming the session.
SESSION_HEADER = "X-Foldgate-Session"
_SESSION_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


def new_session_id() -> str:
    return f"s_{uuid.uuid4().hex}"


async def choose_session(key_name: str, header: str | None, messages: Sequence[ChatMessage]) -> str:
    """The session id the request of key ``key_name`` continues: the header's (400 naming the header when it
    is not one), else a new one. ``messages`` is what the client sent, for finding a session by its history
    (a look-up in the store, hence a coroutine)."""
    if header is None:
        return new_session_id()
    if not _SESSION_ID.fullmatch(header):
        raise invalid(SESSION_HEADER, f"{SESSION_HEADER} must be 1-128 characters of A-Z, a-z, 0-9, _ . : and -.")
    return header


def chat_id(key_name: str, session_id: str) -> str:
    """The chat id of a key's session: the key's name first, so no other key reaches it."""
    return f"{key_name}/{session_id}"
