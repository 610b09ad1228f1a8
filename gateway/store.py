"""SessionStore: every chat's transcript, archive, meta, lock and dedupe keys in Redis.

Key layout
----------
Every key of one chat carries the chat as its Redis Cluster hash tag, so every
multi-key step below is one Lua script on one slot::

    {prefix}:{<chat>}:session              current session id of the chat (string)
    {prefix}:{<chat>}:sessions             sorted set: the chat's conversations by start time (sid -> created_at)
    {prefix}:{<chat>}:s:<sid>:meta         session meta hash (counters, summary, guard state)
    {prefix}:{<chat>}:s:<sid>:msg          hash  message id -> JSON body, every version ever stored
    {prefix}:{<chat>}:s:<sid>:active       list of message ids: the live transcript, in order
    {prefix}:{<chat>}:s:<sid>:archive      list of message ids folded away by compactions, in order
    {prefix}:{<chat>}:lock                 chat lock (random token, PX expiry)
    {prefix}:{<chat>}:fence                fencing counter, +1 per lock acquisition
    {prefix}:{<chat>}:quarantine           list of JSON records of unreadable stored messages
    {prefix}:{<chat>}:seen:<update_id>     platform update dedupe marker (EX >= 24 h)
    {prefix}:{<chat>}:inbox                list of incoming messages not yet answered (gateway.inbox)
    {prefix}:{<chat>}:stop                 when a ``/stop`` arrived, until a running turn honours it (EX 10 min)
    {prefix}:{<chat>}:reply:<entry id>     the messages a streamed reply posted (gateway.delivery.journal)
    {prefix}:{<chat>}:compaction:<cid>     result of compaction ``cid`` (EX 7 days), for idempotent retries

Message bodies are written once and never rewritten: the active and archive lists hold
ids only, so a compaction moves ids between lists and stores just the messages it
creates (the summary, stubs, edited copies) — it never re-inserts the transcript.

What grows, by design: the ``msg`` hash and the ``archive`` list of a session grow with
everything ever said in it and are never trimmed (B1: every original stays retrievable
by id). Everything else is bounded: ``active`` by the context window (compaction keeps
it there), ``meta`` by the summary cap, ``quarantine`` by the number of corrupted
entries, and the lock, ``seen`` and ``compaction`` keys expire.

Message metadata
----------------
``_id`` is assigned here from the session's counter (``meta.next_id``); a session
created by rotation continues its parent's counter, so ids stay unique along the
``parent_session_id`` chain. ``_ts`` is the unix time of the write unless the message
already carries one. ``_tok`` is :func:`agent.tokens.count_message`; meta ``tokens`` is
the running sum of ``_tok`` over the active list (a request costs that plus
:data:`agent.tokens.REQUEST_OVERHEAD`), so the per-message path reads a counter and
never the transcript (B3).

Fencing
-------
Writes that take ``lock=`` run as one Lua script that first checks the lock key still
holds the caller's token (and that no holder with a newer fence has written this
session), then checks key types and versions, and only then writes. A failed check
writes nothing; see :meth:`SessionStore.acquire_lock` for the timing semantics.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import re
import secrets
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ResponseError

from agent import json_codec
from agent.messages import InvalidMessage, Message, validate_message
from agent.tokens import count_message
from gateway.redis_channel import RedisChannel, RedisPyChannel, Script

log = logging.getLogger(__name__)

#: How long a compaction's result is kept so a retried commit (reply lost) is not applied twice.
COMMIT_RECORD_TTL_SECONDS = 7 * 86_400
#: How long an archived long message is remembered by its inbox entry, so a retried turn reuses it.
ORIGINAL_MARKER_TTL_SECONDS = 7 * 86_400
#: Platforms redeliver updates for up to a day; a shorter dedupe window would let duplicates through.
MIN_SEEN_TTL_SECONDS = 86_400
#: How long a session read ahead by the step that handed out an inbox entry may stand in for a
#: fresh read: far below the shortest lock ttl (1 s), so a worker that stalled reads again.
READ_AHEAD_SECONDS = 0.5


class StoreError(RuntimeError):
    """A store operation was refused; nothing was written."""


class StaleLock(StoreError):
    """The caller's chat lock expired or was taken over; its write was refused."""


class VersionConflict(StoreError):
    """The session changed since the caller read it (version, pointer or successor moved)."""


class UnknownSession(StoreError, KeyError):
    """No session with that id exists for the chat."""


class WrongKeyType(StoreError):
    """A chat key holds a different Redis type than the store writes; it was left alone."""


@dataclass(frozen=True)
class Lock:
    """Proof of holding a chat's lock: the random token in the lock key and its fence number."""

    chat: str
    token: str
    fence: int


@dataclass(frozen=True)
class CompactionCommit:
    """What a compaction commit did (the same value again when it is retried)."""

    session_id: str
    old_session_id: str
    archived_ids: list[str]
    active_ids: list[str]
    version: int
    #: The commit was applied before (by an earlier call of the lock's holder) and nothing was
    #: written now. Left out of equality: it is the same commit.
    replayed: bool = field(default=False, compare=False)


@dataclass(frozen=True)
class SessionMeta:
    """One session's counters and state, read in one HGETALL of a bounded hash."""

    session_id: str
    tokens: int = 0
    count: int = 0
    last_prompt_tokens: int | None = None
    tokens_at_report: int | None = None  # meta ``tokens`` when last_prompt_tokens was reported
    compaction_count: int = 0
    previous_summary: str | None = None
    engine_state: dict[str, Any] = field(default_factory=dict)
    version: int = 0
    parent_session_id: str | None = None
    successor_session_id: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    model: str | None = None
    last_activity_at: float | None = None
    next_id: int = 0
    fence: int = 0
    last_entry_id: str | None = None  # the inbox entry whose turn was committed last
    last_reply: str | None = None  # that turn's reply, resent if the process died before sending it
    replied_entry_id: str | None = None  # the entry whose reply was sent last
    #: Every entry the last committed turn took together (a coalesced backlog), one per line.
    batch_entry_ids: str | None = None
    usage_totals: dict[str, int] = field(default_factory=dict)  # summed provider usage of the session


@dataclass(frozen=True)
class SessionOutline:
    """A session's message ids and their stored sizes in bytes (what ``/sessions`` shows, no bodies read)."""

    active: list[str]
    archived: list[str]
    sizes: dict[str, int]


#: Meta fields callers may set (``None`` clears one); every other field is the store's own.
_INT_FIELDS = frozenset({"last_prompt_tokens", "tokens_at_report", "compaction_count"})
_FLOAT_FIELDS = frozenset({"last_activity_at"})
_STR_FIELDS = frozenset({"previous_summary", "model", "last_entry_id", "last_reply", "replied_entry_id",
                         "batch_entry_ids"})
_JSON_FIELDS = frozenset({"engine_state", "usage_totals"})
SETTABLE_META_FIELDS = _INT_FIELDS | _FLOAT_FIELDS | _STR_FIELDS | _JSON_FIELDS
#: A compaction sets its own compaction_count.
COMMIT_META_FIELDS = SETTABLE_META_FIELDS - {"compaction_count"}


def check_key_part(name: str, value: Any) -> str:
    """Braces would move or break the hash tag that keeps a chat on one cluster slot."""
    if not isinstance(value, str) or not value or "{" in value or "}" in value:
        raise ValueError(f"{name} must be a non-empty string without braces, got {value!r}")
    return value


@dataclass(frozen=True)
class ChatKeys:
    """Names of one chat's keys; all share the hash tag ``{<chat>}``."""

    prefix: str
    chat: str
    base: str = field(init=False, repr=False, compare=False)  # every key starts with it

    def __post_init__(self) -> None:
        object.__setattr__(self, "base", f"{self.prefix}:{{{self.chat}}}")

    @property
    def session(self) -> str:
        return f"{self.base}:session"

    @property
    def sessions(self) -> str:
        return f"{self.base}:sessions"

    @property
    def lock(self) -> str:
        return f"{self.base}:lock"

    @property
    def fence(self) -> str:
        return f"{self.base}:fence"

    @property
    def quarantine(self) -> str:
        return f"{self.base}:quarantine"

    def seen(self, update_id: str | int) -> str:
        return f"{self.base}:seen:{update_id}"

    @property
    def inbox(self) -> str:
        return f"{self.base}:inbox"

    @property
    def stop(self) -> str:
        return f"{self.base}:stop"

    @property
    def outage(self) -> str:
        return f"{self.base}:outage"

    def compaction(self, compaction_id: str) -> str:
        return f"{self.base}:compaction:{compaction_id}"

    def meta(self, sid: str) -> str:
        return f"{self.base}:s:{sid}:meta"

    def msg(self, sid: str) -> str:
        return f"{self.base}:s:{sid}:msg"

    def active(self, sid: str) -> str:
        return f"{self.base}:s:{sid}:active"

    def archive(self, sid: str) -> str:
        return f"{self.base}:s:{sid}:archive"

    def original(self, sid: str, entry_id: str) -> str:
        return f"{self.base}:s:{sid}:original:{entry_id}"


# --------------------------------------------------------------------------- Lua

