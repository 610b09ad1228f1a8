"""What the bot keeps about a person: short entries, one bot's and one person's, each for where it applies.

A person tells the bot their name, a preference, a standing instruction; the bot keeps it as an entry that
outlives the session (``/new``, compactions) and the process. Entries are scoped twice over:

- to the bot, by the store's key prefix: each bot of a deployment has its own, so no bot reads another's;
- to where they apply: ``private`` (the person's private chats) or ``group:<chat key>`` (learned in that
  group, used only there). A group also has memory of its own (its rules, its decisions): person ``""``.

One person's entries, every scope of them, sit under one hash tag, so each operation on them is one Lua script
on one Redis Cluster slot; a group's own entries sit under the group chat's tag, beside its other keys::

    {prefix}:{mem:<person>}:entries    hash  number -> JSON entry (scope, text, source, chat, message id,
                                             created, last used, uses)
    {prefix}:{mem:<person>}:texts      hash  "<scope>\\n<text>" -> number: the same text is kept once a scope
    {prefix}:{mem:<person>}:seq        the last number given (a number is never given twice while any entry
                                       is kept, so ``/forget 3`` never hits an entry added after the list)
    {prefix}:{mem:<person>}:ver        bumped by every change: a process keeps the entries it parsed and reads
                                       them again only when this moved (one small round trip a request)
    {prefix}:{<group chat>}:memory:entries | texts | seq | ver    the group's own memory, laid out the same

Entries are listed newest and most used first: by when each was last added or used, then by how often it was
used, then newest number first. Every change is one script, so two processes never see half of one.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from agent.tokens import count_text
from gateway.store.channel import RedisChannel, Script
from gateway.store.keys import check_key_part, text_of
from gateway.store.routes import run

#: How an entry was written: the person's ``/remember``, the model's ``memory`` tool, or a compaction.
Source = Literal["remember", "tool", "compaction"]
SOURCES: tuple[str, ...] = ("remember", "tool", "compaction")
#: The scope of entries learned in the person's private chats.
PRIVATE = "private"
#: People (and groups) whose parsed entries a process keeps between requests, the least recently read dropped.
READ_CACHE_KEYS = 4_096

# KEYS: entries, texts, seq, ver, forgot. ARGV: scope, text, body (JSON without the number), when it was said
# ('' for an entry written now). {1, n, body} when added, {0, n, body} when the scope keeps that text already,
# {-1} when it was said before the person forgot it (that text, that scope, or everything).
_ADD = Script.of(
    """
local index = ARGV[1] .. '\\n' .. ARGV[2]
if ARGV[4] ~= '' then
  for _, field in ipairs({'*', ARGV[1], index}) do
    local at = redis.call('HGET', KEYS[5], field)
    if at and tonumber(at) >= tonumber(ARGV[4]) then return {-1} end
  end
end
local known = redis.call('HGET', KEYS[2], index)
if known then return {0, known, redis.call('HGET', KEYS[1], known)} end
local n = redis.call('INCR', KEYS[3])
redis.call('HSET', KEYS[1], n, ARGV[3])
redis.call('HSET', KEYS[2], index, n)
redis.call('INCR', KEYS[4])
return {1, tostring(n), ARGV[3]}
"""
)

# KEYS: entries, texts, ver. ARGV: scope, old text, new text, the new text's tokens. {1, n, body} when replaced;
# {0, n, body} when the new text is kept already (nothing changes); {} when the old text is not kept.
_REPLACE = Script.of(
    """
