-- Set or clear session meta fields under the chat lock.
-- KEYS: 1 lock, 2 meta.
-- ARGV: 1 lock token, 2 fence, 3 now, 4 n set pairs, pairs..., n delete fields, fields...
-- Checks: the session exists; the lock and fence; the session is open; version is an integer.
-- Writes: the changes, updated_at, the writer's fence, version + 1. Returns the new version.
require_session(KEYS[2])
require_lock(KEYS[1], ARGV[1], KEYS[2], ARGV[2])
require_open(KEYS[2])
require_counters(KEYS[2], 'version')
local sets, dels = read_meta_changes(4)
apply_meta_changes(KEYS[2], sets, dels)
redis.call('HSET', KEYS[2], 'updated_at', ARGV[3], 'fence', ARGV[2])
return redis.call('HINCRBY', KEYS[2], 'version', 1)
