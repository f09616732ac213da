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

register('start', function()
  local m = redis.call('HMGET', K[1], 'status', 'ownerToken', 'policy')
  local status, token = m[1], m[2]
  if not status then return { 'GONE', '' } end
  if token ~= V[1] then return { 'STALE_TOKEN', status } end
  if status == 'CANCELLED' or status == 'EXPIRED' then return { status, status } end
  if status == 'RUNNING' then return { 'OK', status } end
  if status ~= 'PENDING' then return { 'STATE', status } end

  local _, runningTTL, _, _, failureTTL = pinned({ policy = m[3] }, nil)
  redis.call('HSET', K[1], 'status', 'RUNNING', 'updatedAt', nowStr, 'heartbeatAt', nowStr,
    'expireAt', nowMs() + runningTTL)
  redis.call('HDEL', K[1], 'progressAt')
  redis.call('PEXPIRE', K[1], runningTTL + failureTTL)
  if redis.call('EXISTS', K[4]) == 1 then redis.call('PEXPIRE', K[4], runningTTL + failureTTL) end
  return { 'OK', 'RUNNING' }
end)
