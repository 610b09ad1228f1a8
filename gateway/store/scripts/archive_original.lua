-- Store one message straight into the archive, not the live transcript: the whole text of a message
-- too long to reach the model, whose excerpt in the transcript names this id.
-- KEYS: 1 lock, 2 meta, 3 msg, 4 archive, 5 marker (remembers the id per inbox entry).
-- ARGV: 1 lock token, 2 fence, 3 now, 4 marker ttl s, 5 body tail (as in append.lua).
-- Checks: the session exists; key types; the lock and fence; the session is open; next_id is an integer.
--   Once per marker: a retried turn gets the id stored the first time instead of a second copy.
-- Writes: the body under a fresh id, the id at the end of the archive, the marker, updated_at and the
--   fence. The active list, totals and version are untouched (the transcript did not change).
-- Returns the message's id.
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
