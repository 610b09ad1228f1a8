-- Settle a reservation to what the call really cost, in one atomic step.
-- KEYS: 1 the period's totals, 2 its open reservations (see spend_reserve.lua).
-- ARGV: 1 reservation id, 2 what the call cost in micro-dollars, 3 in tokens, 4 how long the keys are kept (ms).
-- Checks: key types. (Amounts are taken away as 0 - n: a Lua -0 would reach Redis as "-0", which is no integer to it.)
-- Writes: the reservation let go (when it is still held: it may have expired meanwhile), the cost added to spent.
-- Returns {spent_usd, spent_tokens} after it.
require_type(KEYS[1], 'hash', 'none')
require_type(KEYS[2], 'hash', 'none')
local held = redis.call('HGET', KEYS[2], ARGV[1])
if held then
  local usd, tokens = string.match(held, '^(%d+) (%d+)')
  redis.call('HDEL', KEYS[2], ARGV[1])
  if usd ~= nil then
    redis.call('HINCRBY', KEYS[1], 'reserved_usd', 0 - tonumber(usd))
    redis.call('HINCRBY', KEYS[1], 'reserved_tokens', 0 - tonumber(tokens))
  end
end
local spent_usd = redis.call('HINCRBY', KEYS[1], 'spent_usd', ARGV[2])
local spent_tokens = redis.call('HINCRBY', KEYS[1], 'spent_tokens', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return {spent_usd, spent_tokens}
