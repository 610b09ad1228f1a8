-- Give back the token each bucket of one hash tag gave to a send that another slot refused.
-- KEYS: the bucket hashes (one hash tag).
-- ARGV: 1 expiry margin ms, then per key: capacity, per_second.
-- Checks: every bucket is read before any is written: a key that cannot be read leaves all of them
--   as they were.
-- Writes: one token more in each bucket that still exists and was not paused since the take (a
--   missing hash is full already; a pause has set the content), capped at its capacity.
-- Returns 0.
local now = clock()
local owed = {}
for i, key in ipairs(KEYS) do
  local a = 2 + (i - 1) * 2
  local capacity, rate = tonumber(ARGV[a]), tonumber(ARGV[a + 1]) / 1000000
  if redis.call('EXISTS', key) == 1 then
    local tokens, ts, blocked = load_bucket(key, capacity, rate, now)
    if ts <= now and blocked <= now then
      owed[#owed + 1] = {key, capacity, rate, math.min(capacity, tokens + 1), blocked}
    end
  end
end
for _, s in ipairs(owed) do save_bucket(s[1], s[2], s[3], now, s[4], now, s[5]) end
return 0
