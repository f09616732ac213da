-- stream_touch: a live owner resets the idle time of the task entry it holds, so the entry is
-- never claimed while the owner works on it, however long the model runs.
--
-- KEYS[1] -> task stream ai:tasks:<stage>
-- ARGV[1] -> consumer group, ARGV[2] -> consumer name, ARGV[3] -> entry id
--
-- Output:
--    1  the consumer holds the entry; its idle time is now 0
--    0  another consumer holds it (it was claimed): the caller is a zombie for this entry
--   -1  it is no longer pending but still in the stream: somebody acknowledged it
--    2  it is not in the stream at all (trimmed, or lost with a Redis restart): nobody else
--       can hold it either, so the caller carries on with its delivery
-- A missing group (also lost with a restart) counts as 2.

local ok, p = pcall(redis.call, 'XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if not ok then return 2 end
if p[1] then
  if p[1][2] ~= ARGV[2] then return 0 end
  redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'JUSTID')
  return 1
end
if #redis.call('XRANGE', KEYS[1], ARGV[3], ARGV[3]) > 0 then return -1 end
return 2