#: Helpers shared by the scripts. Checks raise before any write, so a refused call writes nothing.
_LUA_HELPERS = r"""
local function fail(code, message)
  error({err = code .. ' ' .. message})
end

local function require_type(key, a, b)
  local actual = redis.call('TYPE', key)['ok']
  if actual ~= a and actual ~= b then
    fail('FG_WRONG_TYPE', key .. ' holds a ' .. actual)
  end
  return actual
end

local function require_session(meta_key)
  local actual = redis.call('TYPE', meta_key)['ok']
  if actual == 'none' then fail('FG_UNKNOWN_SESSION', meta_key .. ' does not exist') end
  if actual ~= 'hash' then fail('FG_WRONG_TYPE', meta_key .. ' holds a ' .. actual) end
end

local function require_lock(lock_key, token, meta_key, fence)
  if redis.call('GET', lock_key) ~= token then
    fail('FG_STALE_LOCK', 'the chat lock expired or another worker holds it')
  end
  local last = tonumber(redis.call('HGET', meta_key, 'fence') or '0') or 0
  if last > tonumber(fence) then
    fail('FG_STALE_LOCK', 'a newer lock holder (fence ' .. last .. ') already wrote this session')
  end
end

-- Counters the script adds to must hold integers: HINCRBY on anything else fails mid-script,
-- after earlier writes have landed (Redis does not roll a script back).
local function require_counters(meta_key, ...)
  for _, name in ipairs({...}) do
    local value = redis.call('HGET', meta_key, name)
    if value and not string.match(value, '^%-?%d+$') then
      fail('FG_WRONG_TYPE', meta_key .. ' field ' .. name .. ' is not an integer: ' .. value)
    end
  end
end

-- A new message id from the session's counter, never one a body is stored under: a counter found
-- behind the stored ids (reset or corrupted) is moved past every id in ``msg_keys`` first.
local function fresh_id(meta_key, msg_keys)
  local id = redis.call('HINCRBY', meta_key, 'next_id', 1)
  for _, key in ipairs(msg_keys) do
    if redis.call('HEXISTS', key, tostring(id)) == 1 then
      local top = id
      for _, each in ipairs(msg_keys) do
        for _, name in ipairs(redis.call('HKEYS', each)) do
          local number = tonumber(name)
          if number and number > top then top = math.floor(number) end
        end
      end
      id = top + 1
      for _, each in ipairs(msg_keys) do
        while redis.call('HEXISTS', each, string.format('%.0f', id)) == 1 do id = id + 1 end
      end
      redis.call('HSET', meta_key, 'next_id', string.format('%.0f', id))
      break
    end
  end
  return string.format('%.0f', id)
end

local function require_open(meta_key)
  local successor = redis.call('HGET', meta_key, 'successor_session_id')
  if successor then
    fail('FG_CONFLICT', 'the session was continued in session ' .. successor)
  end
end

local function hmget_all(key, ids)
  local out = {}
  for first = 1, #ids, 1000 do
    local chunk = {}
    for i = first, math.min(first + 999, #ids) do chunk[#chunk + 1] = ids[i] end
    local part = redis.call('HMGET', key, unpack(chunk))
    for i = 1, #chunk do out[#out + 1] = part[i] end
  end
  return out
end
-- Meta changes travel as ARGV[first] = n pairs, the pairs, then n fields to delete, the fields.
-- Returns the changes and the index of the first argument after them.
local function read_meta_changes(first)
  local sets, dels, i = {}, {}, first + 1
  for _ = 1, tonumber(ARGV[first]) do
    sets[#sets + 1] = {ARGV[i], ARGV[i + 1]}
    i = i + 2
  end
  local ndel = tonumber(ARGV[i])
  i = i + 1
  for _ = 1, ndel do
    dels[#dels + 1] = ARGV[i]
    i = i + 1
  end
  return sets, dels, i
end

local function apply_meta_changes(key, sets, dels)
  for _, pair in ipairs(sets) do redis.call('HSET', key, pair[1], pair[2]) end
  for _, name in ipairs(dels) do redis.call('HDEL', key, name) end
end

-- The chat's session as {sid, meta pairs, active ids, wanted ids, their bodies}, or {false} when it
-- has none yet. Bodies are immutable, so for the session the caller names (held_sid) only ids above
-- the ``next_id`` it last saw are wanted (ids only grow). The session's keys are derived from the
-- pointer; they carry the chat's hash tag, so on a cluster they live on the pointer's slot.
local function read_snapshot(pointer_key, base, with_messages, held_sid, held_next)
  local sid = redis.call('GET', pointer_key)
  if not sid then return {false} end
  base = base .. ':s:' .. sid
  local meta = redis.call('HGETALL', base .. ':meta')
  if #meta == 0 then return {false, sid} end  -- the pointer names a session that does not exist
  if with_messages ~= '1' then return {sid, meta, {}, {}, {}} end
  local ids = redis.call('LRANGE', base .. ':active', 0, -1)
  local wanted = ids
  if held_sid == sid then
    local known = tonumber(held_next) or 0
    wanted = {}
    for _, id in ipairs(ids) do
      local number = tonumber(id)
      if not number or number > known then wanted[#wanted + 1] = id end
    end
  end
  return {sid, meta, ids, wanted, hmget_all(base .. ':msg', wanted)}
end

-- The checks read_snapshot's reads would fail on, for a script that must run them before it writes.
local function check_snapshot(pointer_key, base)
  require_type(pointer_key, 'string', 'none')
  local sid = redis.call('GET', pointer_key)
  if not sid then return end
  base = base .. ':s:' .. sid
  require_type(base .. ':meta', 'hash', 'none')
  require_type(base .. ':active', 'list', 'none')
  require_type(base .. ':msg', 'hash', 'none')
end
"""

#: KEYS: session pointer, new meta, lock, [parent meta]. ARGV: new sid, now, mode ('current'|'new'),
#: parent sid, lock token ('' = no lock required).
_CREATE_SESSION = r"""
require_type(KEYS[1], 'string', 'none')
if ARGV[5] ~= '' and redis.call('GET', KEYS[3]) ~= ARGV[5] then
  fail('FG_STALE_LOCK', 'the chat lock expired or another worker holds it')
end
if ARGV[3] == 'current' then
  local existing = redis.call('GET', KEYS[1])
  if existing then return existing end
end
if redis.call('EXISTS', KEYS[2]) == 1 then fail('FG_CONFLICT', 'session id collision, retry') end
local next_id = '0'
local model = false
if ARGV[4] ~= '' then
  require_session(KEYS[4])
  next_id = redis.call('HGET', KEYS[4], 'next_id') or '0'
  model = redis.call('HGET', KEYS[4], 'model')
end
redis.call('HSET', KEYS[2], 'created_at', ARGV[2], 'updated_at', ARGV[2], 'version', '0',
  'tokens', '0', 'count', '0', 'compaction_count', '0', 'next_id', next_id, 'parent_session_id', ARGV[4])
if model then redis.call('HSET', KEYS[2], 'model', model) end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
"""

#: :data:`_CREATE_SESSION` that also records a started session in the chat's index (the last KEY).
#: The index is written only while it is whole: it exists, or the chat has no session yet. A chat
#: older than the index gets it built once from what is stored (:meth:`SessionStore.indexed_sessions`),
#: so a partial index is never taken for the full list.
_CREATE_INDEXED_SESSION = (
    "local index = KEYS[#KEYS]\n"
    "require_type(index, 'zset', 'none')\n"
    "local whole = redis.call('EXISTS', index) == 1 or redis.call('EXISTS', KEYS[1]) == 0\n"
    "local function create()\n" + _CREATE_SESSION + "\nend\n"
    "local sid = create()\n"
    "if whole and sid == ARGV[1] then redis.call('ZADD', index, ARGV[2], sid) end\n"
    "return sid\n"
)

#: A chat whose pointer names a session that does not exist gets a new, empty session, so it is
#: answered again; whatever is stored under the missing id is left as it is. Nothing is written
#: when the pointer moved meanwhile or the session exists after all (returns 0).
#: KEYS: session pointer, missing meta, new meta, index. ARGV: missing sid, new sid, now.
_REPLACE_MISSING_SESSION = r"""
require_type(KEYS[1], 'string', 'none')
require_type(KEYS[4], 'zset', 'none')
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
if redis.call('EXISTS', KEYS[3]) == 1 then fail('FG_CONFLICT', 'session id collision, retry') end
redis.call('HSET', KEYS[3], 'created_at', ARGV[3], 'updated_at', ARGV[3], 'version', '0',
  'tokens', '0', 'count', '0', 'compaction_count', '0', 'next_id', '0', 'parent_session_id', '')
redis.call('SET', KEYS[1], ARGV[2])
if redis.call('EXISTS', KEYS[4]) == 1 then redis.call('ZADD', KEYS[4], ARGV[3], ARGV[2]) end
return 1
"""

#: Point the chat at one of its stored sessions (``/resume``), fenced like every write.
#: KEYS: lock, session pointer, target meta. ARGV: token, fence, target sid.
_POINT_AT_SESSION = r"""
require_type(KEYS[2], 'string', 'none')
require_session(KEYS[3])
require_lock(KEYS[1], ARGV[1], KEYS[3], ARGV[2])
require_open(KEYS[3])
redis.call('SET', KEYS[2], ARGV[3])
return ARGV[3]
"""

