-- Store a repair of the live transcript, so the next read finds it whole and repairs nothing again:
-- stand-in results for tool calls whose result was never stored go in right after the message
-- they follow, and orphan tool results move to the chat's quarantine (their bodies stay stored).
-- KEYS: 1 meta, 2 msg, 3 active, 4 quarantine.
-- ARGV: 1 version read, 2 token sum of the live transcript after the repair, 3 now, 4 n moved,
--   n (id, quarantine record) pairs, then per placement: the id it goes after, the id read right
--   after that one ('' when it was the last), k, then k body tails (as in append.lua).
-- Checks, all before the first write: the session exists; key types; counters; the session is open
--   and still at the version the caller read (the repair was worked out on that read); each
--   placement's id is in the active list and still followed by the id the caller read after it.
-- Writes: each stand-in under a fresh id, inserted in order after its placement's id; each moved id
--   out of the active list and its record into the quarantine; tokens, count, updated_at; version + 1.
--   No lock check, as for the quarantine: the version check refuses it after any other write.
-- Returns the stand-ins' new ids in order, or false (nothing written) when the session changed.
require_session(KEYS[1])
require_type(KEYS[2], 'hash', 'none')
require_type(KEYS[3], 'list', 'none')
require_type(KEYS[4], 'list', 'none')
require_counters(KEYS[1], 'version', 'next_id')
if redis.call('HGET', KEYS[1], 'version') ~= ARGV[1] then return false end
if redis.call('HEXISTS', KEYS[1], 'successor_session_id') == 1 then return false end

local moved_from, placements_from = 5, 5 + 2 * tonumber(ARGV[4])

-- Where each id sits now (its first place: LINSERT pivots on the first match too).
local active = redis.call('LRANGE', KEYS[3], 0, -1)
local position = {}
for index, id in ipairs(active) do
  if not position[id] then position[id] = index end
end

-- 1. Every placement still fits the list the caller read.
local i = placements_from
while i <= #ARGV do
  local at = position[ARGV[i]]
  if not at or (active[at + 1] or '') ~= ARGV[i + 1] then return false end
  i = i + 3 + tonumber(ARGV[i + 2])
end

-- 2. The stand-ins, each right after the one before it (the first after the placement's id).
local ids = {}
i = placements_from
while i <= #ARGV do
  local pivot, count = ARGV[i], tonumber(ARGV[i + 2])
  for j = i + 3, i + 2 + count do
    local id = fresh_id(KEYS[1], {KEYS[2]})
    redis.call('HSET', KEYS[2], id, '{"_id":"' .. id .. '",' .. ARGV[j])
    redis.call('LINSERT', KEYS[3], 'AFTER', pivot, id)
    ids[#ids + 1] = id
    pivot = id
  end
  i = i + 3 + count
end

-- 3. The orphans out of the live list, into the quarantine.
quarantine_ids(KEYS[3], KEYS[4], moved_from, placements_from - 1)

mark_rewritten(KEYS[1], KEYS[3], ARGV[2], ARGV[3])
return ids
