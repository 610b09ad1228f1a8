-- Take a chat's lock (acquire_lock), or take it and pick up the chat's next inbox entry together with
-- the session that entry will be answered from (claim): the claim step then costs one round trip.
-- KEYS: 1 lock, 2 fence counter, [3 inbox, [4 session pointer]].
-- ARGV: 1 new lock token, 2 ttl ms, [3 the chat's key base, 4 held sid, 5 held next_id] (the
--   transcript this process holds already, so read_snapshot sends only what is newer).
-- Checks: that nobody holds the lock; the reads run before the writes, so one that fails (a key of the
--   wrong type) does not leave a lock nobody holds.
-- Writes: the fence counter + 1 (every holder's fence is larger than every earlier holder's) and the
--   lock with its expiry.
-- Returns {fence, head of the inbox or false, the session read ahead (as read_snapshot) or false}, or
--   nil when the lock is held. The session is read ahead only with its pointer and a head to handle.
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
local head = false
if KEYS[3] then head = redis.call('LINDEX', KEYS[3], 0) end
local ahead = false
if head and KEYS[4] then ahead = read_snapshot(KEYS[4], ARGV[3], '1', ARGV[4], ARGV[5]) end
local fence = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {fence, head, ahead}
