-- Take a platform update into the chat's inbox once: mark its update id seen and queue the entry;
-- an update id taken in before (the platform's redelivery) changes nothing.
-- KEYS: 1 seen marker, 2 inbox.
-- ARGV: 1 dedupe ttl seconds, 2 entry JSON.
-- Checks: both keys' types, before the marker is set: a marker set for a push that then failed
--   would answer the platform's retry "duplicate" for a message never stored.
-- Writes: the marker (NX, expiring after the ttl) and the entry at the end of the inbox.
-- Returns 1 when the entry was queued, 0 for a duplicate.
require_type(KEYS[1], 'string', 'none')
require_type(KEYS[2], 'list', 'none')
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then return 0 end
redis.call('RPUSH', KEYS[2], ARGV[2])
return 1
