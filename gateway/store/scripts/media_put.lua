-- Keep one item's bytes under its content hash, within the chat's byte allowance, in one atomic step
-- (two processes storing the same photo, or filling the allowance at once, cannot overcount or overdraw it).
-- KEYS: 1 the item's hash, 2 the chat's held set (sha -> when its bytes were stored, strictly increasing), 3 the chat's byte total.
-- ARGV: 1 sha, 2 the bytes, 3 mime, 4 name, 5 file id, 6 now (ms), 7 the chat's allowance in bytes,
--   8 the prefix of every item key ('<base>:media:'), to name the items whose bytes it drops (they carry the
--   chat's hash tag, so on a cluster they live on this slot). Those keys are not in KEYS, as in
--   snapshot.lua: which items go is known only inside the step; a proxy that demands every key be declared
--   would refuse this script.
-- Checks: key types, of the items it would drop too; the total holds an integer; the bytes fit the allowance at all.
-- Writes: bytes already held: the item's mime, name and file id (the newest handle) and its place in the held set,
--   moved to now; nothing else. Otherwise, first the oldest held items' bytes are dropped until the new ones fit
--   (each keeps its hash: mime, name, file id, size, and gets dropped_at), then the item's hash, its place, the total.
-- Returns {1 when its bytes were already held else 0, the sha of each item whose bytes were dropped, ...}.
require_type(KEYS[1], 'hash', 'none')
require_type(KEYS[2], 'zset', 'none')
require_type(KEYS[3], 'string', 'none')
local total = redis.call('GET', KEYS[3]) or '0'
if not string.match(total, '^%d+$') then fail('FG_WRONG_TYPE', KEYS[3] .. ' is not a byte count: ' .. total) end
total = tonumber(total)
local size, allowance = #ARGV[2], tonumber(ARGV[7])
if size > allowance then
  fail('FG_TOO_LARGE', 'the item takes ' .. size .. ' bytes, more than the chat may keep (' .. allowance .. ')')
end

-- Its place in the held set: now, or just after the newest place when items come faster than the clock
-- ticks, so the order of dropping is the order of storing.
local newest = redis.call('ZREVRANGE', KEYS[2], 0, 0, 'WITHSCORES')[2]
local place = math.max(tonumber(ARGV[6]), (tonumber(newest) or 0) + 1)
place = string.format('%.0f', place)

if redis.call('HEXISTS', KEYS[1], 'data') == 1 then
  redis.call('HSET', KEYS[1], 'mime', ARGV[3], 'name', ARGV[4], 'file_id', ARGV[5])
  redis.call('ZADD', KEYS[2], place, ARGV[1])
  return {1}
end

-- Which items give way, oldest first: all read and checked before the first write.
local dropping, freed, rank = {}, 0, 0
while total - freed + size > allowance do
  local oldest = redis.call('ZRANGE', KEYS[2], rank, rank)[1]
  if not oldest then break end  -- the set is empty: the total had drifted (keys deleted by hand)
  local key = ARGV[8] .. oldest
  require_type(key, 'hash', 'none')
  dropping[#dropping + 1] = oldest
  freed = freed + (tonumber(redis.call('HSTRLEN', key, 'data')) or 0)
  rank = rank + 1
end

local result = {0}
for _, sha in ipairs(dropping) do
  local key = ARGV[8] .. sha
  if redis.call('HDEL', key, 'data') == 1 then redis.call('HSET', key, 'dropped_at', ARGV[6]) end
  redis.call('ZREM', KEYS[2], sha)
  result[#result + 1] = sha
end
total = total - freed
if total < 0 or redis.call('ZCARD', KEYS[2]) == 0 then total = 0 end
redis.call('HSET', KEYS[1], 'data', ARGV[2], 'mime', ARGV[3], 'name', ARGV[4], 'file_id', ARGV[5],
  'bytes', string.format('%.0f', size), 'stored_at', ARGV[6])
redis.call('HDEL', KEYS[1], 'dropped_at')
redis.call('ZADD', KEYS[2], place, ARGV[1])
redis.call('SET', KEYS[3], string.format('%.0f', total + size))
return result
