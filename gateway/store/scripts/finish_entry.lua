-- Finish a handled inbox entry: record its meta (e.g. that its reply went out), take it off the inbox,
-- and read the session ahead for the next entry, so that entry's snapshot costs no round trip.
-- KEYS: 1 lock, 2 meta, 3 inbox, 4 session pointer.
-- ARGV: 1 lock token, 2 fence, 3 entry, 4 n set pairs, pairs..., n delete fields, fields...,
--   then the chat's key base (empty: read nothing ahead), held sid, held next_id (as for read_snapshot).
-- Checks: the session exists; the lock and fence; the version counter is an integer; the inbox is a
--   list; check_snapshot's key types (its reads come after the writes here and must not fail there).
-- Writes: the meta changes (version + 1 when there are any) and the entry's removal (LPOP when it is
--   the head, as it nearly always is; LREM otherwise).
-- Returns {next head or false, the session read ahead (as read_snapshot) or false}.
require_session(KEYS[2])
require_lock(KEYS[1], ARGV[1], KEYS[2], ARGV[2])
require_counters(KEYS[2], 'version')
require_type(KEYS[3], 'list', 'none')
local sets, dels, i = read_meta_changes(4)
local ahead = ARGV[i] ~= ''  -- an empty key base: the next entry is finished too, so nothing is read ahead
if ahead then check_snapshot(KEYS[4], ARGV[i]) end
apply_meta_changes(KEYS[2], sets, dels)
if #sets + #dels > 0 then redis.call('HINCRBY', KEYS[2], 'version', 1) end
if redis.call('LINDEX', KEYS[3], 0) == ARGV[3] then
  redis.call('LPOP', KEYS[3])
else
  redis.call('LREM', KEYS[3], 1, ARGV[3])
end
local head = redis.call('LINDEX', KEYS[3], 0)
if not head or not ahead then return {head or false, false} end
return {head, read_snapshot(KEYS[4], ARGV[i], '1', ARGV[i + 1], ARGV[i + 2])}
