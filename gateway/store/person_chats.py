"""The chats a person took part in, one bot's: where ``session_search`` with scope ``my chats`` looks.

A person (``<platform>:<user id>``, e.g. ``tg:42``) writes in their private chat with the bot and in groups;
what they said in one should be within their reach in the others. The turn notes each chat a person writes in
(:meth:`PersonChats.note`), with whether it is private, and the search reads the list back
(:meth:`PersonChats.chats`). Under the person's own hash tag, beside their memory entries
(:mod:`gateway.store.memory`), so a note is one script on one Redis Cluster slot::

    {prefix}:{mem:<person>}:chats        sorted set  chat key -> when the person last wrote there
    {prefix}:{mem:<person>}:chat_kinds   hash        chat key -> "private" | "group", as first noted

A chat keeps the kind it was first noted with: a group never becomes private because a later note said so,
and a private chat never turns into a group. The list holds chat keys and times only, never a word said.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from gateway.store.channel import RedisChannel, Script
from gateway.store.keys import check_key_part, text_of
from gateway.store.routes import run

PRIVATE_KIND = "private"
GROUP_KIND = "group"

# KEYS: chats, kinds. ARGV: when, chat, kind. The chat's time moves forward only; its kind is set once.
_NOTE = Script.of(
    """
local known = redis.call('ZSCORE', KEYS[1], ARGV[2])
if not known or tonumber(known) < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
end
redis.call('HSETNX', KEYS[2], ARGV[2], ARGV[3])
return 1
"""
)

# KEYS: chats, kinds. Every chat with its time (newest first) and its kind, in one reply.
_READ = Script.of(
    """
local chats = redis.call('ZREVRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local out = {}
for i = 1, #chats, 2 do
  out[#out + 1] = chats[i]
  out[#out + 1] = chats[i + 1]
  out[#out + 1] = redis.call('HGET', KEYS[2], chats[i]) or ''
end
return out
"""
)


@dataclass(frozen=True)
class PersonChat:
    """One chat a person wrote in: its key, whether it was noted as private, and when they last wrote there."""

    chat: str
    private: bool
    last: float


#: How long after noting a person's chat this process does not note it again (their list's order is to a minute).
NOTED_SECONDS = 60.0
#: (person, chat) pairs a process remembers having noted, the least recent dropped.
NOTED_KEYS = 65_536


class PersonChats:
    """Each person's chats, for the bot whose key prefix this is."""

    def __init__(self, channel: RedisChannel, prefix: str) -> None:
        self.channel = channel
        self.prefix = check_key_part("prefix", prefix)
        #: What this process noted last, by (person, chat): the time then, so a person's every message in the same
        #: chat does not cost a round trip (the list orders chats by when they were last written in, to a minute).
        self._noted: OrderedDict[tuple[str, str], float] = OrderedDict()

    def keys(self, person: str) -> tuple[str, str]:
        """The sorted set of ``person``'s chats and the hash of their kinds (the person's own hash tag)."""
        base = f"{self.prefix}:{{mem:{check_key_part('person', person)}}}"
        return f"{base}:chats", f"{base}:chat_kinds"

    async def note(self, person: str, chat: str, *, private: bool, when: float) -> None:
        """Record that ``person`` wrote in ``chat`` at ``when`` (one round trip, made on every turn of theirs); a
        chat keeps the kind it was first noted with, and its time only moves forward."""
        kind = PRIVATE_KIND if private else GROUP_KIND
        held = self._noted.get((person, chat))
        if held is not None and held <= when < held + NOTED_SECONDS:
            return
        await run(_NOTE, self.channel, self.keys(person), [repr(float(when)), check_key_part("chat", chat), kind])
        self._noted[(person, chat)] = when
        self._noted.move_to_end((person, chat))
        while len(self._noted) > NOTED_KEYS:
            self._noted.popitem(last=False)

    async def chats(self, person: str) -> list[PersonChat]:
        """``person``'s chats, the one they wrote in last first."""
        reply = await run(_READ, self.channel, self.keys(person), [])
        found = []
        for index in range(0, len(reply or ()), 3):
            chat, when, kind = (text_of(part) for part in reply[index : index + 3])
            found.append(PersonChat(chat, kind == PRIVATE_KIND, float(when)))
        return found

    async def forget(self, person: str) -> None:
        """Drop ``person``'s list of chats (the chats themselves stay as they are)."""
        await self.channel.call("DEL", *self.keys(person))
        for noted in [key for key in self._noted if key[0] == person]:
            del self._noted[noted]
