-- Read a session's live transcript with the version it was read at (a quarantine of unreadable
-- entries applies only if nothing wrote since).
-- KEYS: 1 meta, 2 active, 3 msg. ARGV: none. Writes nothing.
-- Returns {version, ids, bodies} or {false} for an unknown session.
local version = redis.call('HGET', KEYS[1], 'version')
if not version then return {false} end
local ids = redis.call('LRANGE', KEYS[2], 0, -1)
return {version, ids, hmget_all(KEYS[3], ids)}
