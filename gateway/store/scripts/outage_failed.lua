-- Count a failed try of a chat whose model provider is away, in the chat's outage record, so every
-- process agrees on when the outage began (the one notice, the bound) and on how many tries failed.
-- KEYS: 1 the chat's outage record (hash: since, last, tries).
-- ARGV: 1 now, 2 when the failed try began, 3 seconds after which the last failure belongs to an
--   earlier outage, 4 ttl seconds.
-- Checks: none (the record is written by this script alone).
-- Writes: a new record (since = now) when there is none or its last failure is older than ARGV[3]
--   before this try began; tries + 1; last = now; the record's expiry.
-- Returns {since, tries}.
local last = tonumber(redis.call('HGET', KEYS[1], 'last') or '0')
if last == 0 or tonumber(ARGV[2]) - last > tonumber(ARGV[3]) then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'since', ARGV[1])
end
local tries = redis.call('HINCRBY', KEYS[1], 'tries', 1)
redis.call('HSET', KEYS[1], 'last', ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return {redis.call('HGET', KEYS[1], 'since'), tries}
