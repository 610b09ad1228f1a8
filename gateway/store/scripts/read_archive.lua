-- Read a session's archive: the messages compactions folded away, in order.
-- KEYS: 1 meta, 2 archive, 3 msg. ARGV: none. Writes nothing.
-- Returns {ids, bodies} or {false} for an unknown session.
if redis.call('EXISTS', KEYS[1]) == 0 then return {false} end
local ids = redis.call('LRANGE', KEYS[2], 0, -1)
return {ids, hmget_all(KEYS[3], ids)}
