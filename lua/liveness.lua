-- liveness: a consumer process records that it is alive, and forgets long-dead ones.
--
-- KEYS[1] -> ai:consumers:<group> (hash: process name -> last beat, Unix ms from Redis TIME)
-- ARGV[1] -> process name
-- ARGV[2] -> forget ms: fields older than this are deleted
--
-- Output: Redis time of this beat in Unix ms.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local forget = tonumber(ARGV[2])
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if now - (tonumber(all[i + 1]) or 0) > forget then redis.call('HDEL', KEYS[1], all[i]) end
end
redis.call('HSET', KEYS[1], ARGV[1], now)
return now
