-- restore: write back an uncertain outcome (DESIGN.md section 6): the owner's model answered,
-- but writing its result failed because Redis was gone. The result was spooled locally and is
-- written here once Redis is back; the model is never run again for it.
--
-- KEYS[1] -> ai:flight:meta:{K}     (hash: the state machine)
-- KEYS[2] -> ai:flight:result:{K}   (string: result bytes)
-- KEYS[3] -> ai:flight:fence:{K}    (string: last fencing token issued; outlives the meta)
-- KEYS[4] -> ai:flight:waiters:{K}  (set: parked task ids)
-- ARGV[1] -> ownerToken the result was produced under
-- ARGV[2] -> result bytes
-- ARGV[3] -> resultTTL in ms
-- ARGV[4] -> stage
-- ARGV[5] -> tenant
-- ARGV[6] -> requestKey K
--
-- Output: { code, parked task ids... }
--   OK          result written (TTL resultTTL), meta SUCCEEDED with TTL resultTTL; the parked
--               ids follow: the caller publishes their events, then removes them (SREM). Either
--               no meta existed (Redis restarted without persistence, or the meta expired): a
--               SUCCEEDED meta is created under the token and the fence counter is raised to at
--               least the token, so later tokens stay larger; or the token still owns a
--               PENDING, RUNNING or EXPIRED flight, which is completed as complete.lua does.
--   DONE        the flight is SUCCEEDED already (someone's result is there): nothing written
--   STALE_TOKEN another token owns the flight, or it is FAILED or CANCELLED: nothing written
-- Times come from Redis TIME. The meta field restoredAt records when a result was written back.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local token, result, resultTTL = ARGV[1], ARGV[2], tonumber(ARGV[3])

local function fmt(n) return string.format('%.0f', n) end

-- succeed writes the result and makes the flight SUCCEEDED; it answers OK with the parked ids.
local function succeed()
  redis.call('SET', KEYS[2], result, 'PX', resultTTL)
  redis.call('HSET', KEYS[1], 'status', 'SUCCEEDED', 'updatedAt', now, 'resultRef', KEYS[2],
    'retryable', '', 'errorType', '', 'errorCode', '', 'error', '', 'restoredAt', now)
  redis.call('PEXPIRE', KEYS[1], resultTTL)
  if redis.call('EXISTS', KEYS[4]) == 1 then redis.call('PEXPIRE', KEYS[4], resultTTL) end
  local out = { 'OK' }
  for _, id in ipairs(redis.call('HKEYS', KEYS[4])) do out[#out + 1] = id end
  return out
end

local m = redis.call('HMGET', KEYS[1], 'status', 'ownerToken')
local status, owner = m[1], m[2]

if not status then
  -- No flight: raise the fence so that the next acquire issues a larger token. The counter
  -- keeps a longer TTL it already has; tokens also have a TIME floor once it expires.
  local prev = tonumber(redis.call('GET', KEYS[3]) or '0') or 0
  local tok = tonumber(token)
  if tok > prev then
    local ttl = 2 * resultTTL
    local left = redis.call('PTTL', KEYS[3])
    if left > ttl then ttl = left end
    redis.call('SET', KEYS[3], fmt(tok), 'PX', ttl)
  end
  redis.call('HSET', KEYS[1],
    'status', 'SUCCEEDED', 'stage', ARGV[4], 'tenant', ARGV[5], 'sessionId', '',
    'requestKey', ARGV[6], 'ownerId', '', 'ownerToken', token, 'taskId', '',
    'attempts', 1, 'createdAt', now, 'updatedAt', now, 'heartbeatAt', now,
    'progressAt', now, 'progress', '', 'expireAt', now,
    'retryable', '', 'errorType', '', 'errorCode', '', 'error', '', 'resultRef', KEYS[2])
  return succeed()
end

if status == 'SUCCEEDED' then return { 'DONE' } end
if owner == token and (status == 'PENDING' or status == 'RUNNING' or status == 'EXPIRED') then
  return succeed()
end
return { 'STALE_TOKEN' }
