-- Take one token from every bucket of one hash tag, or none: a send is granted by all its buckets.
-- KEYS: the bucket hashes (one hash tag).
-- ARGV: 1 expiry margin ms, 2 priority ('final' | 'preview'), then per key: capacity, per_second,
--   preview_reserve.
-- Checks: none before the reads; a refusal writes nothing.
-- Writes: when every bucket can grant, one token less in each (a final needs one token, a preview
--   1 + preview_reserve, so it leaves the finals' reserve behind it).
-- Returns 0 when granted, else the microseconds until all of them could grant.
local now = clock()
local preview = ARGV[2] == 'preview'
local state = {}
local wait = 0
for i, key in ipairs(KEYS) do
  local a = 3 + (i - 1) * 3
  local capacity, rate = tonumber(ARGV[a]), tonumber(ARGV[a + 1]) / 1000000
  -- a final needs one token; a preview must leave the finals' reserve behind it
  local need = 1
  if preview then need = 1 + tonumber(ARGV[a + 2]) end
  local tokens, ts, blocked = load_bucket(key, capacity, rate, now)
  -- the earliest moment this bucket holds `need`: after any pause, plus the refill still missing
  local ready = math.max(ts, blocked) + math.max(0, need - tokens) / rate
  wait = math.max(wait, ready - now)
  state[i] = {capacity, rate, tokens, blocked}
end
-- refused by any bucket: write nothing, answer the longest wait
if wait > 0 then return math.ceil(wait) end
-- granted by all: one token from each (every ts is now, since ready <= now)
for i, key in ipairs(KEYS) do
  local s = state[i]
  save_bucket(key, s[1], s[2], now, s[3] - 1, now, s[4])
end
return 0
