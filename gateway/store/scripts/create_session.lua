-- Create a session and point the chat at it; record it in the chat's session index.
-- KEYS: 1 session pointer, 2 new meta, 3 lock, [4 parent meta], last: the chat's session index (zset).
-- ARGV: 1 new sid, 2 now, 3 mode ('current' | 'new'), 4 parent sid ('' = none),
--       5 lock token ('' = no lock required).
-- Checks: key types; with a token, that it still holds the lock (a holder whose lock expired must not
--   move the pointer away from what the next holder committed); that the new id is unused.
-- Writes: the new meta (with a parent: its id counter and model carried over, so ids stay unique along
--   the parent chain), the pointer, and the index entry.
-- 'current' returns the existing session instead when the chat has one (two workers racing for a
--   chat's first session agree on one). Returns the chat's session id.
-- The index is written only while it is whole: it exists, or the chat has no session yet. A chat older
-- than the index gets it built once from what is stored (gateway/store/sessions.py), so a partial
-- index is never taken for the full list.
local index = KEYS[#KEYS]
require_type(index, 'zset', 'none')
local whole = redis.call('EXISTS', index) == 1 or redis.call('EXISTS', KEYS[1]) == 0

-- A function, so 'current' can return early and the index step below still sees the result.
local function create()
  require_type(KEYS[1], 'string', 'none')
  if ARGV[5] ~= '' then require_holder(KEYS[3], ARGV[5]) end
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
end

local sid = create()
if whole and sid == ARGV[1] then redis.call('ZADD', index, ARGV[2], sid) end
return sid
