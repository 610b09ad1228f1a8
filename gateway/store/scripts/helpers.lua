-- Helpers shared by the store's scripts; the loader (gateway/store/scripts/__init__.py) puts this
-- file in front of every script that uses them, so each script stays one EVAL on one slot.
-- Every check raises (fail) before the calling script's first write: a refused call writes nothing,
-- because Redis does not roll back what a script wrote before an error.
-- Errors are coded 'FG_<KIND> message'; gateway/store/errors.py turns each code into its exception.
local function fail(code, message)
  error({err = code .. ' ' .. message})
end

-- A command on a key of another type fails mid-script (after earlier writes); check first instead.
local function require_type(key, a, b)
  local actual = redis.call('TYPE', key)['ok']
  if actual ~= a and actual ~= b then
    fail('FG_WRONG_TYPE', key .. ' holds a ' .. actual)
  end
  return actual
end

-- The session must exist: writing under an unknown id would create half a session.
local function require_session(meta_key)
  local actual = redis.call('TYPE', meta_key)['ok']
  if actual == 'none' then fail('FG_UNKNOWN_SESSION', meta_key .. ' does not exist') end
  if actual ~= 'hash' then fail('FG_WRONG_TYPE', meta_key .. ' holds a ' .. actual) end
end

-- The caller's token still holds the chat lock: a worker whose lock expired must not write.
local function require_holder(lock_key, token)
  if redis.call('GET', lock_key) ~= token then
    fail('FG_STALE_LOCK', 'the chat lock expired or another worker holds it')
  end
end

-- The fence: the caller holds the lock, and no newer holder has written this session
-- (a holder whose lock expired and was re-taken must not overwrite what came after it).
local function require_lock(lock_key, token, meta_key, fence)
  require_holder(lock_key, token)
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

-- A session a rotating compaction continued elsewhere is read-only: only the newest one is written.
local function require_open(meta_key)
  local successor = redis.call('HGET', meta_key, 'successor_session_id')
  if successor then
    fail('FG_CONFLICT', 'the session was continued in session ' .. successor)
  end
end

-- Move ids out of the live list into the chat's quarantine: ARGV[from], ARGV[from + 2], … up to
-- ``to``, each followed by its quarantine record; an id no longer listed is skipped.
local function quarantine_ids(active_key, quarantine_key, from, to)
  for j = from, to, 2 do
    if redis.call('LREM', active_key, 0, ARGV[j]) > 0 then
      redis.call('RPUSH', quarantine_key, ARGV[j + 1])
    end
  end
end

-- The live list was rewritten in place: its token total, count and time, and a new version.
local function mark_rewritten(meta_key, active_key, tokens, now)
  redis.call('HSET', meta_key, 'tokens', tokens, 'count', redis.call('LLEN', active_key), 'updated_at', now)
  redis.call('HINCRBY', meta_key, 'version', 1)
end

-- HMGET in chunks: unpack() of a long list fails past Lua's stack limit (8000 values).
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
