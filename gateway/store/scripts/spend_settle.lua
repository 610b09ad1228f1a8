-- Settle a reservation to what the call really cost, in one atomic step, once.
-- KEYS: 1 the period's totals, 2 its open reservations (see spend_reserve.lua), 3 the reservations settled (set).
-- ARGV: 1 reservation id, 2 what the call cost in micro-dollars, 3 in tokens, 4 how long the keys are kept (ms),
--   5 '1' to count the whole reservation instead (a call stopped while the provider answered).
-- Checks: key types. (Amounts are taken away as 0 - n: a Lua -0 would reach Redis as "-0", which is no integer to it.)
-- Writes: nothing for a reservation settled before (a settlement sent again counts once); else the reservation let
--   go, the cost added to spent, the id added to the settled set. A reservation that expired meanwhile (its process
--   was slow) is settled all the same.
-- Returns {spent_usd, spent_tokens} after it.
require_type(KEYS[1], 'hash', 'none')
require_type(KEYS[2], 'hash', 'none')
require_type(KEYS[3], 'set', 'none')
if redis.call('SISMEMBER', KEYS[3], ARGV[1]) == 1 then
  return {tonumber(redis.call('HGET', KEYS[1], 'spent_usd') or '0'), tonumber(redis.call('HGET', KEYS[1], 'spent_tokens') or '0')}
end
local usd_cost, token_cost = tonumber(ARGV[2]), tonumber(ARGV[3])
local held = redis.call('HGET', KEYS[2], ARGV[1])
if held then
  local usd, tokens = string.match(held, '^(%d+) (%d+)')
  redis.call('HDEL', KEYS[2], ARGV[1])
  if usd ~= nil then
    redis.call('HINCRBY', KEYS[1], 'reserved_usd', 0 - tonumber(usd))
    redis.call('HINCRBY', KEYS[1], 'reserved_tokens', 0 - tonumber(tokens))
    if ARGV[5] == '1' then usd_cost, token_cost = tonumber(usd), tonumber(tokens) end
  end
end
redis.call('SADD', KEYS[3], ARGV[1])
local spent_usd = redis.call('HINCRBY', KEYS[1], 'spent_usd', usd_cost)
local spent_tokens = redis.call('HINCRBY', KEYS[1], 'spent_tokens', token_cost)
for _, key in ipairs(KEYS) do redis.call('PEXPIRE', key, ARGV[4]) end
return {spent_usd, spent_tokens}
