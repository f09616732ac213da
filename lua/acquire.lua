-- acquire: decide atomically who runs the flight of one request key (DESIGN.md section 3).
--
-- KEYS[1] -> ai:flight:meta:{K}     (hash: the state machine)
-- KEYS[2] -> ai:flight:result:{K}   (string: result bytes)
-- KEYS[3] -> ai:flight:fence:{K}    (string: last fencing token issued; outlives the meta)
-- KEYS[4] -> ai:flight:waiters:{K}  (hash: parked task id -> parked at, Unix ms)
-- ARGV[1]  -> ownerId of the caller
-- ARGV[2]  -> taskId of the caller ("" for in-process callers, who are never parked)
-- ARGV[3]  -> stage
-- ARGV[4]  -> tenant
-- ARGV[5]  -> sessionId
-- ARGV[6]  -> requestKey K
-- ARGV[7]  -> lease in ms: a heartbeat older than this means the owner is gone
-- ARGV[8]  -> runningTTL in ms: hard cap of one attempt (expireAt = start + runningTTL)
-- ARGV[9]  -> stallTimeout in ms: a RUNNING flight without progress this long is expired (0 = off)
-- ARGV[10] -> resultTTL in ms
-- ARGV[11] -> failureTTL in ms
-- ARGV[12] -> maxAttempts
-- ARGV[13] -> maxParked: most task ids parked on one flight (0 = no cap)
--
-- Output: { action, reason, token, attempts, ownerId, ownerTaskId, status,
--           result, errorType, errorCode, error, parked task ids... }
--   action: OWNER | FOLLOWER_WAIT | RESULT_HIT | FAILED_FINAL | CANCELLED | EXPIRED | CORRUPT
--   reason: for OWNER new | retry | takeover | expired | result_lost;
--           for FOLLOWER_WAIT parked | not_parked | full; otherwise the stored errorCode.
--   parked: for RESULT_HIT, FAILED_FINAL, CANCELLED and EXPIRED, the task ids still parked,
--           whose terminal events the caller publishes.
-- Times come from Redis TIME. Tokens are max(previous + 1, now in microseconds), so they grow
-- strictly per key, also after the meta and the fence counter expired.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local nowUs = tonumber(t[1]) * 1000000 + tonumber(t[2])

local ownerId, taskId = ARGV[1], ARGV[2]
local lease, runningTTL, stall = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local resultTTL, failureTTL = tonumber(ARGV[10]), tonumber(ARGV[11])
local maxAttempts, maxParked = tonumber(ARGV[12]), tonumber(ARGV[13])
local activeTTL = runningTTL + failureTTL
local fenceTTL = 2 * (runningTTL + failureTTL + resultTTL)

local function fmt(n) return string.format('%.0f', n) end

