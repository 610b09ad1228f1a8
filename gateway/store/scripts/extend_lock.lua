-- Extend the caller's chat lock: its expiry is replaced by ttl ms from when Redis runs this.
-- KEYS: 1 lock. ARGV: 1 lock token, 2 ttl ms.
-- Checks: that the token still holds the lock; a lost lock is never re-taken here (its holder must
--   start over under a new lock and fence).
-- Writes: the lock's expiry. Returns 1 when the caller still held the lock, else 0.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
