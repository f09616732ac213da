-- fail: the owner records that its attempt failed; the flight becomes FAILED.
--
-- KEYS[1] -> ai:flight:meta:{K}, KEYS[2..3] unused, KEYS[4] -> ai:flight:waiters:{K}
-- ARGV[1] -> ownerToken, ARGV[2] -> retryable ("1" or "0"), ARGV[3] -> errorType,
-- ARGV[4] -> errorCode, ARGV[5] -> error message, ARGV[6] -> failureTTL in ms,
-- ARGV[7] -> maxAttempts
--
-- Output: { code, final, parked task ids... }
--   OK          meta FAILED with TTL failureTTL. final is 1 when no attempt is left (not
--               retryable, or attempts >= maxAttempts): then the caller publishes the parked
--               ids' events; with final 0 the next acquire retries and they stay parked.
--   STALE_TOKEN another owner holds the flight (or it is gone): nothing written
--   CANCELLED / EXPIRED   the flight ended meanwhile: nothing written
--   STATE       the flight is neither PENDING nor RUNNING: nothing written

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local failureTTL, maxAttempts = tonumber(ARGV[6]), tonumber(ARGV[7])

local m = redis.call('HMGET', KEYS[1], 'status', 'ownerToken', 'attempts')
local status, token = m[1], m[2]
if not status or token ~= ARGV[1] then return { 'STALE_TOKEN', 0 } end
if status == 'CANCELLED' or status == 'EXPIRED' then return { status, 0 } end
if status ~= 'PENDING' and status ~= 'RUNNING' then return { 'STATE', 0, status } end

redis.call('HSET', KEYS[1], 'status', 'FAILED', 'updatedAt', now, 'retryable', ARGV[2],
  'errorType', ARGV[3], 'errorCode', ARGV[4], 'error', ARGV[5])
redis.call('PEXPIRE', KEYS[1], failureTTL)
redis.call('PEXPIRE', KEYS[4], failureTTL)
local final = 0
if ARGV[2] ~= '1' or (tonumber(m[3] or '0') or 0) >= maxAttempts then final = 1 end
local out = { 'OK', final }
for _, id in ipairs(redis.call('HKEYS', KEYS[4])) do out[#out + 1] = id end
return out
