"""What a chat has been told once, so it is not told again: one small hash per chat.

Some things a person needs to hear once, not with every message — that the chat's model cannot
see the images they send, for one. The hash sits beside the chat's other keys (its hash tag), outlives
the chat's sessions (a compaction that rotates the session does not make the notice new again), and
holds one field per notice, its value the unix time it was first given::

    {prefix}:{<chat>}:told    hash  notice -> when it was given (seconds)

Claiming a notice is one HSETNX, so of two processes racing on the same chat only one tells. A notice that
is given again after a while (once a minute, once a budget period) is a key of its own that expires::

    {prefix}:{<chat>}:told:<notice>   string  set with NX, for as long as the notice holds
"""

from __future__ import annotations

import time

from gateway.store.channel import RedisChannel
from gateway.store.keys import ChatKeys, check_key_part


class ToldOnce:
    """Per chat, the notices already given."""

    def __init__(self, channel: RedisChannel, prefix: str) -> None:
        self.channel = channel
        self.prefix = check_key_part("prefix", prefix)

    def key(self, chat: str) -> str:
        return ChatKeys(self.prefix, check_key_part("chat", chat)).told

    async def first(self, chat: str, notice: str) -> bool:
        """Whether this is the first time ``chat`` is given ``notice`` (and, if so, record that it now is)."""
        return bool(await self.channel.call("HSETNX", self.key(chat), notice, int(time.time())))

    async def first_for(self, chat: str, notice: str, seconds: float) -> bool:
        """Whether ``chat`` is given ``notice`` for the first time in the next ``seconds`` (if so, it now is)."""
        key = f"{self.key(chat)}:{check_key_part('notice', notice)}"
        return bool(await self.channel.call("SET", key, int(time.time()), "NX", "EX", max(1, int(seconds))))
