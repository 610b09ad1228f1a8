"""What a message's items became when a turn took them in, kept for the turn's retries.

Taking an item in costs a download, and a voice message a paid transcription. A turn that fails
after that (the provider away for a quarter of an hour, retried with backoff; a crash) is run
again from its inbox entry, so the result is kept under the entry's id until the retries are
over, and the next attempt reads it instead of fetching and transcribing again::

    {prefix}:{<chat>}:taken:<entry id>    string: the taken-in message as JSON (EX: the retry bound + 1 h)
"""

from __future__ import annotations

from typing import Any

from agent import json_codec
from gateway.store.channel import RedisChannel
from gateway.store.keys import ChatKeys, check_key_part


class TakenRecords:
    """Per inbox entry, the taken-in form of its items, for as long as the entry may be retried."""

    def __init__(self, channel: RedisChannel, prefix: str, *, ttl_seconds: int) -> None:
        self.channel = channel
        self.prefix = check_key_part("prefix", prefix)
        self.ttl_seconds = ttl_seconds

    def key(self, chat: str, entry_id: str) -> str:
        return ChatKeys(self.prefix, check_key_part("chat", chat)).taken(entry_id)

    async def get(self, chat: str, entry_id: str) -> dict[str, Any] | None:
        found = await self.channel.call("GET", self.key(chat, entry_id))
        return json_codec.loads(found) if found else None

    async def keep(self, chat: str, entry_id: str, taken: dict[str, Any]) -> None:
        await self.channel.call("SET", self.key(chat, entry_id), json_codec.dumps_text(taken), "EX", self.ttl_seconds)
