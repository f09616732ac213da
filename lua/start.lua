-- start: the owner moves its flight from PENDING to RUNNING and starts the attempt's clock.
-- (Owners that acquire with start set skip it: acquire makes them RUNNING at once.)
--
-- KEYS[1..4] -> the flight keys (lib.lua)
-- ARGV[1] -> ownerToken
--
-- Output: { code, status }
--   OK          the flight is RUNNING (also when it already was: start is idempotent)
--   GONE        no flight: the caller acquires again
--   STALE_TOKEN another owner's token: nothing changed
--   CANCELLED / EXPIRED   the flight ended meanwhile: nothing changed
--   STATE       any other status (second element): nothing changed

local m = redis.call('HMGET', KEYS[1], 'status', 'ownerToken', 'runningTTL', 'failureTTL')
local status, token = m[1], m[2]
if not status then return { 'GONE', '' } end
if token ~= ARGV[1] then return { 'STALE_TOKEN', status } end
if status == 'CANCELLED' or status == 'EXPIRED' then return { status, status } end
if status == 'RUNNING' then return { 'OK', status } end
if status ~= 'PENDING' then return { 'STATE', status } end

local runningTTL, failureTTL = num(m[3], 120000), num(m[4], 60000)
redis.call('HSET', KEYS[1], 'status', 'RUNNING', 'updatedAt', now, 'heartbeatAt', now,
  'progressAt', now, 'expireAt', now + runningTTL)
redis.call('PEXPIRE', KEYS[1], runningTTL + failureTTL)
if redis.call('EXISTS', KEYS[4]) == 1 then redis.call('PEXPIRE', KEYS[4], runningTTL + failureTTL) end
return { 'OK', 'RUNNING' }
