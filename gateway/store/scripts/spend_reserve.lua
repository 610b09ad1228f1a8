-- Reserve a model call's worst case against one budget, in one atomic step: two processes serving the
-- same person at once see each other's reservations, so together they overspend by one call at most.
-- KEYS: 1 the period's totals (hash: spent_usd, spent_tokens in micro-dollars and tokens; reserved_usd,
--   reserved_tokens), 2 the period's open reservations (hash: id -> "usd tokens expiry_ms").
-- ARGV: 1 reservation id, 2 worst case in micro-dollars, 3 worst case in tokens, 4 the dollar limit in
--   micro-dollars (-1: none), 5 the token limit (-1: none), 6 now (ms), 7 how long a reservation holds (ms),
--   8 how long the keys are kept (ms: past the period's end).
-- Checks: key types; reservations past their expiry (a process that died between its reservation and its
--   settlement) are let go first.
-- Writes: when the budget has room (spent + reserved below each limit: the call that crosses a limit is the
--   last one admitted), the reservation and the reserved totals; the keys' expiry.
-- Returns {1 admitted or 0 refused, spent_usd, spent_tokens, reserved_usd, reserved_tokens} (before this call).
require_type(KEYS[1], 'hash', 'none')
require_type(KEYS[2], 'hash', 'none')
local now = tonumber(ARGV[6])
local held = redis.call('HGETALL', KEYS[2])
for i = 1, #held, 2 do
  local usd, tokens, expiry = string.match(held[i + 1], '^(%d+) (%d+) (%d+)$')
  if usd == nil or tonumber(expiry) <= now then
    redis.call('HDEL', KEYS[2], held[i])
    if usd ~= nil then
      redis.call('HINCRBY', KEYS[1], 'reserved_usd', 0 - tonumber(usd))
      redis.call('HINCRBY', KEYS[1], 'reserved_tokens', 0 - tonumber(tokens))
    end
  end
end
local function field(name) return tonumber(redis.call('HGET', KEYS[1], name) or '0') or 0 end
local spent_usd, spent_tokens = field('spent_usd'), field('spent_tokens')
local reserved_usd, reserved_tokens = field('reserved_usd'), field('reserved_tokens')
local usd_limit, token_limit = tonumber(ARGV[4]), tonumber(ARGV[5])
local room = (usd_limit < 0 or spent_usd + reserved_usd < usd_limit)
  and (token_limit < 0 or spent_tokens + reserved_tokens < token_limit)
if room then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. string.format('%.0f', now + tonumber(ARGV[7])))
  redis.call('HINCRBY', KEYS[1], 'reserved_usd', ARGV[2])
  redis.call('HINCRBY', KEYS[1], 'reserved_tokens', ARGV[3])
end
redis.call('PEXPIRE', KEYS[1], ARGV[8])
redis.call('PEXPIRE', KEYS[2], ARGV[8])
return {room and 1 or 0, spent_usd, spent_tokens, reserved_usd, reserved_tokens}
