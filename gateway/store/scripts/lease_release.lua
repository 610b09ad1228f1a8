-- Give a lease up, so another process takes it at once instead of after its expiry.
-- KEYS: 1 lease. ARGV: 1 holder.
-- Checks: that the holder still holds it (never delete another holder's lease).
-- Writes: deletes the lease. Returns 1 when deleted, 0 when the caller did not hold it.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('DEL', KEYS[1])
