-- schedule_done: forget the members a caller of schedule_due appended to the task stream: each
-- leaves its moving set, and a scheduled id that is not scheduled again meanwhile (the same
-- payload back in the scheduled set) loses its payload and its request key's index entry.
--
-- KEYS[1] -> ai:scheduled:{<stage>}:due          zset: scheduled id -> due, Unix ms
-- KEYS[2] -> ai:scheduled:{<stage>}:appending    zset: scheduled id -> taken at, Unix ms
-- KEYS[3] -> ai:scheduled:{<stage>}:tasks        hash: scheduled id -> "<request key> <payload>"
-- KEYS[4] -> ai:scheduled:{<stage>}:moving       zset: payload -> taken at (versions without the index)
-- KEYS[5..] -> ai:scheduled:{<stage>}:key:<key>  the index hashes of the members' request keys
-- ARGV[1..] -> pairs: member, the position in KEYS[5..] of its request key's index (1-based;
--              0 when it has none: a payload member, or an id whose payload was missing)
--
-- Output: the number of members that left a moving set.

local n = 0
for i = 1, #ARGV, 2 do
  local m, k = ARGV[i], tonumber(ARGV[i + 1])
  if string.sub(m, 1, 1) ~= '#' then -- a payload: in its own moving set (or, put there by hand, in ours)
    n = n + redis.call('ZREM', KEYS[4], m) + redis.call('ZREM', KEYS[2], m)
  else
    n = n + redis.call('ZREM', KEYS[2], m)
    if not redis.call('ZSCORE', KEYS[1], m) then
      redis.call('HDEL', KEYS[3], m)
      if k > 0 then redis.call('HDEL', KEYS[4 + k], m) end
    end
  end
end
return n
