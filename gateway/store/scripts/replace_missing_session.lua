-- Give a chat whose pointer names a session that does not exist (its meta lost or deleted by hand) a
-- new, empty session, so the chat is answered again instead of refused from now on.
-- KEYS: 1 session pointer, 2 missing meta, 3 new meta, 4 the chat's session index.
-- ARGV: 1 missing sid, 2 new sid, 3 now.
-- Checks: key types; that the pointer still names the missing session and that it is still missing
--   (another worker may have replaced it meanwhile); that the new id is unused.
-- Writes: the new meta, the pointer, and the index entry when the index exists. Whatever is stored
--   under the missing id is left as it is.
-- Returns 1 when replaced, 0 when nothing was written.
require_type(KEYS[1], 'string', 'none')
require_type(KEYS[4], 'zset', 'none')
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
if redis.call('EXISTS', KEYS[3]) == 1 then fail('FG_CONFLICT', 'session id collision, retry') end
redis.call('HSET', KEYS[3], 'created_at', ARGV[3], 'updated_at', ARGV[3], 'version', '0',
  'tokens', '0', 'count', '0', 'compaction_count', '0', 'next_id', '0', 'parent_session_id', '')
redis.call('SET', KEYS[1], ARGV[2])
if redis.call('EXISTS', KEYS[4]) == 1 then redis.call('ZADD', KEYS[4], ARGV[3], ARGV[2]) end
return 1
