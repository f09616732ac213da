-- schedule_due: take the due members of a stage's scheduled set for appending to its task
-- stream. The caller appends each to the stream, then removes it from the moving set.
--
-- KEYS[1] -> ai:scheduled:{<stage>}         zset: task payload -> due, Unix ms
-- KEYS[2] -> ai:scheduled:{<stage>}:moving  zset: task payload -> taken at, Unix ms
-- ARGV[1] -> most members to take
-- ARGV[2] -> ms after which a member still in the moving set was left there by a caller that
--            died before removing it: it is put back as due now (appended again at least once)
--
-- Output: the members taken (moved to the moving set, scored with Redis time).

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit = tonumber(ARGV[1])
local stuck = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[2]), 'LIMIT', 0, limit)
for _, m in ipairs(stuck) do
  redis.call('ZREM', KEYS[2], m)
  redis.call('ZADD', KEYS[1], 'NX', now, m) -- a newer schedule of the same task keeps its time
end
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, limit)
for _, m in ipairs(due) do
  redis.call('ZREM', KEYS[1], m)
  redis.call('ZADD', KEYS[2], now, m)
end
return due
