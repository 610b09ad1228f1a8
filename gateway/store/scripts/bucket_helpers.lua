-- Helpers shared by the send budget's token-bucket scripts (bucket_*.lua); the loader puts this file
-- in front of each of them, so each stays one EVAL on the slot of its buckets' one hash tag.
-- Times are microseconds of the server clock (exact in a double until the year 2255), so processes
-- with skewed clocks agree. A bucket hash holds `tokens` as of `ts`, and `blocked_until`.
-- ARGV[1] of every script that writes is the expiry margin in ms (see save_bucket).
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- The bucket's tokens as of ts (ts >= now), and its blocked_until. A missing hash is a full bucket.
local function load_bucket(key, capacity, rate, now)
  local h = redis.call('HMGET', key, 'tokens', 'ts', 'blocked_until')
  local tokens, ts, blocked = tonumber(h[1]), tonumber(h[2]), tonumber(h[3]) or 0
  if not tokens or not ts then return capacity, now, blocked end
  -- a lowered capacity applies at once
  tokens = math.min(tokens, capacity)
  -- refill for the time since the last write; ts in the future is a pause, refilling from then on
  if ts < now then
    tokens = math.min(capacity, tokens + (now - ts) * rate)
    ts = now
  end
  return tokens, ts, blocked
end

local function save_bucket(key, capacity, rate, now, tokens, ts, blocked)
  redis.call('HSET', key, 'tokens', string.format('%.17g', tokens), 'ts', string.format('%.0f', ts),
    'blocked_until', string.format('%.0f', blocked))
  -- once full (and unpaused) the hash reads like a missing one: let it expire a little after that
  local full_at = math.max(ts, blocked) + (capacity - tokens) / rate
  redis.call('PEXPIRE', key, string.format('%.0f', math.ceil((full_at - now) / 1000) + ARGV[1]))
end
