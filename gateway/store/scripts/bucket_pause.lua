-- A platform's 429: the buckets of one hash tag are empty until now + pause for every process, and
-- then hold at most one token (the retried send), never a burst.
-- KEYS: the bucket hashes (one hash tag).
-- ARGV: 1 expiry margin ms, 2 pause in microseconds, then per key: capacity, per_second.
-- Checks: every bucket is read before any is written: a key that cannot be read leaves all of them
--   as they were.
-- Writes: each bucket whose pause ends sooner (a longer pause already set stands): blocked_until,
--   and what it would hold when the pause ends, at most one token.
-- Returns 0.
local now = clock()
local ends = now + tonumber(ARGV[2])
local paused = {}
for i, key in ipairs(KEYS) do
  local a = 3 + (i - 1) * 2
  local capacity, rate = tonumber(ARGV[a]), tonumber(ARGV[a + 1]) / 1000000
  local tokens, ts, blocked = load_bucket(key, capacity, rate, now)
  if ends > blocked then
    -- what the bucket would hold when the pause ends, but never a burst: at most the retried send
    local later = math.min(capacity, tokens + (math.max(ends, ts) - ts) * rate)
    paused[#paused + 1] = {key, capacity, rate, math.min(1, later), math.max(ends, ts)}
  end
end
for _, s in ipairs(paused) do save_bucket(s[1], s[2], s[3], now, s[4], s[5], ends) end
return 0
