-- A session's outline without its bodies (what /sessions shows): one round trip, no body read.
-- KEYS: 1 meta, 2 active, 3 archive, 4 msg. ARGV: none.
-- Checks: that the session exists. Writes nothing.
-- Returns {active ids, archive ids, each body's length in bytes (active ids first, then archive ids)},
--   or {false} for an unknown session.
if redis.call('EXISTS', KEYS[1]) == 0 then return {false} end
local active = redis.call('LRANGE', KEYS[2], 0, -1)
local archive = redis.call('LRANGE', KEYS[3], 0, -1)
local sizes = {}
for _, id in ipairs(active) do sizes[#sizes + 1] = redis.call('HSTRLEN', KEYS[4], id) end
for _, id in ipairs(archive) do sizes[#sizes + 1] = redis.call('HSTRLEN', KEYS[4], id) end
return {active, archive, sizes}
