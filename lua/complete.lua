-- complete: the owner stores its result; the flight becomes SUCCEEDED.
--
-- KEYS[1] -> ai:flight:meta:{K}, KEYS[2] -> ai:flight:result:{K},
-- KEYS[3] -> ai:flight:fence:{K} (unused), KEYS[4] -> ai:flight:waiters:{K}
-- ARGV[1] -> ownerToken, ARGV[2] -> result bytes, ARGV[3] -> resultTTL in ms
--
-- Output: { code, status, parked task ids... }
--   OK          result written (TTL resultTTL), meta SUCCEEDED with TTL resultTTL; the parked
--               ids follow: the caller publishes their events, then removes them (SREM)
--   STALE_TOKEN another owner holds the flight (or it is gone): nothing written
--   CANCELLED / EXPIRED   the flight ended meanwhile: nothing written
--   STATE       the flight is not RUNNING (second element): nothing written

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local resultTTL = tonumber(ARGV[3])

local m = redis.call('HMGET', KEYS[1], 'status', 'ownerToken')
local status, token = m[1], m[2]
if not status or token ~= ARGV[1] then return { 'STALE_TOKEN', status or '' } end
if status == 'CANCELLED' or status == 'EXPIRED' then return { status, status } end
if status ~= 'RUNNING' then return { 'STATE', status } end

redis.call('SET', KEYS[2], ARGV[2], 'PX', resultTTL)
redis.call('HSET', KEYS[1], 'status', 'SUCCEEDED', 'updatedAt', now, 'resultRef', KEYS[2],
  'retryable', '', 'errorType', '', 'errorCode', '', 'error', '')
redis.call('PEXPIRE', KEYS[1], resultTTL)
redis.call('PEXPIRE', KEYS[4], resultTTL)
local out = { 'OK', 'SUCCEEDED' }
for _, id in ipairs(redis.call('HKEYS', KEYS[4])) do out[#out + 1] = id end
return out
