-- A bucket as every process sees it now, on its server's clock.
-- KEYS: 1 the bucket hash.
-- ARGV: 1 capacity, 2 per_second.
-- Checks: none. Writes: nothing.
-- Returns {the tokens it holds now (as a string: Lua numbers leave as integers), the microseconds
--   until a pause on it ends (0: none)}.
local now = clock()
local tokens, ts, blocked = load_bucket(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]) / 1000000, now)
if ts > now then tokens = 0 end
return {string.format('%.17g', tokens), math.max(0, math.ceil(blocked - now))}