local function reply(action, reason, meta, result, parked)
  local out = { action, reason, tonumber(meta.ownerToken or '0') or 0,
    tonumber(meta.attempts or '0') or 0, meta.ownerId or '', meta.taskId or '', meta.status or '',
    result or '', meta.errorType or '', meta.errorCode or '', meta.error or '' }
  for _, id in ipairs(parked or {}) do out[#out + 1] = id end
  return out
end

local function newToken()
  local prev = tonumber(redis.call('GET', KEYS[3]) or '0') or 0
  local tok = nowUs
  if tok <= prev then tok = prev + 1 end
  redis.call('SET', KEYS[3], fmt(tok), 'PX', fenceTTL)
  return tok
end

-- own makes the caller the owner. fresh: a new flight record (new, result_lost); otherwise the
-- record is kept and the previous owner's task id joins the parked ids (retry, takeover, expired).
local function own(reason, attempts, fresh, meta)
  local tok = newToken()
  local createdAt = now
  if fresh then
    redis.call('DEL', KEYS[1])
  else
    createdAt = meta.createdAt or now
    local prevTask = meta.taskId or ''
    if prevTask ~= '' and prevTask ~= taskId then redis.call('HSETNX', KEYS[4], prevTask, now) end
  end
  redis.call('HDEL', KEYS[1], 'cancelReason')
  redis.call('HSET', KEYS[1],
    'status', 'PENDING', 'stage', ARGV[3], 'tenant', ARGV[4], 'sessionId', ARGV[5],
    'requestKey', ARGV[6], 'ownerId', ownerId, 'ownerToken', fmt(tok), 'taskId', taskId,
    'attempts', attempts, 'createdAt', createdAt, 'updatedAt', now, 'heartbeatAt', now,
    'progressAt', now, 'progress', '', 'expireAt', now + runningTTL,
    'retryable', '', 'errorType', '', 'errorCode', '', 'error', '', 'resultRef', '')
  redis.call('PEXPIRE', KEYS[1], activeTTL)
  if redis.call('EXISTS', KEYS[4]) == 1 then redis.call('PEXPIRE', KEYS[4], activeTTL) end
  return { 'OWNER', reason, tok, attempts, ownerId, taskId, 'PENDING', '', '', '', '' }
end

-- expire ends a flight whose attempts are spent; the last owner's task joins the parked ids.
local function expire(meta, code)
  if (meta.taskId or '') ~= '' then redis.call('HSETNX', KEYS[4], meta.taskId, now) end
  redis.call('HSET', KEYS[1], 'status', 'EXPIRED', 'updatedAt', now,
    'retryable', '0', 'errorType', 'expired', 'errorCode', code,
    'error', 'flight ' .. code .. ' after ' .. (meta.attempts or '?') .. ' attempts')
  redis.call('PEXPIRE', KEYS[1], failureTTL)
  redis.call('PEXPIRE', KEYS[4], failureTTL)
  meta.status, meta.errorType, meta.errorCode = 'EXPIRED', 'expired', code
  meta.error = 'flight ' .. code .. ' after ' .. (meta.attempts or '?') .. ' attempts'
  return reply('EXPIRED', code, meta, '', redis.call('HKEYS', KEYS[4]))
end

local raw = redis.call('HGETALL', KEYS[1])
if #raw == 0 then return own('new', 1, true, {}) end
local meta = {}
for i = 1, #raw, 2 do meta[raw[i]] = raw[i + 1] end
local status = meta.status
local attempts = tonumber(meta.attempts or '0') or 0

if status == 'SUCCEEDED' then
  local result = redis.call('GET', KEYS[2])
  if result then return reply('RESULT_HIT', '', meta, result, redis.call('HKEYS', KEYS[4])) end
  return own('result_lost', 1, true, meta)
end

if status == 'FAILED' then
  if meta.retryable == '1' and attempts < maxAttempts then return own('retry', attempts + 1, false, meta) end
  return reply('FAILED_FINAL', meta.errorCode or '', meta, '', redis.call('HKEYS', KEYS[4]))
end

if status == 'PENDING' or status == 'RUNNING' then
  local hb = tonumber(meta.heartbeatAt or '0') or 0
  local expireAt = tonumber(meta.expireAt or '0') or 0
  local progressAt = tonumber(meta.progressAt or '0') or 0
  local code = nil
  if now > expireAt then
    code = 'running_ttl'
  elseif stall > 0 and status == 'RUNNING' and now - progressAt > stall then
    code = 'stalled'
  end
  if code then
    if attempts < maxAttempts then return own('expired', attempts + 1, false, meta) end
    return expire(meta, code)
  end
  if now - hb > lease then
    if attempts < maxAttempts then return own('takeover', attempts + 1, false, meta) end
    return expire(meta, 'lease_lost')
  end
  local reason = 'not_parked'
  if taskId ~= '' and taskId ~= meta.taskId then
    if redis.call('HEXISTS', KEYS[4], taskId) == 1 then
      reason = 'parked'
    elseif maxParked > 0 and redis.call('HLEN', KEYS[4]) >= maxParked then
      reason = 'full'
    else
      redis.call('HSET', KEYS[4], taskId, now)
      local ttl = redis.call('PTTL', KEYS[1])
      if ttl <= 0 then ttl = activeTTL end
      redis.call('PEXPIRE', KEYS[4], ttl)
      reason = 'parked'
    end
  end
  return reply('FOLLOWER_WAIT', reason, meta, '', {})
end

if status == 'EXPIRED' then
  if attempts < maxAttempts then return own('expired', attempts + 1, false, meta) end
  return reply('EXPIRED', meta.errorCode or '', meta, '', redis.call('HKEYS', KEYS[4]))
end

if status == 'CANCELLED' then
  return reply('CANCELLED', meta.errorCode or '', meta, '', redis.call('HKEYS', KEYS[4]))
end

return reply('CORRUPT', tostring(status), meta, '', {})
