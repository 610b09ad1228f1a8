-- Keep a lease the caller holds for another span.
-- KEYS: 1 lease. ARGV: 1 holder, 2 milliseconds.
-- Checks: that the holder still holds it (a lease that expired and was taken is not taken back).
-- Writes: the lease's expiry. Returns 1 when renewed, 0 when the caller no longer holds it.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])
