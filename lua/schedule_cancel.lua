-- schedule_cancel: remove the tasks of one request key from its stage's scheduled set, through
-- the key's index: only that key's members are read. A task the schedule loop is appending
-- (in the appending set) is not removed from there; its payload stays for the loop.
--
-- KEYS[1] -> ai:scheduled:{<stage>}:due          zset: scheduled id -> due, Unix ms
-- KEYS[2] -> ai:scheduled:{<stage>}:appending    zset: scheduled id -> taken at, Unix ms
-- KEYS[3] -> ai:scheduled:{<stage>}:tasks        hash: scheduled id -> "<request key> <payload>"
-- KEYS[4] -> ai:scheduled:{<stage>}:key:<key>    hash: scheduled id -> task id (the key's index)
-- KEYS[5] -> ai:scheduled:{<stage>}              zset: payload -> due (versions without the index)
--
-- Output: { legacy, payload, ... }: legacy is the number of members KEYS[5] holds (payloads of
-- a version without the index, which the caller looks through for the key's), then the
-- payload of every task removed by this call.

local out = { redis.call('ZCARD', KEYS[5]) }
for _, id in ipairs(redis.call('HKEYS', KEYS[4])) do
  local removed = redis.call('ZREM', KEYS[1], id)
  local v = redis.call('HMGET', KEYS[3], id)[1]
  if not redis.call('ZSCORE', KEYS[2], id) then
    redis.call('HDEL', KEYS[3], id)
    redis.call('HDEL', KEYS[4], id)
  end
  if removed == 1 and v then
    local sp = string.find(v, ' ', 1, true)
    if sp then out[#out + 1] = string.sub(v, sp + 1) end
  end
end
return out
