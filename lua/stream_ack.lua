-- stream_ack: acknowledge task stream entries only while this consumer still holds them.
-- A zombie consumer whose entry was claimed by another consumer must not XACK it away: the
-- new holder may still crash, and then only the pending entry brings the task back.
--
-- KEYS[1] -> task stream ai:tasks:<stage>
-- ARGV[1] -> consumer group, ARGV[2] -> consumer name, ARGV[3..] -> entry ids
--
-- Output: the number of entries acknowledged (entries held by another consumer, or no longer
-- pending, are left alone).

local n = 0
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if p[1] and p[1][2] == ARGV[2] then
    n = n + redis.call('XACK', KEYS[1], ARGV[1], ARGV[i])
  end
end
return n
