-- stream_touch: a consumer keeps custody of the task entries it holds (running, or waiting in
-- the process for a later attempt): it resets their idle time, so that no other consumer
-- claims them while it is alive; or, on shutdown, it hands them over by making them look idle
-- for long, so that the others claim them at once. Entries another consumer claimed meanwhile,
-- or that are no longer pending, are left alone and reported: as lost when the stream still
-- has them (acknowledged, or claimed), as gone when it does not (Redis lost them with its data,
-- or they were acknowledged and trimmed since: the caller decides).
--
-- KEYS[1] -> task stream ai:tasks:<stage>
-- ARGV[1] -> consumer group, ARGV[2] -> consumer name
-- ARGV[3] -> idle time to set in ms: 0 touches, a large value hands over
-- ARGV[4..] -> entry ids
--
-- Output: { kept, nLost, lost ids..., gone ids... }: kept counts the entries touched; the
-- nLost lost ids are held by another consumer or acknowledged; the rest are gone from the
-- stream. A missing group answers { -1 }.

local keep, lost, gone = {}, {}, {}
for i = 4, #ARGV do
  local ok, q = pcall(redis.call, 'XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if not ok then return { -1 } end
  if q[1] and q[1][2] == ARGV[2] then
    keep[#keep + 1] = ARGV[i]
  elseif q[1] or #redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i]) > 0 then
    lost[#lost + 1] = ARGV[i]
  else
    gone[#gone + 1] = ARGV[i]
  end
end
for i = 1, #keep, 100 do
  local args = { 'XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0 }
  for j = i, math.min(i + 99, #keep) do args[#args + 1] = keep[j] end
  args[#args + 1] = 'IDLE'
  args[#args + 1] = ARGV[3]
  args[#args + 1] = 'JUSTID'
  redis.call(unpack(args))
end
local out = { #keep, #lost }
for _, id in ipairs(lost) do out[#out + 1] = id end
for _, id in ipairs(gone) do out[#out + 1] = id end
return out
