-- Point the chat at one of its stored sessions (/resume).
-- KEYS: 1 lock, 2 session pointer, 3 target meta.
-- ARGV: 1 lock token, 2 fence, 3 target sid.
-- Checks: key types; that the target exists; the lock and fence (as every write); that the target is
--   open (a session a rotating compaction continued is never written to again, so never resumed).
-- Writes: the pointer only; the session it leaves stays as it is. Returns the target sid.
require_type(KEYS[2], 'string', 'none')
require_session(KEYS[3])
require_lock(KEYS[1], ARGV[1], KEYS[3], ARGV[2])
require_open(KEYS[3])
redis.call('SET', KEYS[2], ARGV[3])
return ARGV[3]
