-- Keep a model's window that a context-length refusal taught, unless a smaller one is known already.
-- KEYS: 1 learned windows (hash: endpoint|model -> tokens). ARGV: 1 field, 2 tokens.
-- Checks: only ever lowers a window (two processes learning at once keep the smaller figure).
-- Writes: the field. Returns the window now kept.
local known = tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
local taught = tonumber(ARGV[2])
if known and known <= taught then return known end
redis.call('HSET', KEYS[1], ARGV[1], taught)
return taught
