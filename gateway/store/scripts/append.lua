-- Append a turn's messages to the live transcript and set its meta changes, all in one atomic step
-- (a turn's messages and its bookkeeping land together or not at all).
-- KEYS: 1 lock, 2 meta, 3 msg, 4 active.
-- ARGV: 1 lock token, 2 fence, 3 now, 4 token sum of the messages, 5 n set pairs, pairs...,
--   n delete fields, fields..., then one body tail per message.
-- A body tail is the message's JSON without its opening brace; the script prefixes {"_id":"<id>",
--   so the id assigned here lands in the stored body without re-encoding JSON in Lua.
-- Checks: the session exists; key types; the lock and fence; the session is open; every counter it
--   adds to holds an integer.
-- Writes: each body under a fresh id and the id at the end of the active list; the meta changes;
--   tokens, count and version; updated_at, last_activity_at and the writer's fence (so an older
--   holder is refused from now on). Returns the new ids in order.
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
