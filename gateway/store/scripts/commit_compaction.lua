-- One compaction commit, all or nothing: replace a session's live transcript with the compacted list.
-- KEYS: 1 lock, 2 session pointer, 3 compaction record, 4 meta, 5 msg, 6 active, 7 archive,
--       and when rotating: 8 new meta, 9 new msg, 10 new active, 11 new archive.
-- ARGV: 1 lock token, 2 fence, 3 now, 4 mode ('in_place' | 'rotate'), 5 expected version ('' = any),
--       6 token sum of the new list, 7 record ttl s, 8 new sid, 9 old sid,
--       10 n set pairs, pairs..., n delete fields, fields..., then (kind, value) per message:
--       ('k', id) keeps a stored message, ('n', body tail) stores a new one, ('a', body tail)
--       archives a message that was never stored (created and folded within one turn).
-- Checks, all before the first write so a refusal leaves the old state whole: the lock and fence;
--   key types; the session is open; counters are integers; the expected version; when rotating, that
--   the chat still points at the old session and the new keys are unused; every kept id is stored.
-- Writes, in place: ids leaving the active list are appended to the archive. Rotated: a new session
--   (linked by parent_session_id, inheriting model, summary, guard state and the id counter) takes
--   the new list and the chat's pointer; the old one is left whole and marked with its successor.
--   Either way the target's totals are recomputed, compaction_count + 1, the reported prompt usage
--   cleared, the meta changes applied, and the result recorded under the compaction id.
-- Returns {'applied' | 'replayed', record}; record is "session\nold session\nversion\narchived
--   ids,...\nactive ids,..." (the same answer again when a commit whose reply was lost is retried).
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
