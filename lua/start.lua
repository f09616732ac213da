-- start: the owner moves its flight from PENDING to RUNNING and starts the attempt's clock.
--
-- KEYS[1] -> ai:flight:meta:{K}, KEYS[2] -> ai:flight:result:{K} (unused),
-- KEYS[3] -> ai:flight:fence:{K} (unused), KEYS[4] -> ai:flight:waiters:{K}
-- ARGV[1] -> ownerToken, ARGV[2] -> runningTTL in ms, ARGV[3] -> failureTTL in ms
--
-- Output: { code, status }
--   OK          the flight is RUNNING (also when it already was: start is idempotent)
--   STALE_TOKEN no flight, or another owner's token: nothing changed
--   CANCELLED / EXPIRED   the flight ended meanwhile: nothing changed
--   STATE       any other status (second element): nothing changed

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local runningTTL, failureTTL = tonumber(ARGV[2]), tonumber(ARGV[3])

local m = redis.call('HMGET', KEYS[1], 'status', 'ownerToken')
local status, token = m[1], m[2]
if not status or token ~= ARGV[1] then return { 'STALE_TOKEN', status or '' } end
if status == 'CANCELLED' or status == 'EXPIRED' then return { status, status } end
if status == 'RUNNING' then return { 'OK', status } end
if status ~= 'PENDING' then return { 'STATE', status } end

redis.call('HSET', KEYS[1], 'status', 'RUNNING', 'updatedAt', now, 'heartbeatAt', now,
  'progressAt', now, 'expireAt', now + runningTTL)
redis.call('PEXPIRE', KEYS[1], runningTTL + failureTTL)
if redis.call('EXISTS', KEYS[4]) == 1 then redis.call('PEXPIRE', KEYS[4], runningTTL + failureTTL) end
return { 'OK', 'RUNNING' }
