-- Move entries that break the live transcript (unreadable bodies, orphan tool results) out of the
-- active list into the chat's quarantine list, so bad data never fails the chat; bodies stay stored.
-- KEYS: 1 meta, 2 active, 3 quarantine.
-- ARGV: 1 version read, 2 token sum of the messages that stay, 3 now, then (id, record) pairs.
-- Checks: the session exists; key types; version is an integer and still the one the caller read
--   (the decision was made on that read; a write since may have changed what is bad).
-- Writes: each id's removal from the active list and its record in the quarantine; tokens, count,
--   updated_at; version + 1. No lock check: any reader may find bad entries, and the version check
--   already refuses it after any other write.
-- Returns 1 when applied, 0 when the session changed since the read.
require_session(KEYS[1])
require_type(KEYS[2], 'list', 'none')
require_type(KEYS[3], 'list', 'none')
require_counters(KEYS[1], 'version')
if redis.call('HGET', KEYS[1], 'version') ~= ARGV[1] then return 0 end
quarantine_ids(KEYS[2], KEYS[3], 4, #ARGV)
mark_rewritten(KEYS[1], KEYS[2], ARGV[2], ARGV[3])
return 1
