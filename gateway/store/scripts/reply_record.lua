-- Record what a reply has put on the platform (a message id at a position, the text it shows, the
-- finals delivered), for the attempt that follows a crash.
-- KEYS: 1 the chat lock, 2 the reply's hash.
-- ARGV: 1 lock token, 2 ttl ms, 3... field, value pairs.
-- Checks: the caller holds the chat lock (a stale worker's late write would mislead the next
--   attempt); the reply's key type.
-- Writes: the pairs, and the hash's expiry (ttl after this write).
-- Returns 1.
require_holder(KEYS[1], ARGV[1])
require_type(KEYS[2], 'hash', 'none')
redis.call('HSET', KEYS[2], unpack(ARGV, 3))
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 1
