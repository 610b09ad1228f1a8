"""The responses an API key's clients asked to keep (``store``: true), for ``GET /v1/responses/{id}`` and for
continuing a conversation by ``previous_response_id``.

Each is one string key under the API key's hash tag (the same Redis Cluster slot as the key's session index,
:mod:`gateway.store.api_sessions`), so no other key ever reads it::

    {prefix}:api:{<key name>}:response:<response id>    JSON, expires RESPONSE_TTL_SECONDS after it was stored

Besides the answer as the client got it, a record says where its turn left the session: the API session it was
answered in, the store session that held the session's conversation then, and the last message id given there
(message ids only grow along a conversation, rotations included). That is what tells a request naming it
whether the session is still where this response left it (it continues the session) or has gone on since (it
forks a new session from the messages up to that id). A record is a few hundred bytes plus the answer's text.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from agent import json_codec
from gateway.store.channel import RedisChannel
from gateway.store.keys import check_key_part, text_of

#: How long a stored response stays retrievable and continuable (OpenAI keeps them 30 days too).
RESPONSE_TTL_SECONDS = 30 * 86_400


@dataclass(frozen=True)
class StoredResponse:
    """One kept response and the point of its session it stands for."""

    response_id: str
    #: The API session (``api:<key name>/<session id>``) the response was answered in.
    session_id: str
    #: The store session holding that session's conversation when the response was answered.
    store_session: str
    #: The last message id given in that conversation once the response's turn was stored.
    position: int
    #: The session's system prompt after the turn (None: the bot's own), carried into a fork.
    prompt: str | None
    #: The ``response`` object as the client got it.
    body: dict[str, Any]


class ApiResponses:
    """The kept responses of every API key of one bot's store."""

    def __init__(self, channel: RedisChannel, prefix: str = "fg", *, ttl_seconds: int = RESPONSE_TTL_SECONDS) -> None:
        self.channel = channel
        self.prefix = check_key_part("prefix", prefix)
        self.ttl_seconds = int(ttl_seconds)

    def key(self, key_name: str, response_id: str) -> str:
        name = check_key_part("API key name", key_name)
        return f"{self.prefix}:api:{{{name}}}:response:{check_key_part('response id', response_id)}"

    async def put(self, key_name: str, stored: StoredResponse) -> None:
        """Keep ``stored`` for key ``key_name`` (replacing a record of the same id)."""
        value = json_codec.dumps_text(asdict(stored))
        await self.channel.call("SET", self.key(key_name, stored.response_id), value, "EX", self.ttl_seconds)

    async def get(self, key_name: str, response_id: str) -> StoredResponse | None:
        """The response ``response_id`` of key ``key_name``; None when it was never kept, has expired, or its
        record cannot be read (a client asking for it is told it is not found either way)."""
        raw = await self.channel.call("GET", self.key(key_name, response_id))
        if raw is None:
            return None
        try:
            fields = json_codec.loads(text_of(raw))
            return StoredResponse(**fields)
        except (ValueError, TypeError):
            return None
