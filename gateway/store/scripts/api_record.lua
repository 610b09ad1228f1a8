-- Record an answered turn of an API session: the conversation as its client will resend it, and how far
-- the session has got (gateway/store/api_sessions.py).
-- KEYS: 1 the API key's chains (hash: chain hash -> '<position>:<session id>'),
--       2 its heads (hash: session id -> position of its latest answered turn).
-- ARGV: 1 the chain hash of the request's messages plus the reply (16 raw bytes), 2 that position,
--       3 the session id.
-- Checks: both keys are hashes (or absent), before the first write (helpers.lua: FG_WRONG_TYPE).
-- Writes: the chain's entry (a conversation two sessions reached alike goes to the one recorded last);
--   the session's head, unless a later position is recorded already (a late record of an older turn
--   never moves it back). Returns the session's head.
require_type(KEYS[1], 'hash', 'none')
require_type(KEYS[2], 'hash', 'none')
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ':' .. ARGV[3])
local head = tonumber(redis.call('HGET', KEYS[2], ARGV[3]))
local position = tonumber(ARGV[2])
if head and head >= position then return head end
redis.call('HSET', KEYS[2], ARGV[3], ARGV[2])
return position
