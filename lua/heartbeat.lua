-- heartbeat: the owner proves it is alive and, optionally, that its model call made progress.
--
-- KEYS[1] -> ai:flight:meta:{K}, KEYS[2..3] unused, KEYS[4] -> ai:flight:waiters:{K}
-- ARGV[1] -> ownerToken
-- ARGV[2] -> progress: an opaque counter from the model adapter ("" = not reported);
--            progressAt moves to now when it differs from the stored value
-- ARGV[3] -> stallTimeout in ms (0 = off)
-- ARGV[4] -> failureTTL in ms (the meta's TTL once it is EXPIRED)
--
-- Output: { code, status }
--   OK          heartbeatAt = now; keep running
--   CANCELLED   the flight was cancelled: abort the model call
--   EXPIRED     runningTTL is spent or progress stalled: the flight is now EXPIRED; abort, and
--               re-acquire if attempts are left
--   STALE_TOKEN another owner holds the flight (or it is gone): abort, write nothing
--   STATE       any other status (second element)

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local stall, failureTTL = tonumber(ARGV[3]), tonumber(ARGV[4])

local m = redis.call('HMGET', KEYS[1], 'status', 'ownerToken', 'progress', 'progressAt', 'expireAt')
local status, token = m[1], m[2]
if not status or token ~= ARGV[1] then return { 'STALE_TOKEN', status or '' } end
if status == 'CANCELLED' or status == 'EXPIRED' then return { status, status } end
if status ~= 'PENDING' and status ~= 'RUNNING' then return { 'STATE', status } end

local progressAt = tonumber(m[4] or '0') or 0
if ARGV[2] ~= '' and ARGV[2] ~= m[3] then
  progressAt = now
  redis.call('HSET', KEYS[1], 'progress', ARGV[2], 'progressAt', now)
end
redis.call('HSET', KEYS[1], 'heartbeatAt', now, 'updatedAt', now)

local code = nil
if now > (tonumber(m[5] or '0') or 0) then
  code = 'running_ttl'
elseif stall > 0 and status == 'RUNNING' and now - progressAt > stall then
  code = 'stalled'
end
if code then
  redis.call('HSET', KEYS[1], 'status', 'EXPIRED', 'retryable', '1', 'errorType', 'expired',
    'errorCode', code, 'error', 'owner heartbeat found the flight ' .. code)
  redis.call('PEXPIRE', KEYS[1], failureTTL)
  redis.call('PEXPIRE', KEYS[4], failureTTL)
  return { 'EXPIRED', 'EXPIRED' }
end
return { 'OK', status }