#: A session's outline without its bodies: {active ids, archive ids, each body's length in bytes
#: (active ids first, then archive ids)}, or {false} for an unknown session. KEYS: meta, active, archive, msg.
_SESSION_OUTLINE = r"""
if redis.call('EXISTS', KEYS[1]) == 0 then return {false} end
local active = redis.call('LRANGE', KEYS[2], 0, -1)
local archive = redis.call('LRANGE', KEYS[3], 0, -1)
local sizes = {}
for _, id in ipairs(active) do sizes[#sizes + 1] = redis.call('HSTRLEN', KEYS[4], id) end
for _, id in ipairs(archive) do sizes[#sizes + 1] = redis.call('HSTRLEN', KEYS[4], id) end
return {active, archive, sizes}
"""

#: KEYS: lock, fence, [inbox, [session pointer]]. ARGV: token, ttl ms, [key base, held sid, held next_id].
#: Returns {fence, head of the inbox or false, the session read ahead (as read_snapshot) or false},
#: or nil when the lock is held. The session is read ahead only with its pointer and a head to handle.
_ACQUIRE_LOCK = r"""
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
-- Reads first: one that fails (a key of the wrong type) must not leave a lock nobody holds.
local head = false
if KEYS[3] then head = redis.call('LINDEX', KEYS[3], 0) end
local ahead = false
if head and KEYS[4] then ahead = read_snapshot(KEYS[4], ARGV[3], '1', ARGV[4], ARGV[5]) end
local fence = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {fence, head, ahead}
"""

#: KEYS: lock. ARGV: token, ttl ms. 1 when the caller still held the lock.
_EXTEND_LOCK = r"""
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""

#: KEYS: lock, [inbox]. ARGV: token. 1 when the caller's lock was deleted; with the inbox key, the lock is
#: kept and the inbox's head returned instead when an entry is waiting.
_RELEASE_LOCK = r"""
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if KEYS[2] then
  local head = redis.call('LINDEX', KEYS[2], 0)
  if head then return head end
end
redis.call('DEL', KEYS[1])
return 1
"""

#: KEYS: lock, meta, inbox, session pointer. ARGV: token, fence, entry, n set pairs, pairs..., n delete
#: fields, fields..., key base, held sid, held next_id. Records the entry's meta (e.g. that its reply went
#: out), removes it from the inbox, returns {next head or false, the session read ahead or false}.
_FINISH_ENTRY = r"""
require_session(KEYS[2])
require_lock(KEYS[1], ARGV[1], KEYS[2], ARGV[2])
require_counters(KEYS[2], 'version')
require_type(KEYS[3], 'list', 'none')
local sets, dels, i = read_meta_changes(4)
check_snapshot(KEYS[4], ARGV[i])
apply_meta_changes(KEYS[2], sets, dels)
if #sets + #dels > 0 then redis.call('HINCRBY', KEYS[2], 'version', 1) end
if redis.call('LINDEX', KEYS[3], 0) == ARGV[3] then
  redis.call('LPOP', KEYS[3])
else
  redis.call('LREM', KEYS[3], 1, ARGV[3])
