-- Release the caller's chat lock; with the inbox key, only when no entry is waiting (release_if_idle):
-- then the lock is kept and the waiting entry returned, so the holder answers it without letting
-- another worker take the chat in between.
-- KEYS: 1 lock, [2 inbox]. ARGV: 1 lock token.
-- Checks: that the token still holds the lock (never delete another holder's lock).
-- Writes: deletes the lock. Returns 1 when deleted, 0 when the caller did not hold it, or the inbox's
--   head when one is waiting.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if KEYS[2] then
  local head = redis.call('LINDEX', KEYS[2], 0)
  if head then return head end
end
redis.call('DEL', KEYS[1])
return 1
