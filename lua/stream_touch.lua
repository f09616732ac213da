-- stream_touch: a live owner resets the idle time of the task entry it holds, so the entry is
-- never claimed while the owner works on it, however long the model runs.
--
-- KEYS[1] -> task stream ai:tasks:<stage>
-- ARGV[1] -> consumer group, ARGV[2] -> consumer name, ARGV[3] -> entry id
--
-- Output: 1 when the consumer still holds the entry (its idle time is now 0), 0 when another
-- consumer claimed it or it is no longer pending (the caller is a zombie for this entry).

local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if not p[1] or p[1][2] ~= ARGV[2] then return 0 end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'JUSTID')
return 1