end
local head = redis.call('LINDEX', KEYS[3], 0)
if not head then return {false, false} end
return {head, read_snapshot(KEYS[4], ARGV[i], '1', ARGV[i + 1], ARGV[i + 2])}
"""

#: KEYS: session pointer. ARGV: the chat's key base, '1' to include the transcript, a session id
#: and its ``next_id`` when the caller last read it (or ''). Returns what read_snapshot returns.
_SNAPSHOT = r"""
return read_snapshot(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
"""

#: KEYS: lock, meta, msg, active. ARGV: token, fence, now, token sum, n set pairs, pairs...,
#: n delete fields, fields..., then one body tail per message.
#: A body tail is the message's JSON without its opening brace; the script prefixes ``{"_id":"<id>",``
#: so the id assigned here lands in the stored body without re-encoding JSON in Lua.
_APPEND = r"""
require_session(KEYS[2])
require_type(KEYS[3], 'hash', 'none')
require_type(KEYS[4], 'list', 'none')
require_lock(KEYS[1], ARGV[1], KEYS[2], ARGV[2])
require_open(KEYS[2])
require_counters(KEYS[2], 'next_id', 'tokens', 'count', 'version')
local sets, dels, i = read_meta_changes(5)
local ids = {}
for j = i, #ARGV do
  local id = fresh_id(KEYS[2], {KEYS[3]})
  redis.call('HSET', KEYS[3], id, '{"_id":"' .. id .. '",' .. ARGV[j])
  redis.call('RPUSH', KEYS[4], id)
  ids[#ids + 1] = id
end
apply_meta_changes(KEYS[2], sets, dels)
redis.call('HINCRBY', KEYS[2], 'tokens', ARGV[4])
redis.call('HINCRBY', KEYS[2], 'count', #ids)
redis.call('HINCRBY', KEYS[2], 'version', 1)
redis.call('HSET', KEYS[2], 'updated_at', ARGV[3], 'last_activity_at', ARGV[3], 'fence', ARGV[2])
return ids
"""

#: KEYS: lock, meta, msg, archive, marker. ARGV: token, fence, now, marker ttl, body tail. Stores one
#: message straight into the archive (active list, totals and version untouched), once per marker.
_ARCHIVE_ORIGINAL = r"""
require_session(KEYS[2])
require_type(KEYS[3], 'hash', 'none')
require_type(KEYS[4], 'list', 'none')
require_type(KEYS[5], 'string', 'none')
require_lock(KEYS[1], ARGV[1], KEYS[2], ARGV[2])
require_open(KEYS[2])
require_counters(KEYS[2], 'next_id')
local done = redis.call('GET', KEYS[5])
if done and redis.call('HEXISTS', KEYS[3], done) == 1 then return done end
local id = fresh_id(KEYS[2], {KEYS[3]})
redis.call('HSET', KEYS[3], id, '{"_id":"' .. id .. '",' .. ARGV[5])
redis.call('RPUSH', KEYS[4], id)
redis.call('SET', KEYS[5], id, 'EX', ARGV[4])
redis.call('HSET', KEYS[2], 'updated_at', ARGV[3], 'fence', ARGV[2])
return id
"""

#: KEYS: meta, active, msg. Returns {version, ids, bodies} or {false} for an unknown session.
_READ_ACTIVE = r"""
local version = redis.call('HGET', KEYS[1], 'version')
if not version then return {false} end
local ids = redis.call('LRANGE', KEYS[2], 0, -1)
return {version, ids, hmget_all(KEYS[3], ids)}
"""

#: KEYS: meta, archive, msg. Returns {ids, bodies} or {false} for an unknown session.
_READ_ARCHIVE = r"""
if redis.call('EXISTS', KEYS[1]) == 0 then return {false} end
local ids = redis.call('LRANGE', KEYS[2], 0, -1)
return {ids, hmget_all(KEYS[3], ids)}
"""

#: KEYS: meta, active, quarantine. ARGV: version read, token sum of the good messages, now,
#: then (id, record) pairs. Applies only if nothing wrote since the read (returns 0 otherwise).
_QUARANTINE = r"""
require_session(KEYS[1])
require_type(KEYS[2], 'list', 'none')
require_type(KEYS[3], 'list', 'none')
require_counters(KEYS[1], 'version')
if redis.call('HGET', KEYS[1], 'version') ~= ARGV[1] then return 0 end
for i = 4, #ARGV, 2 do
  if redis.call('LREM', KEYS[2], 0, ARGV[i]) > 0 then
    redis.call('RPUSH', KEYS[3], ARGV[i + 1])
  end
end
redis.call('HSET', KEYS[1], 'tokens', ARGV[2], 'count', redis.call('LLEN', KEYS[2]), 'updated_at', ARGV[3])
redis.call('HINCRBY', KEYS[1], 'version', 1)
return 1
"""

#: KEYS: lock, meta. ARGV: token, fence, now, n set pairs, pairs..., n delete fields, fields...
_UPDATE_META = r"""
require_session(KEYS[2])
require_lock(KEYS[1], ARGV[1], KEYS[2], ARGV[2])
require_open(KEYS[2])
require_counters(KEYS[2], 'version')
local sets, dels = read_meta_changes(4)
apply_meta_changes(KEYS[2], sets, dels)
redis.call('HSET', KEYS[2], 'updated_at', ARGV[3], 'fence', ARGV[2])
return redis.call('HINCRBY', KEYS[2], 'version', 1)
"""

#: One compaction, all or nothing.
#: KEYS: 1 lock, 2 session pointer, 3 compaction record, 4 meta, 5 msg, 6 active, 7 archive,
#:       and when rotating: 8 new meta, 9 new msg, 10 new active, 11 new archive.
#: ARGV: 1 token, 2 fence, 3 now, 4 mode ('in_place'|'rotate'), 5 expected version ('' = any),
#:       6 token sum of the new list, 7 record ttl s, 8 new sid, 9 old sid,
#:       10 n set pairs, pairs..., n delete fields, fields..., then (kind, value) per message:
#:       ('k', id) keeps a stored message, ('n', body tail) stores a new one, ('a', body tail)
#:       archives a message that was never stored (created and folded within one turn).
_COMMIT_COMPACTION = r"""
-- 1. The lock and fence before anything else: a holder whose lock expired is refused even the
--    answer of a commit that was applied (its caller would take that for its own and reply).
require_session(KEYS[4])
require_lock(KEYS[1], ARGV[1], KEYS[4], ARGV[2])

-- 2. A commit already applied under this compaction id answers again and writes nothing.
require_type(KEYS[3], 'string', 'none')
local done = redis.call('GET', KEYS[3])
if done then return {'replayed', done} end

-- 3. Every other check that can fail, before the first write.
local rotate = ARGV[4] == 'rotate'
require_type(KEYS[2], 'string', 'none')
require_type(KEYS[5], 'hash', 'none')
require_type(KEYS[6], 'list', 'none')
require_type(KEYS[7], 'list', 'none')
require_open(KEYS[4])
require_counters(KEYS[4], 'version', 'next_id', 'compaction_count')
local version = redis.call('HGET', KEYS[4], 'version') or '0'
if ARGV[5] ~= '' and version ~= ARGV[5] then
  fail('FG_CONFLICT', 'session version is ' .. version .. ', expected ' .. ARGV[5])
end
if rotate then
  if redis.call('GET', KEYS[2]) ~= ARGV[9] then
    fail('FG_CONFLICT', 'the chat no longer points at session ' .. ARGV[9])
  end
  for k = 8, 11 do
    if redis.call('EXISTS', KEYS[k]) == 1 then fail('FG_CONFLICT', 'session id collision, retry') end
  end
end
local sets, dels, i = read_meta_changes(10)
local entries = {}
while i <= #ARGV do
  local kind, value = ARGV[i], ARGV[i + 1]
  if kind == 'k' and redis.call('HEXISTS', KEYS[5], value) == 0 then
    fail('FG_INVALID', 'message id ' .. value .. ' is not stored in session ' .. ARGV[9])
  end
  entries[#entries + 1] = {kind, value}
  i = i + 2
end

-- 4. Writes.
local target_meta, target_msg, target_active = KEYS[4], KEYS[5], KEYS[6]
local new_version
if rotate then
  target_meta, target_msg, target_active = KEYS[8], KEYS[9], KEYS[10]
  -- The new session inherits the old one's state (model, summary, guard state, id counter).
  local inherited = redis.call('HGETALL', KEYS[4])
  local skip = {tokens = 1, count = 1, version = 1, created_at = 1, updated_at = 1, fence = 1,
    last_prompt_tokens = 1, tokens_at_report = 1, parent_session_id = 1, compaction_count = 1}
  for j = 1, #inherited, 2 do
    if not skip[inherited[j]] then redis.call('HSET', target_meta, inherited[j], inherited[j + 1]) end
  end
  local count = tonumber(redis.call('HGET', KEYS[4], 'compaction_count') or '0') + 1
  redis.call('HSET', target_meta, 'created_at', ARGV[3], 'parent_session_id', ARGV[9],
    'compaction_count', count, 'version', '0')
else
  redis.call('HINCRBY', target_meta, 'compaction_count', 1)
end

local keep = {}
local new_ids = {}
local folded = {}
for _, entry in ipairs(entries) do
  local id = entry[2]
  if entry[1] == 'a' then
    folded[#folded + 1] = entry[2]
  elseif entry[1] == 'k' then
    if rotate then redis.call('HSET', target_msg, id, redis.call('HGET', KEYS[5], id)) end
  else
    id = fresh_id(target_meta, {KEYS[5], target_msg})
    redis.call('HSET', target_msg, id, '{"_id":"' .. id .. '",' .. entry[2])
  end
  if entry[1] ~= 'a' then
    keep[id] = true
    new_ids[#new_ids + 1] = id
  end
end

local archived = {}
for _, id in ipairs(redis.call('LRANGE', KEYS[6], 0, -1)) do
  if not keep[id] then
    archived[#archived + 1] = id
    if not rotate then redis.call('RPUSH', KEYS[7], id) end
  end
end
-- Messages the turn created and the compaction folded before they were ever stored: archived
-- here, in the session they were written in, so nothing the model saw is lost.
for _, tail in ipairs(folded) do
  local id = fresh_id(target_meta, {KEYS[5], target_msg})
  redis.call('HSET', KEYS[5], id, '{"_id":"' .. id .. '",' .. tail)
  redis.call('RPUSH', KEYS[7], id)
  archived[#archived + 1] = id
end

redis.call('DEL', target_active)
for _, id in ipairs(new_ids) do redis.call('RPUSH', target_active, id) end

redis.call('HDEL', target_meta, 'last_prompt_tokens', 'tokens_at_report')
redis.call('HSET', target_meta, 'tokens', ARGV[6], 'count', #new_ids, 'updated_at', ARGV[3], 'fence', ARGV[2])
apply_meta_changes(target_meta, sets, dels)
new_version = redis.call('HINCRBY', target_meta, 'version', 1)

local session_id, old_session_id = ARGV[9], ''
if rotate then
  session_id, old_session_id = ARGV[8], ARGV[9]
  redis.call('SET', KEYS[2], ARGV[8])
  redis.call('HSET', KEYS[4], 'successor_session_id', ARGV[8], 'updated_at', ARGV[3])
  redis.call('HINCRBY', KEYS[4], 'version', 1)
end

local record = session_id .. '\n' .. old_session_id .. '\n' .. new_version .. '\n'
  .. table.concat(archived, ',') .. '\n' .. table.concat(new_ids, ',')
redis.call('SET', KEYS[3], record, 'EX', ARGV[7])
return {'applied', record}
"""

_ERRORS: dict[str, type[StoreError]] = {
    "FG_STALE_LOCK": StaleLock,
    "FG_CONFLICT": VersionConflict,
    "FG_UNKNOWN_SESSION": UnknownSession,
    "FG_WRONG_TYPE": WrongKeyType,
}
_SCRIPT_LOCATION = re.compile(r"\s+script: .*$", re.DOTALL)


def _translate(error: ResponseError) -> Exception:
    """Turn a script's coded error reply into the matching exception (others pass through)."""
    text = _SCRIPT_LOCATION.sub("", str(error))
    code, _, message = text.partition(" ")
    if code == "FG_INVALID":
        return InvalidMessage(message)
    kind = _ERRORS.get(code)
    return kind(message) if kind else error


# --------------------------------------------------------------------------- encoding


def _body_tail(body: Mapping[str, Any], index: int) -> bytes:
    """The message's JSON without the opening brace (the script puts ``{"_id":…,`` in front)."""
    try:
        text = json_codec.dumps(body)
    except json_codec.EncodeError as error:
        raise InvalidMessage(f"message {index} cannot be stored as JSON: {error}") from error
    return text[1:]


def _prepare_new(message: Any, index: int, now: float) -> tuple[Message, bytes]:
    """Validate a message the store has not seen and build the body it will store (sans ``_id``)."""
    try:
        validate_message(message)
    except InvalidMessage as error:
        raise InvalidMessage(f"message {index}: {error}") from error
    body = {key: value for key, value in message.items() if key != "_id"}
    if not isinstance(body.get("_ts"), (int, float)) or isinstance(body.get("_ts"), bool):
        body["_ts"] = now
    body["_tok"] = count_message(body)
    return body, _body_tail(body, index)


def _encode_meta_fields(fields: Mapping[str, Any], allowed: frozenset[str]) -> tuple[list[str], list[str]]:
    """Meta values as hash strings: (flat field/value pairs to set, fields to delete for ``None``)."""
    sets: list[str] = []
    deletes: list[str] = []
    for name, value in fields.items():
        if name not in allowed:
            raise ValueError(f"meta field {name!r} cannot be set here; settable: {sorted(allowed)}")
        if value is None:
            deletes.append(name)
            continue
        if name in _INT_FIELDS:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"meta field {name!r} must be a non-negative int, got {value!r}")
            encoded = str(value)
        elif name in _FLOAT_FIELDS:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"meta field {name!r} must be a unix time, got {value!r}")
            encoded = repr(float(value))
        elif name in _STR_FIELDS:
            if not isinstance(value, str):
                raise ValueError(f"meta field {name!r} must be a string, got {type(value).__name__}")
            encoded = value
        else:
            if not isinstance(value, dict):
                raise ValueError(f"meta field {name!r} must be a dict, got {type(value).__name__}")
            try:
                encoded = json_codec.dumps_state(value)
            except (TypeError, ValueError) as error:
                raise ValueError(f"meta field {name!r} must be JSON-serialisable: {error}") from error
        sets += [name, encoded]
    return sets, deletes


def _int(raw: Mapping[str, str], name: str, default: int | None = 0) -> int | None:
    value = raw.get(name)  # several fields are often absent: no exception for those
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        return default


def _float(raw: Mapping[str, str], name: str, default: float | None = 0.0) -> float | None:
    value = raw.get(name)
    if value is None:
        return default
    try:
        return float(value)
    except ValueError:
        return default


def _json_dict(sid: str, raw: Mapping[str, str], name: str) -> dict[str, Any]:
    """A JSON meta field as a dict; unreadable state is logged and starts empty rather than failing the chat."""
    if not raw.get(name):
        return {}
    try:
        decoded = json_codec.loads(raw[name])
    except ValueError:
        log.warning("session %s: meta %s is not JSON; starting from empty", sid, name)
        return {}
    return decoded if isinstance(decoded, dict) else {}


def _parse_meta(sid: str, raw: Mapping[str, str]) -> SessionMeta:
    engine_state = _json_dict(sid, raw, "engine_state")
    return SessionMeta(
        session_id=sid,
        tokens=_int(raw, "tokens") or 0,
        count=_int(raw, "count") or 0,
        last_prompt_tokens=_int(raw, "last_prompt_tokens", None),
        tokens_at_report=_int(raw, "tokens_at_report", None),
        compaction_count=_int(raw, "compaction_count") or 0,
        previous_summary=raw.get("previous_summary"),
        engine_state=engine_state,
        version=_int(raw, "version") or 0,
        parent_session_id=raw.get("parent_session_id") or None,
        successor_session_id=raw.get("successor_session_id") or None,
        created_at=_float(raw, "created_at") or 0.0,
        updated_at=_float(raw, "updated_at") or 0.0,
        model=raw.get("model") or None,
        last_activity_at=_float(raw, "last_activity_at", None),
        next_id=_int(raw, "next_id") or 0,
        fence=_int(raw, "fence") or 0,
        last_entry_id=raw.get("last_entry_id") or None,
        last_reply=raw.get("last_reply"),
        replied_entry_id=raw.get("replied_entry_id") or None,
        batch_entry_ids=raw.get("batch_entry_ids") or None,
        usage_totals=_json_dict(sid, raw, "usage_totals"),
    )


def _parse_record(record: str) -> CompactionCommit:
    session_id, old_session_id, version, archived, active = record.split("\n")
    return CompactionCommit(
        session_id=session_id,
        old_session_id=old_session_id,
        archived_ids=archived.split(",") if archived else [],
        active_ids=active.split(",") if active else [],
        version=int(version),
    )


def _decode_stored(message_id: str, raw: str | None) -> tuple[Message | None, str]:
    """A stored body as a message, or ``(None, reason)`` when it cannot be used."""
    if raw is None:
        return None, "message body is missing"
    try:
        message = json_codec.loads(raw)
    except ValueError as error:
        return None, f"body is not valid JSON: {error}"
    try:
        validate_message(message)
    except InvalidMessage as error:
        return None, f"body is not a valid message: {error}"
    message["_id"] = message_id
    return message, ""


def _in_order(
    ids: Sequence[str], found: Mapping[str, Message], known: Mapping[str, Message]
) -> tuple[list[Message], list[str]]:
    """The messages of ``ids`` in order from what was just read or is held, and the ids in neither."""
    messages: list[Message] = []
    missing: list[str] = []
    for message_id in ids:
        message = found.get(message_id) or known.get(message_id)
        if message is None:
            missing.append(message_id)
        else:
            messages.append(message)
    return messages, missing


def _decode_entries(ids: Sequence[str], bodies: Sequence[str | None]) -> tuple[list[Message], list[tuple[str, str | None, str]]]:
    """Stored bodies as messages, and the unreadable ones as (id, raw, reason) for quarantine."""
    good: list[Message] = []
    bad: list[tuple[str, str | None, str]] = []
    for message_id, raw in zip(ids, bodies):
        message, reason = _decode_stored(message_id, raw)
        if message is None:
            bad.append((message_id, raw, reason))
        else:
            good.append(message)
    return good, bad


def _new_session_id() -> str:
    return secrets.token_hex(6)


def _milliseconds(ttl_seconds: float) -> int:
    ms = int(ttl_seconds * 1000)
    if ms < 1:
        raise ValueError(f"lock ttl must be at least 1 ms, got {ttl_seconds!r} s")
    return ms


# --------------------------------------------------------------------------- store


@dataclass
class _HeldTranscript:
    session_id: str
    next_id: int
    messages: dict[str, Message]
    tokens: int

    @property
    def key(self) -> tuple[str, int]:
        return self.session_id, self.next_id


class TranscriptCache:
    """Live transcripts this process read lately, so a turn fetches and decodes only what is new.

    Stored message bodies never change and ids only grow, so what a chat's session held up to
    its ``next_id`` stays valid: the snapshot script then sends only newer messages (plus any
    older id it finds in the list that is not held here). Least recently used chats are dropped
    beyond ``max_tokens`` held in all; ``0`` turns the cache off. Callers get copies.
    """

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max(0, int(max_tokens))
        self.tokens = 0
        self._chats: "collections.OrderedDict[str, _HeldTranscript]" = collections.OrderedDict()

    def get(self, chat: str) -> _HeldTranscript | None:
        held = self._chats.get(chat)
        if held is not None:
            self._chats.move_to_end(chat)
        return held

    def put(self, chat: str, session_id: str, next_id: int, messages: Sequence[Message]) -> None:
        self.drop(chat)
        if not self.max_tokens:
            return
        tokens = sum(int(message.get("_tok") or 0) for message in messages)
        if tokens > self.max_tokens:
            return
        self._chats[chat] = _HeldTranscript(session_id, next_id, {m["_id"]: m for m in messages}, tokens)
        self.tokens += tokens
        self._evict()

    def _evict(self) -> None:
        while self.tokens > self.max_tokens:
            _chat, oldest = self._chats.popitem(last=False)
            self.tokens -= oldest.tokens

    def extend(self, chat: str, held: _HeldTranscript, next_id: int, fresh: Sequence[Message]) -> bool:
        """Add what was appended after ``held`` was read (the usual turn): no rebuild of the rest.

        False, changing nothing, when ``held`` is no longer the chat's entry (evicted meanwhile).
        """
        if self._chats.get(chat) is not held:
            return False
        tokens = sum(int(message.get("_tok") or 0) for message in fresh)
        if held.tokens + tokens > self.max_tokens:
            self.drop(chat)  # grown past the whole budget: not held, as put would refuse it (others stay)
            return True
        held.messages.update((message["_id"], message) for message in fresh)
        held.next_id = next_id
        held.tokens += tokens
        self.tokens += tokens
        self._evict()
        return True

    def drop(self, chat: str) -> None:
        held = self._chats.pop(chat, None)
        if held is not None:
            self.tokens -= held.tokens


class SessionStore:
    """Chats' sessions in Redis (a ``redis.asyncio`` client with ``decode_responses=True``).

    The scripts (every step of the message path) go through ``channel``; the gateway passes
    :func:`gateway.redis_channel.channel_for`, the default sends them through ``redis`` itself.
    """

    #: How many times :meth:`active` re-reads when a write races its quarantine of bad entries.
    QUARANTINE_ATTEMPTS = 3

    def __init__(
        self,
        redis: Redis,
        prefix: str = "fg",
        *,
        commit_record_ttl_seconds: int = COMMIT_RECORD_TTL_SECONDS,
        channel: RedisChannel | None = None,
        transcript_cache_tokens: int = 0,
    ) -> None:
        self.redis = redis
        self.prefix = check_key_part("prefix", prefix)
        self.commit_record_ttl_seconds = int(commit_record_ttl_seconds)
        self.channel: RedisChannel = channel or RedisPyChannel(redis)
        self.transcripts = TranscriptCache(transcript_cache_tokens)
        #: chat -> (session read ahead by claim/finish_entry, the held transcript it was read against,
        #: the monotonic time until which it may be used)
        self._read_ahead: dict[str, tuple[Any, _HeldTranscript | None, float]] = {}
        register = Script.of
        self._create_session = register(_LUA_HELPERS + _CREATE_INDEXED_SESSION)
        self._point_at = register(_LUA_HELPERS + _POINT_AT_SESSION)
        self._replace_missing = register(_LUA_HELPERS + _REPLACE_MISSING_SESSION)
        self._outline = register(_SESSION_OUTLINE)
        self._acquire = register(_LUA_HELPERS + _ACQUIRE_LOCK)
        self._extend = register(_EXTEND_LOCK)
        self._release = register(_RELEASE_LOCK)
        self._append = register(_LUA_HELPERS + _APPEND)
        self._archive_original = register(_LUA_HELPERS + _ARCHIVE_ORIGINAL)
        self._read_active = register(_LUA_HELPERS + _READ_ACTIVE)
        self._read_archive = register(_LUA_HELPERS + _READ_ARCHIVE)
        self._quarantine = register(_LUA_HELPERS + _QUARANTINE)
        self._update_meta = register(_LUA_HELPERS + _UPDATE_META)
        self._finish_entry = register(_LUA_HELPERS + _FINISH_ENTRY)
        self._snapshot = register(_LUA_HELPERS + _SNAPSHOT)
        self._commit = register(_LUA_HELPERS + _COMMIT_COMPACTION)

    def keys(self, chat: str) -> ChatKeys:
        """Key names of ``chat`` (e.g. ``"tg:123456"``)."""
        return ChatKeys(self.prefix, check_key_part("chat", chat))

    async def _run(self, script: Any, keys: Sequence[str], args: Sequence[Any]) -> Any:
        try:
            return await script.run(self.channel, keys, args)
        except ResponseError as error:
            raise _translate(error) from error

    # ----------------------------------------------------------------- sessions

    async def stored_session(self, chat: str) -> str | None:
        """The chat's current session id, or None for a chat nothing was ever stored for (reads only)."""
        sid = await self.redis.get(self.keys(chat).session)
        return str(sid) if sid else None

    async def current_session(self, chat: str) -> str:
        """The chat's current session id, creating the first session when there is none."""
        keys = self.keys(chat)
        if sid := await self.stored_session(chat):
            return sid
        new_sid = _new_session_id()
        return str(await self._run(self._create_session, [keys.session, keys.meta(new_sid), keys.lock, keys.sessions],
                                   [new_sid, repr(time.time()), "current", "", ""]))

    async def new_session(self, chat: str, *, parent: str | None = None, lock: Lock | None = None) -> str:
        """Start a new session and point the chat at it (``/new``); the old one stays stored.

        With ``parent`` the new session links to it, continues its message ids and keeps its model.
        With ``lock`` the switch is fenced: a holder whose lock expired cannot move the pointer
        away from what the next holder committed (:class:`StaleLock`).
        """
        self._read_ahead.pop(chat, None)  # this write outdates a session read ahead
        keys = self.keys(chat)
        new_sid = _new_session_id()
        lock_key = _lock_key(keys, lock) if lock is not None else keys.lock
        key_list = [keys.session, keys.meta(new_sid), lock_key]
        if parent:
            key_list.append(keys.meta(check_key_part("parent", parent)))
        key_list.append(keys.sessions)  # the script records the session in the chat's index
        return str(await self._run(self._create_session, key_list,
                                   [new_sid, repr(time.time()), "new", parent or "", lock.token if lock else ""]))

    async def _replace_missing_session(self, chat: str, missing: str) -> None:
        """The chat points at a session that does not exist (its meta was lost or deleted by hand):
        start a new one for it rather than refuse every message of the chat from now on."""
        self._read_ahead.pop(chat, None)
        self.transcripts.drop(chat)
        keys = self.keys(chat)
        new_sid = _new_session_id()
        replaced = await self._run(
            self._replace_missing,
            [keys.session, keys.meta(check_key_part("session id", missing)), keys.meta(new_sid), keys.sessions],
            [missing, new_sid, repr(time.time())],
        )
        if replaced:
            log.warning("%s: its session %s does not exist; started session %s (keys stored under %s are kept)",
                        chat, missing, new_sid, missing)

    async def indexed_sessions(self, chat: str) -> list[tuple[str, float]]:
        """The chat's conversations as ``(session it started in, start time)``, oldest first.

        :meth:`new_session` and the chat's first :meth:`current_session` index what they create;
        a rotating compaction's continuation is not indexed, it is reached from its predecessor's
        ``successor_session_id``. A chat stored before the index existed gets it built here, once,
        from the sessions stored under the chat's keys. A session started while that build runs
        may be missing from it; callers add the chat's current conversation themselves.
        """
        indexed = await self.redis.zrange(self.keys(chat).sessions, 0, -1, withscores=True)
        if not indexed:  # an empty sorted set does not exist: the index was never built
            indexed = await self._build_session_index(chat)
        return [(str(sid), float(score)) for sid, score in indexed]

    async def _build_session_index(self, chat: str) -> list[tuple[str, float]]:
        keys = self.keys(chat)
        sids = set(await self._stored_session_ids(chat))
        current = await self.redis.get(keys.session)
        if current:
            sids.add(str(current))
        metas: dict[str, SessionMeta] = {}
        for sid in sids:
            try:
                metas[sid] = await self.meta(chat, sid)
            except (UnknownSession, ValueError):
                continue

        def continues(meta: SessionMeta) -> bool:
            parent = metas.get(meta.parent_session_id or "")
            return parent is not None and parent.successor_session_id == meta.session_id

        started = {meta.session_id: meta.created_at for meta in metas.values() if not continues(meta)}
        if not started:
            return []
        await self.redis.zadd(keys.sessions, started, nx=True)
        return list(await self.redis.zrange(keys.sessions, 0, -1, withscores=True))

    async def _stored_session_ids(self, chat: str) -> list[str]:
        """Every session id with a meta hash under the chat's keys, by SCAN (a one-time fallback).

        On a cluster only the node owning the chat's hash tag is scanned: all its keys live there.
        """
        keys = self.keys(chat)
        head = f"{keys.base}:s:"
        pattern = re.sub(r"([*?\[\]\\])", r"\\\1", head) + "*:meta"
        options: dict[str, Any] = {}
        if isinstance(self.redis, RedisCluster):
            options["target_nodes"] = self.redis.get_node_from_key(keys.session)
        found: list[str] = []
        async for key in self.redis.scan_iter(match=pattern, count=1000, **options):
            name = key.decode() if isinstance(key, bytes) else str(key)
            found.append(name[len(head) : -len(":meta")])
        return [sid for sid in found if sid]

    async def switch_session(self, chat: str, sid: str, *, lock: Lock) -> str:
        """Point the chat at its stored session ``sid`` (``/resume``); the session it leaves stays as it is.

        Fenced like :meth:`new_session`. Refuses a session that does not exist (:class:`UnknownSession`)
        or that a rotating compaction continued elsewhere (:class:`VersionConflict`): only the newest
        session of a conversation is ever written to.
        """
        self._read_ahead.pop(chat, None)  # this write outdates a session read ahead
        keys = self.keys(chat)
        check_key_part("session id", sid)
        return str(await self._run(self._point_at, [_lock_key(keys, lock), keys.session, keys.meta(sid)],
                                   [lock.token, lock.fence, sid]))

    async def session_outline(self, chat: str, sid: str) -> "SessionOutline":
        """The session's message ids (live and archived) and their stored sizes, without reading bodies."""
        keys = self.keys(chat)
        check_key_part("session id", sid)
        reply = await self._run(self._outline, [keys.meta(sid), keys.active(sid), keys.archive(sid), keys.msg(sid)], [])
        if reply[0] is None:
            raise UnknownSession(f"{chat} has no session {sid!r}")
        active, archived, sizes = ([str(i) for i in part] for part in reply)
        return SessionOutline(active, archived, {i: int(n) for i, n in zip(active + archived, sizes)})

    # ----------------------------------------------------------------- locks

    async def acquire_lock(self, chat: str, ttl_seconds: float) -> Lock | None:
        """Try once to take the chat's lock; ``None`` when another worker holds it.

        Timing semantics: the lock exists from the moment Redis runs the acquiring script
        until ``ttl_seconds`` later by the server's clock, unless it is extended or released
        first. That moment lies somewhere inside the call, so a holder must count its
        ``ttl_seconds`` from *before* it called (the earliest possible start) and stop
        relying on the lock once they have elapsed on its own monotonic clock (only the
        clocks' rate drift matters, both sides measure a duration).

        Every write that takes ``lock=`` checks the token inside the same script that
        writes: a write Redis runs after the lock expired or was taken over is refused with
        :class:`StaleLock` and writes nothing, even if the holder believed it had time left;
        a write Redis runs before expiry succeeds even when its reply arrives after expiry.
        Each acquisition increments the chat's fence counter; the returned ``fence`` is
        larger than that of every earlier holder, and a session written by a newer holder
        refuses writes carrying an older fence.
        """
        lock, _head = await self._acquire_lock(chat, ttl_seconds, peek_inbox=False)
        return lock

    async def claim(self, chat: str, ttl_seconds: float) -> tuple[Lock | None, str | None]:
        """:meth:`acquire_lock` plus the oldest inbox entry of the chat, in one round trip."""
        return await self._acquire_lock(chat, ttl_seconds, peek_inbox=True)

    async def _acquire_lock(self, chat: str, ttl_seconds: float, *, peek_inbox: bool) -> tuple[Lock | None, str | None]:
        keys = self.keys(chat)
        token = secrets.token_hex(16)
        key_list = [keys.lock, keys.fence]
        args: list[Any] = [token, _milliseconds(ttl_seconds)]
        held = self.transcripts.get(chat) if peek_inbox else None  # only a claim reads the session ahead
        if peek_inbox:
            key_list += [keys.inbox, keys.session]
            args += [keys.base, *(held.key if held else ("", 0))]
        sent = time.monotonic()
        reply = await self._run(self._acquire, key_list, args)
        if reply is None:
            self._read_ahead.pop(chat, None)
            return None, None
        fence, head, ahead = reply
        self._keep_read_ahead(chat, ahead, held, sent + min(READ_AHEAD_SECONDS, ttl_seconds / 2))
        return Lock(chat=chat, token=token, fence=int(fence)), head

    async def extend_lock(self, lock: Lock, ttl_seconds: float) -> None:
        """Make the lock expire ``ttl_seconds`` from when Redis runs this (replaces the remaining TTL).

        The same timing rule as :meth:`acquire_lock` applies, counted from before this call.

        :raises StaleLock: the lock had already expired or belongs to another worker; it is
            not re-taken (a holder that lost its lock must start over under a new one).
        """
        keys = self.keys(lock.chat)
        if not await self._run(self._extend, [keys.lock], [lock.token, _milliseconds(ttl_seconds)]):
            raise StaleLock(f"lock of {lock.chat} (fence {lock.fence}) is no longer held")

    async def release_lock(self, lock: Lock) -> bool:
        """Release the lock if this token still holds it; ``False`` when it had expired or moved on."""
        self._read_ahead.pop(lock.chat, None)
        keys = self.keys(lock.chat)
        return bool(await self._run(self._release, [keys.lock], [lock.token]))

    async def release_if_idle(self, lock: Lock) -> str | None:
        """Release the lock unless an inbox entry is waiting; then keep it and return that entry."""
        self._read_ahead.pop(lock.chat, None)
        keys = self.keys(lock.chat)
        reply = await self._run(self._release, [keys.lock, keys.inbox], [lock.token])
        return reply if isinstance(reply, str) else None

    # ----------------------------------------------------------------- inbox entries

    async def finish_entry(self, lock: Lock, sid: str, entry: str, **meta: Any) -> str | None:
        """Set ``meta`` fields, remove the handled ``entry`` from the inbox, return the next entry (fenced).

        The same step reads the session ahead for that next entry, so its :meth:`snapshot` costs no
        round trip.
        """
        keys = self.keys(lock.chat)
        sets, deletes = _encode_meta_fields(meta, SETTABLE_META_FIELDS)
        held = self.transcripts.get(lock.chat)
        sent = time.monotonic()
        head, ahead = await self._run(
            self._finish_entry,
            [_lock_key(keys, lock), keys.meta(check_key_part("session id", sid)), keys.inbox, keys.session],
            [lock.token, lock.fence, entry, len(sets) // 2, *sets, len(deletes), *deletes,
             keys.base, *(held.key if held else ("", 0))],
        )
        self._keep_read_ahead(lock.chat, ahead, held, sent + READ_AHEAD_SECONDS)
        return head or None

    def _keep_read_ahead(self, chat: str, ahead: Any, held: _HeldTranscript | None, until: float) -> None:
        """Keep the session a lock or entry step read for the entry it handed out, for :meth:`snapshot`.

        It stands for the session only while this process holds the chat's lock and writes nothing
        to it: every write below drops it, and so do the lock's release and the next read. It is
        also used only until ``until`` (monotonic): within :data:`READ_AHEAD_SECONDS` of the step
        that read it, and within half the lock's ttl after a claim. A worker that stalled longer may
        have lost the lock meanwhile, and then reads afresh (its writes are fenced in any case).
        """
        if ahead:
            self._read_ahead[chat] = (ahead, held, until)
        else:
            self._read_ahead.pop(chat, None)

    async def snapshot(self, chat: str, *, messages: bool = True) -> tuple[str, SessionMeta, list[Message]]:
        """The chat's current session id, meta and (with ``messages``) live transcript in one round trip.

        Messages this process read before come from :class:`TranscriptCache`; only newer ones
        cross the wire and are decoded. A session is created when the chat has none;
        unreadable entries are quarantined as in :meth:`active`.
        """
        keys = self.keys(chat)
        ahead = self._read_ahead.pop(chat, None)
        for _attempt in range(self.QUARANTINE_ATTEMPTS):
            if ahead is not None and ahead[1] is self.transcripts.get(chat) and time.monotonic() < ahead[2]:
                reply, held, _ = ahead  # read by the step that handed out the entry: no round trip
            else:
                held = self.transcripts.get(chat) if messages else None
                reply = await self._run(self._snapshot, [keys.session],
                                        [keys.base, "1" if messages else "0", *(held.key if held else ("", 0))])
            ahead = None
            if reply[0] is None:
                if len(reply) > 1 and reply[1]:
                    await self._replace_missing_session(chat, str(reply[1]))
                else:
                    await self.current_session(chat)
                continue
            sid, pairs, ids, wanted, bodies = reply
            raw = dict(zip(pairs[::2], pairs[1::2]))
            meta = _parse_meta(sid, raw)
            if not messages:
                return sid, meta, []
            fresh, bad = _decode_entries(wanted, bodies)
            known = held.messages if held is not None and held.session_id == sid else {}
            found = {message["_id"]: message for message in fresh}
            good, missing = _in_order(ids, found, known)
            if missing:  # an old message back in the list (a compaction may keep any stored id): read it
                more, more_bad = _decode_entries(missing, await self.redis.hmget(keys.msg(sid), missing))
                found.update((message["_id"], message) for message in more)
                bad += more_bad
                good, _ = _in_order(ids, found, known)
            if not bad:
                appended = held is not None and bool(known) and not missing and len(ids) == len(known) + len(found)
                # Only appended to since it was read (every held id is still there): no rebuild.
                if not (appended and self.transcripts.extend(chat, held, meta.next_id, fresh)):
                    self.transcripts.put(chat, sid, meta.next_id, good)
                return sid, meta, [message.copy() for message in good]  # copies: the cache stays as stored
            self.transcripts.drop(chat)
            if await self._quarantine_entries(chat, sid, raw.get("version", "0"), good, bad):
                return sid, await self.meta(chat, sid), good
        sid = await self.current_session(chat)
        return sid, await self.meta(chat, sid), await self.active(chat, sid)

    # ----------------------------------------------------------------- messages

    async def append(
        self, chat: str, sid: str, messages: Sequence[Message], *, lock: Lock, meta: Mapping[str, Any] | None = None
    ) -> list[str]:
        """Store ``messages`` at the end of the active transcript; return their new ids.

        All or nothing: any invalid message raises :class:`InvalidMessage` naming it and
        nothing is written. A message that already carries an ``_id`` is refused (it is
        stored already; appending it again would duplicate it). ``meta`` fields (as in
        :meth:`update_meta`) are set in the same atomic step, so a turn's messages and its
        bookkeeping land together. On success the given dicts receive their ``_id``,
        ``_ts`` and ``_tok``.
        """
        self._read_ahead.pop(chat, None)  # this write outdates a session read ahead
        keys = self.keys(chat)
        check_key_part("session id", sid)
        now = time.time()
        bodies: list[Message] = []
        tails: list[bytes] = []
        for index, message in enumerate(messages):
            if isinstance(message, dict) and "_id" in message:
                raise InvalidMessage(
                    f"message {index} is already stored as id {message['_id']!r}; store an edited copy "
                    "(agent.messages.with_content) instead of appending it again"
                )
            body, tail = _prepare_new(message, index, now)
            bodies.append(body)
            tails.append(tail)
        sets, deletes = _encode_meta_fields(meta or {}, SETTABLE_META_FIELDS)
        if not tails and not sets and not deletes:
            return []
        total = sum(body["_tok"] for body in bodies)
        ids = await self._run(
            self._append,
            [_lock_key(keys, lock), keys.meta(sid), keys.msg(sid), keys.active(sid)],
            [lock.token, lock.fence, repr(now), total, len(sets) // 2, *sets, len(deletes), *deletes, *tails],
        )
        ids = [str(message_id) for message_id in ids]
        for message, body, message_id in zip(messages, bodies, ids):
            message.update(_id=message_id, _ts=body["_ts"], _tok=body["_tok"])
        return ids

    async def archive_original(self, chat: str, sid: str, message: Message, *, lock: Lock, entry_id: str) -> str:
        """Store ``message`` whole in the session's archive, not in the live transcript; return its id.

        For a message too long to reach the model whole: the live transcript gets an excerpt that
        names this id. Once per ``entry_id``: a retried turn gets the id stored the first time.
        """
        self._read_ahead.pop(chat, None)  # this write outdates a session read ahead
        keys = self.keys(chat)
        check_key_part("session id", sid)
        if isinstance(message, dict) and "_id" in message:
            raise InvalidMessage(f"message is already stored as id {message['_id']!r}")
        now = time.time()
        _body, tail = _prepare_new(message, 0, now)
        message_id = await self._run(
            self._archive_original,
            [_lock_key(keys, lock), keys.meta(sid), keys.msg(sid), keys.archive(sid), keys.original(sid, entry_id)],
            [lock.token, lock.fence, repr(now), ORIGINAL_MARKER_TTL_SECONDS, tail],
        )
        return str(message_id)

    async def active(self, chat: str, sid: str) -> list[Message]:
        """The live transcript in order, read in one round trip.

        A stored entry that is not JSON or not a valid message is quarantined (moved out
        of the active list into the chat's quarantine list with its raw text and the
        reason, meta totals corrected) and the rest is returned; bad data never raises.
        """
        keys = self.keys(chat)
        check_key_part("session id", sid)
        for _attempt in range(self.QUARANTINE_ATTEMPTS):
            reply = await self._run(self._read_active, [keys.meta(sid), keys.active(sid), keys.msg(sid)], [])
            if reply[0] is None:
                raise UnknownSession(f"{chat} has no session {sid!r}")
            version, ids, bodies = reply
            good, bad = _decode_entries(ids, bodies)
            if not bad or await self._quarantine_entries(chat, sid, version, good, bad):
                return good
        log.warning("%s/%s: kept unreadable entries in place; the session changed during every attempt", chat, sid)
        return good

    async def _quarantine_entries(
        self, chat: str, sid: str, version: str, good: list[Message], bad: list[tuple[str, str | None, str]]
    ) -> bool:
        self._read_ahead.pop(chat, None)  # this write outdates a session read ahead
        keys = self.keys(chat)
        now = time.time()
        args: list[Any] = [version, sum(count_message(m) for m in good), repr(now)]
        for message_id, raw, reason in bad:
            record = {"session_id": sid, "id": message_id, "raw": raw, "reason": reason, "ts": now}
            args += [message_id, json_codec.dumps(record)]
        applied = await self._run(self._quarantine, [keys.meta(sid), keys.active(sid), keys.quarantine], args)
        if applied:
            for message_id, _raw, reason in bad:
                log.warning("%s/%s: quarantined message %s: %s", chat, sid, message_id, reason)
        return bool(applied)

    async def quarantine_messages(
        self, chat: str, sid: str, version: int, keep: Sequence[Message], moved: Sequence[Message], reason: str
    ) -> bool:
        """Move stored, well-formed messages that break the transcript (an orphan tool result) out of the
        live list into the quarantine; their bodies stay, so they remain retrievable by id.

        Applies only if the session is still at ``version`` (False otherwise); ``keep`` is the rest.
        """
        self.transcripts.drop(chat)  # the held copy still lists the moved messages
        bad = [(str(m["_id"]), json_codec.dumps({k: v for k, v in m.items() if k != "_id"}).decode(), reason)
               for m in moved]
        return await self._quarantine_entries(chat, sid, str(version), list(keep), bad)

    async def quarantined(self, chat: str) -> list[dict[str, Any]]:
        """Records of entries taken out of active transcripts: session_id, id, raw, reason, ts."""
        records: list[dict[str, Any]] = []
        for raw in await self.redis.lrange(self.keys(chat).quarantine, 0, -1):
            try:
                records.append(json_codec.loads(raw))
            except ValueError:
                records.append({"raw": raw, "reason": "quarantine record is not JSON"})
        return records

    async def get_messages(self, chat: str, sid: str, ids: Iterable[str]) -> list[Message]:
        """Stored messages by id (any version, active or archived), in the order asked.

        Ids the session does not hold, and bodies that cannot be read, are skipped with a warning.
        """
        keys = self.keys(chat)
        check_key_part("session id", sid)
        wanted = [str(message_id) for message_id in ids]
        if not wanted:
            return []
        found: list[Message] = []
        for message_id, raw in zip(wanted, await self.redis.hmget(keys.msg(sid), wanted)):
            message, reason = _decode_stored(message_id, raw)
            if message is None:
                log.warning("%s/%s: cannot return message %s: %s", chat, sid, message_id, reason)
            else:
                found.append(message)
        return found

    async def archive(self, chat: str, sid: str) -> list[Message]:
        """Messages compactions folded away, in archive order, each marked ``active=0, compacted=1``."""
        keys = self.keys(chat)
        check_key_part("session id", sid)
        reply = await self._run(self._read_archive, [keys.meta(sid), keys.archive(sid), keys.msg(sid)], [])
        if reply[0] is None:
            raise UnknownSession(f"{chat} has no session {sid!r}")
        archived: list[Message] = []
        for message_id, raw in zip(*reply):
            message, reason = _decode_stored(message_id, raw)
            if message is None:
                log.warning("%s/%s: archived message %s unreadable: %s", chat, sid, message_id, reason)
                continue
            message["active"] = 0
            message["compacted"] = 1
            archived.append(message)
        return archived

    # ----------------------------------------------------------------- meta

    async def meta(self, chat: str, sid: str) -> SessionMeta:
        """The session's meta in one HGETALL (its size does not depend on the transcript's)."""
        raw = await self.redis.hgetall(self.keys(chat).meta(check_key_part("session id", sid)))
        if not raw:
            raise UnknownSession(f"{chat} has no session {sid!r}")
        return _parse_meta(sid, raw)

    async def update_meta(self, chat: str, sid: str, *, lock: Lock, **fields: Any) -> int:
        """Set meta fields (``None`` clears one) under the lock; return the new version.

        Settable: ``last_prompt_tokens``, ``tokens_at_report``, ``compaction_count``,
        ``previous_summary``, ``engine_state`` (dict), ``usage_totals`` (dict), ``model``,
        ``last_activity_at``, ``last_entry_id``, ``last_reply``, ``replied_entry_id``, ``batch_entry_ids``.
        Token and message totals, ids and versions are the store's own.
        """
        self._read_ahead.pop(chat, None)  # this write outdates a session read ahead
        keys = self.keys(chat)
        check_key_part("session id", sid)
        sets, deletes = _encode_meta_fields(fields, SETTABLE_META_FIELDS)
        version = await self._run(
            self._update_meta,
            [_lock_key(keys, lock), keys.meta(sid)],
            [lock.token, lock.fence, repr(time.time()), len(sets) // 2, *sets, len(deletes), *deletes],
        )
        return int(version)

    # ----------------------------------------------------------------- compaction

    async def commit_compaction(
        self,
        chat: str,
        sid: str,
        new_messages: Sequence[Message],
        *,
        lock: Lock,
        in_place: bool,
        compaction_id: str,
        expected_version: int | None = None,
        meta: Mapping[str, Any] | None = None,
        archive_new: Sequence[Message] = (),
    ) -> CompactionCommit:
        """Replace the session's active transcript with ``new_messages`` in one atomic step.

        Messages carrying an ``_id`` of this session are kept as stored (never re-inserted);
        messages without one are new versions (summary, stubs, edited copies) and get ids.
        In place, every id leaving the active list is appended to the archive and the
        session id stays; rotated (``in_place=False``), a new session linked by
        ``parent_session_id`` takes the new list and the chat's pointer, and the old
        session is left whole (marked with its successor so nothing writes to it again).
        Meta: tokens and count recomputed, ``compaction_count`` + 1, the reported prompt
        usage cleared, then ``meta`` fields applied.

        All checks — lock, ``expected_version``, the chat still pointing at ``sid`` when
        rotating, kept ids, key types — run before the first write, so a refusal leaves
        the old state whole. Committing the same ``compaction_id`` again (for instance
        after the reply was lost) writes nothing and returns the first result with
        ``replayed`` set, but only to a caller that still holds the lock: a holder whose lock
        expired gets :class:`StaleLock` even then, so it never takes another worker's commit
        for its own. On success the new dicts receive their ``_id``, ``_ts`` and ``_tok``.

        ``archive_new`` are messages that were never stored but are not in ``new_messages``
        either — created during a turn and folded by a compaction within it; they are stored
        straight into the archive (of the old session when rotating) so none is lost.
        """
        self._read_ahead.pop(chat, None)  # this write outdates a session read ahead
        keys = self.keys(chat)
        check_key_part("session id", sid)
        if not isinstance(compaction_id, str) or not compaction_id:
            raise ValueError("compaction_id must be a non-empty string")
        if not new_messages:
            raise InvalidMessage("a compaction must leave at least one message")
        sets, deletes = _encode_meta_fields(meta or {}, COMMIT_META_FIELDS)
        now = time.time()
        entries: list[str | bytes] = []
        new_bodies: list[tuple[Message, Message]] = []
        kept: set[str] = set()
        total = 0
        for index, message in enumerate(new_messages):
            message_id = message.get("_id") if isinstance(message, dict) else None
            if message_id is None:
                body, tail = _prepare_new(message, index, now)
                new_bodies.append((message, body))
                entries += ["n", tail]
                total += body["_tok"]
                continue
            try:
                validate_message(message)
            except InvalidMessage as error:
                raise InvalidMessage(f"message {index}: {error}") from error
            if not isinstance(message_id, str) or message_id in kept:
                raise InvalidMessage(f"message {index}: id {message_id!r} is not a unique stored message id")
            kept.add(message_id)
            entries += ["k", message_id]
            total += count_message(message)
        for index, message in enumerate(archive_new):
            if isinstance(message, dict) and "_id" in message:
                raise InvalidMessage(f"archive_new message {index} is stored already as id {message['_id']!r}")
            _body, tail = _prepare_new(message, index, now)
            entries += ["a", tail]
        new_sid = "" if in_place else _new_session_id()
        key_list = [
            _lock_key(keys, lock), keys.session, keys.compaction(compaction_id),
            keys.meta(sid), keys.msg(sid), keys.active(sid), keys.archive(sid),
        ]
        if not in_place:
            key_list += [keys.meta(new_sid), keys.msg(new_sid), keys.active(new_sid), keys.archive(new_sid)]
        args: list[Any] = [
            lock.token, lock.fence, repr(now), "in_place" if in_place else "rotate",
            "" if expected_version is None else int(expected_version), total,
            self.commit_record_ttl_seconds, new_sid, sid,
            len(sets) // 2, *sets, len(deletes), *deletes, *entries,
        ]
        status, record = await self._run(self._commit, key_list, args)
        result = dataclasses.replace(_parse_record(record), replayed=status != "applied")
        new_positions = [i for i, m in enumerate(new_messages) if not (isinstance(m, dict) and "_id" in m)]
        if len(result.active_ids) == len(new_messages):
            for position, (message, body) in zip(new_positions, new_bodies):
                message.update(_id=result.active_ids[position], _ts=body["_ts"], _tok=body["_tok"])
        return result

    # ----------------------------------------------------------------- dedupe

    async def seen(self, chat: str, update_id: str | int, ttl_seconds: int = MIN_SEEN_TTL_SECONDS) -> bool:
        """True the first time a platform update id is offered for the chat, False for a redelivery."""
        if ttl_seconds < MIN_SEEN_TTL_SECONDS:
            raise ValueError(f"dedupe ttl must be at least {MIN_SEEN_TTL_SECONDS} s, got {ttl_seconds}")
        key = self.keys(chat).seen(update_id)
        return bool(await self.redis.set(key, "1", nx=True, ex=int(ttl_seconds)))


def _lock_key(keys: ChatKeys, lock: Lock) -> str:
    """The lock key a write checks; a lock taken for another chat never authorises this one."""
    if lock.chat != keys.chat:
        raise StaleLock(f"lock belongs to chat {lock.chat!r}, not {keys.chat!r}")
    return keys.lock
