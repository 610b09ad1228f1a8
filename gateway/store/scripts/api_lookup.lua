-- The fast path of finding the session a stateless API request continues (gateway/store/api_sessions.py).
-- KEYS: 1 the API key's chains (hash: chain hash -> '<position>:<session id>'),
--       2 its heads (hash: session id -> position of its latest answered turn).
-- ARGV: 1 the chain hash of the request's history before its new turn (16 raw bytes).
-- Checks: none; it only reads (a key of another type fails the call with WRONGTYPE).
-- Writes: nothing. Returns false for an unknown chain, else {entry, head}: the chain's entry and its
--   session's head ('' when none is recorded), so one round trip tells a request that continues the
--   session from one that resends an earlier point of it (a regenerated or edited turn).
local entry = redis.call('HGET', KEYS[1], ARGV[1])
if not entry then return false end
local sid = string.match(entry, '^%d+:(.*)$') or ''
return {entry, redis.call('HGET', KEYS[2], sid) or ''}
