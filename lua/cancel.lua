-- cancel: anyone cancels an active flight; the owner's next heartbeat aborts its run.
--
-- KEYS[1] -> ai:flight:meta:{K}, KEYS[2..3] unused, KEYS[4] -> ai:flight:waiters:{K}
-- ARGV[1] -> reason (free text, stored as the error), ARGV[2] -> failureTTL in ms
--
-- Output: { code, ownerTaskId, parked task ids... }
--   OK          the flight is CANCELLED with TTL failureTTL (also when it already was); the
--               caller publishes the parked ids' events; the owner answers its own task
--   NOT_FOUND   no flight for this key
--   STATE       the flight already ended (SUCCEEDED, FAILED, EXPIRED; second element)

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local failureTTL = tonumber(ARGV[2])

local m = redis.call('HMGET', KEYS[1], 'status', 'taskId')
local status = m[1]
if not status then return { 'NOT_FOUND', '' } end
if status ~= 'PENDING' and status ~= 'RUNNING' and status ~= 'CANCELLED' then
  return { 'STATE', status }
end
if status ~= 'CANCELLED' then
  redis.call('HSET', KEYS[1], 'status', 'CANCELLED', 'updatedAt', now, 'retryable', '0',
    'errorType', 'cancelled', 'errorCode', 'cancelled', 'error', ARGV[1], 'cancelReason', ARGV[1])
  redis.call('PEXPIRE', KEYS[1], failureTTL)
  redis.call('PEXPIRE', KEYS[4], failureTTL)
end
local out = { 'OK', m[2] or '' }
for _, id in ipairs(redis.call('HKEYS', KEYS[4])) do out[#out + 1] = id end
return out
