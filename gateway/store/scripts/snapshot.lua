-- Read the chat's current session (meta and, if asked, the live transcript) in one round trip.
-- KEYS: 1 session pointer.
-- ARGV: 1 the chat's key base, 2 '1' to include the transcript, 3 held sid, 4 held next_id (the
--   transcript this process holds already, or ''; only newer bodies are sent).
-- Checks nothing beyond what the reads fail on; writes nothing.
-- The session's keys are derived from the pointer inside the script rather than passed as KEYS: the
--   caller does not know the session id before this read. They share the pointer's hash tag, so on a
--   cluster they live on its slot.
-- Returns what read_snapshot returns.
return read_snapshot(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