local old = ARGV[1] .. '\\n' .. ARGV[2]
local new = ARGV[1] .. '\\n' .. ARGV[3]
local n = redis.call('HGET', KEYS[2], old)
if not n then return {} end
local taken = redis.call('HGET', KEYS[2], new)
if taken then return {0, taken, redis.call('HGET', KEYS[1], taken)} end
local entry = cjson.decode(redis.call('HGET', KEYS[1], n))
entry['text'] = ARGV[3]
entry['tok'] = tonumber(ARGV[4])
local body = cjson.encode(entry)
redis.call('HSET', KEYS[1], n, body)
redis.call('HDEL', KEYS[2], old)
redis.call('HSET', KEYS[2], new, n)
redis.call('INCR', KEYS[3])
return {1, n, body}
"""
)

# KEYS: entries, texts, ver, forgot. ARGV: "n" and a number, or "text", the text and its scope; then now. {n, body}
# of what was removed (and when, under its scope and text, so a fold of older messages does not bring it back);
# {} when nothing matched.
_REMOVE = Script.of(
    """
local n = ARGV[2]
if ARGV[1] == 'text' then
  n = redis.call('HGET', KEYS[2], ARGV[3] .. '\\n' .. ARGV[2])
  if not n then return {} end
end
local body = redis.call('HGET', KEYS[1], n)
if not body then return {} end
local entry = cjson.decode(body)
redis.call('HDEL', KEYS[2], entry['scope'] .. '\\n' .. entry['text'])
redis.call('HDEL', KEYS[1], n)
redis.call('INCR', KEYS[3])
redis.call('HSET', KEYS[4], entry['scope'] .. '\\n' .. entry['text'], ARGV[#ARGV])
return {n, body}
"""
)

# KEYS: entries, texts, seq, ver, forgot. ARGV: scope ("" for every one), now (remembered as when the person
# forgot, so a fold of what they said before does not bring it back). How many entries were removed.
_FORGET = Script.of(
    """
redis.call('INCR', KEYS[4])
redis.call('HSET', KEYS[5], ARGV[1] == '' and '*' or ARGV[1], ARGV[2])
if ARGV[1] == '' then
  local count = redis.call('HLEN', KEYS[1])
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
  return count
end
local count = 0
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local entry = cjson.decode(all[i + 1])
  if entry['scope'] == ARGV[1] then
    redis.call('HDEL', KEYS[2], entry['scope'] .. '\\n' .. entry['text'])
    redis.call('HDEL', KEYS[1], all[i])
    count = count + 1
  end
end
return count
"""
)

# KEYS: entries, ver. ARGV: when, then the numbers used. Each kept one is marked used once more, at ``when``.
_TOUCH = Script.of(
    """
for i = 2, #ARGV do
  local body = redis.call('HGET', KEYS[1], ARGV[i])
  if body then
    local entry = cjson.decode(body)
    entry['used'] = tonumber(ARGV[1])
    entry['uses'] = (entry['uses'] or 0) + 1
    redis.call('HSET', KEYS[1], ARGV[i], cjson.encode(entry))
  end
end
redis.call('INCR', KEYS[2])
return 1
"""
)

# KEYS: entries, ver. ARGV: the version the caller holds. {version} when it is the current one, else {version,
# field, value, ...}: the entries are read again only when something changed them.
_READ = Script.of(
    """
local version = redis.call('GET', KEYS[2]) or '0'
if version == ARGV[1] then return {version} end
local all = redis.call('HGETALL', KEYS[1])
table.insert(all, 1, version)
return all
"""
)


@dataclass(frozen=True)
class MemoryEntry:
    """One thing kept about a person (or a group), as they are shown it."""

    number: int
    scope: str
    text: str
    source: str
    #: Where it was learned: the chat's key and the message's id there.
    chat: str
    message_id: str
    created: float
    used: float
    uses: int
    #: Tokens of its text, counted once when it was written (0 for an entry written before they were).
    tokens: int = 0

    @classmethod
    def read(cls, number: object, body: object) -> MemoryEntry:
        data = json.loads(text_of(body))
        return cls(
            number=int(text_of(number)),
            scope=str(data["scope"]),
            text=str(data["text"]),
            source=str(data.get("source", "remember")),
            chat=str(data.get("chat", "")),
            message_id=str(data.get("message_id", "")),
            created=float(data.get("created", 0.0)),
            used=float(data.get("used", 0.0)),
            uses=int(data.get("uses", 0)),
            tokens=int(data.get("tok", 0)),
        )

    def order(self) -> tuple[float, int, int]:
        """Sorts newest and most used first."""
        return (-max(self.created, self.used), -self.uses, -self.number)


@dataclass(frozen=True)
class Added:
    """What :meth:`MemoryStore.add` and :meth:`MemoryStore.replace` did: ``changed`` False when the scope kept
    that text already (``entry`` is the one kept); ``entry`` None when a replaced text was not kept."""

    entry: MemoryEntry | None
    changed: bool


def group_scope(chat: str) -> str:
    """The scope of what is learned in group chat ``chat`` (its key, ``tg:-100…``)."""
    return f"group:{check_key_part('chat', chat)}"


def check_scope(scope: str) -> str:
    if scope != PRIVATE and not (scope.startswith("group:") and len(scope) > len("group:")):
        raise ValueError(f"a memory scope is {PRIVATE!r} or 'group:<chat key>', not {scope!r}")
    return check_key_part("scope", scope)


def _reply(value: object) -> tuple[str, str] | None:
    """A script's ``{flag, n, body}`` or ``{n, body}`` reply, its last two parts as text (None for ``{}``)."""
    if not value:
        return None
    parts = [text_of(part) for part in value]  # type: ignore[attr-defined]
    return parts[-2], parts[-1]


class MemoryStore:
    """People's entries (and groups' own), for the bot whose key prefix this is."""

    def __init__(
        self, channel: RedisChannel, prefix: str, *, max_entry_chars: int = 500, clock: Callable[[], float] = time.time
    ) -> None:
        self.channel = channel
        self.prefix = check_key_part("prefix", prefix)
        self.max_entry_chars = max_entry_chars
        self.clock = clock
        #: Entries read before, by entries key: the version they were read at, and the entries.
        self._read: OrderedDict[str, tuple[str, list[MemoryEntry]]] = OrderedDict()

    def keys(self, person: str, scope: str) -> tuple[str, str, str, str, str]:
        """The entries, texts, seq, version and forgotten keys holding ``person``'s entries; person ``""`` is the
        group's own memory, under the group chat's tag (``scope`` must then be a group)."""
        if person:
            base = f"{self.prefix}:{{mem:{check_key_part('person', person)}}}"
        else:
            if not check_scope(scope).startswith("group:"):
                raise ValueError("only a group has memory of its own (person ''): give its group scope")
            base = f"{self.prefix}:{{{scope.removeprefix('group:')}}}:memory"
        return f"{base}:entries", f"{base}:texts", f"{base}:seq", f"{base}:ver", f"{base}:forgot"

    def refusal(self, text: str) -> str | None:
        """Why ``text`` cannot be an entry (None: it can)."""
        if not text.strip():
            return "empty"
        if len(text.strip()) > self.max_entry_chars:
            return f"{len(text.strip())} characters, over the limit of {self.max_entry_chars} (memory.max_entry_chars)"
        return None

    def _checked(self, text: str) -> str:
        refused = self.refusal(text)
        if refused is not None:
            raise ValueError(f"a memory entry cannot be {refused}")
        return text.strip()

    async def add(
        self,
        person: str,
        scope: str,
        text: str,
        *,
        source: Source,
        chat: str,
        message_id: str,
        said_at: float | None = None,
    ) -> Added:
        """Keep ``text`` for ``person`` in ``scope``; the entry already kept when the scope has that text.
        An entry learned from a message said at ``said_at`` is not kept when the person forgot it (or everything)
        after that (``Added(None, False)``). An empty or over-long text raises :class:`ValueError`
        (:meth:`refusal` says why beforehand)."""
        text = self._checked(text)
        if source not in SOURCES:
            raise ValueError(f"unknown memory source {source!r}")
        now = self.clock()
        body: dict[str, object] = {"scope": check_scope(scope), "text": text, "source": source, "chat": chat}
        body |= {"message_id": message_id, "created": now, "used": now, "uses": 0, "tok": count_text(text)}
        said = "" if said_at is None else repr(float(said_at))
        reply = await run(_ADD, self.channel, self.keys(person, scope), [scope, text, json.dumps(body), said])
        if int(reply[0]) < 0:
            return Added(None, changed=False)
        number, stored = text_of(reply[1]), reply[2]
        return Added(MemoryEntry.read(number, stored), changed=bool(int(reply[0])))

    async def replace(self, person: str, scope: str, old_text: str, text: str) -> Added:
        """Rewrite the entry whose text is ``old_text`` in ``scope`` (its number, source and origin stay)."""
        text = self._checked(text)
        entries, texts, _seq, version, _forgot = self.keys(person, check_scope(scope))
        args: list[str | int] = [scope, old_text.strip(), text, count_text(text)]
        reply = await run(_REPLACE, self.channel, [entries, texts, version], args)
        if not reply:
            return Added(None, changed=False)
        return Added(MemoryEntry.read(reply[1], reply[2]), changed=bool(int(reply[0])))

    async def remove(self, person: str, which: int | str, scope: str = PRIVATE) -> MemoryEntry | None:
        """Remove ``person``'s entry number ``which`` (any scope), or the one whose text is ``which`` in
        ``scope``; what was removed, None when nothing matched (and nothing changed)."""
        entries, texts, _seq, version, forgot = self.keys(person, scope)
        args = ["n", str(which)] if isinstance(which, int) else ["text", which.strip(), check_scope(scope)]
        found = _reply(await run(_REMOVE, self.channel, [entries, texts, version, forgot], [*args, repr(self.clock())]))
        return MemoryEntry.read(*found) if found else None

    async def entries(self, person: str, scope: str | None = None) -> list[MemoryEntry]:
        """``person``'s entries in ``scope`` (every scope when None), newest and most used first."""
        keys = self.keys(person, scope or PRIVATE) if person else self.keys(person, scope or "")
        kept = await self._all(keys[0], keys[3])
        return [entry for entry in kept if scope is None or entry.scope == scope]

    async def _all(self, key: str, version_key: str) -> list[MemoryEntry]:
        """Every entry under ``key``, sorted: parsed again only when its version moved since this process last
        read it (a request reads its person's memory every time; it changes far less often)."""
        held = self._read.get(key)
        reply = [
            text_of(part) for part in await run(_READ, self.channel, [key, version_key], [held[0] if held else ""])
        ]
        if held is not None and reply[0] == held[0]:
            self._read.move_to_end(key)
            return held[1]
        kept = sorted(
            (MemoryEntry.read(n, body) for n, body in zip(reply[1::2], reply[2::2], strict=True)), key=MemoryEntry.order
        )
        self._read[key] = (reply[0], kept)
        while len(self._read) > READ_CACHE_KEYS:
            self._read.popitem(last=False)
        return kept

    async def count(self, person: str, scope: str | None = None) -> int:
        if scope is None and person:
            return int(await self.channel.call("HLEN", self.keys(person, PRIVATE)[0]))
        return len(await self.entries(person, scope))

    async def forget_all(self, person: str, scope: str | None = None) -> int:
        """Remove ``person``'s entries, of every scope (or of ``scope`` only); how many there were."""
        keys = self.keys(person, scope or PRIVATE) if person else self.keys(person, scope or "")
        return int(await run(_FORGET, self.channel, keys, [check_scope(scope) if scope else "", repr(self.clock())]))

    async def touch(self, person: str, numbers: Sequence[int], scope: str = PRIVATE) -> None:
        """Mark entries as used now (a request carried them): they move up the list."""
        if numbers:
            keys = self.keys(person, scope)
            await run(_TOUCH, self.channel, [keys[0], keys[3]], [repr(self.clock()), *map(str, numbers)])
