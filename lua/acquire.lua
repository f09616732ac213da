-- acquire: decide atomically who runs the flight of one request key (DESIGN.md section 3).
--
-- KEYS[1..5] -> the flight keys and the result stream (lib.lua)
-- ARGV[1..12] -> the answer block (lib.lua); the caller's task and entry are ARGV[8], ARGV[9]
-- ARGV[13] -> ownerId of the caller
-- ARGV[14] -> stage, ARGV[15] -> tenant, ARGV[16] -> sessionId, ARGV[17] -> requestKey K
-- ARGV[18] -> lease in ms: a heartbeat older than this means the owner is gone
-- ARGV[19] -> runningTTL in ms: hard cap of one attempt (expireAt = start + runningTTL)
-- ARGV[20] -> stallTimeout in ms (0 = off)
-- ARGV[21] -> resultTTL in ms, ARGV[22] -> failureTTL in ms
-- ARGV[23] -> maxAttempts
-- ARGV[24] -> maxParked: most entries parked on one flight (0 = no cap)
-- ARGV[25] -> fenceTTL in ms: how long the fence outlives the flight's last change
-- ARGV[26] -> "1": an owner starts at once (RUNNING); else it stays PENDING until start
-- ARGV[27] -> the caller's deadline, Unix ms (0 = none)
-- ARGV[28] -> "1": return the result of RESULT_HIT (in-process callers)
-- ARGV[18..23] are the caller's policy: a new owner pins them in the meta, and the flight is
-- judged by the pinned values of its current owner, never by the caller's.
--
-- Output: { action, reason, token, attempts, ownerId, ownerTaskId, status, result, errorType,
--           errorCode, error, heartbeatAt, lease, expireAt, now, <answer tail> }
--   action: OWNER | FOLLOWER_WAIT | RESULT_HIT | FAILED_FINAL | CANCELLED | EXPIRED | CORRUPT
--   reason: OWNER new | retry | takeover | handover | expired | result_lost;
--           FOLLOWER_WAIT parked | not_parked | full; EXPIRED deadline_passed or the stored
--           code; the others the stored error code.
--   RESULT_HIT, FAILED_FINAL, CANCELLED and EXPIRED answer the caller's task and every parked
--   task (answer tail); FOLLOWER_WAIT parked moves the caller's entry to the parking consumer.
--   heartbeatAt and lease are the current owner's (a not_parked caller checks again once the
--   lease could have lapsed); expireAt ends the current attempt; now is Redis time in ms.

initAnswers()
local P = { owner = ARGV[13], stage = ARGV[14], tenant = ARGV[15], session = ARGV[16], key = ARGV[17],
  lease = num(ARGV[18], 5000), runningTTL = num(ARGV[19], 120000), stall = num(ARGV[20], 0),
  resultTTL = num(ARGV[21], 600000), failureTTL = num(ARGV[22], 60000),
  maxAttempts = num(ARGV[23], 3), maxParked = num(ARGV[24], 0), fenceTTL = num(ARGV[25], 86400000) }
local start, deadline, wantResult = ARGV[26] == '1', num(ARGV[27], 0), ARGV[28] == '1'

local function reply(action, reason, meta, result)
  return tail({ action, reason, num(meta.ownerToken, 0), num(meta.attempts, 0), meta.ownerId or '',
    meta.taskId or '', meta.status or '', (wantResult and result) or '', meta.errorType or '',
    meta.errorCode or '', meta.error or '', num(meta.heartbeatAt, 0), num(meta.lease, P.lease),
    num(meta.expireAt, 0), now })
end

-- own makes the caller the owner with a new token. inherit: the flight record goes on (retry,
-- takeover, handover, expired) and the previous owner's task waits for its outcome like a
-- parked one; otherwise the record starts afresh (new, result_lost). Parked entries stay.
local function own(reason, attempts, meta, inherit)
  local tok = newToken(P.fenceTTL)
  local createdAt = now
  if meta then
    if inherit then
      createdAt = meta.createdAt or now
      local pe = meta.entry or ''
      if pe ~= '' and pe ~= A.entry then
        redis.call('HSETNX', KEYS[4], pe, fmt(now) .. ' ' .. (meta.taskId or ''))
      end
    end
    redis.call('DEL', KEYS[1])
  end
  local status = 'PENDING'
  if start then status = 'RUNNING' end
  redis.call('HSET', KEYS[1], 'status', status, 'stage', P.stage, 'tenant', P.tenant,
    'sessionId', P.session, 'requestKey', P.key, 'ownerId', P.owner, 'ownerToken', fmt(tok),
    'taskId', A.task, 'entry', A.entry, 'attempts', attempts, 'createdAt', createdAt,
    'updatedAt', now, 'heartbeatAt', now, 'progressAt', now, 'progress', '',
    'expireAt', now + P.runningTTL, 'retryable', '', 'errorType', '', 'errorCode', '', 'error', '',
    'resultRef', '', 'lease', P.lease, 'runningTTL', P.runningTTL, 'stall', P.stall,
    'resultTTL', P.resultTTL, 'failureTTL', P.failureTTL, 'maxAttempts', P.maxAttempts)
  local ttl = P.runningTTL + P.failureTTL
  redis.call('PEXPIRE', KEYS[1], ttl)
  if A.entry ~= '' then redis.call('HDEL', KEYS[4], A.entry) end
  if redis.call('EXISTS', KEYS[4]) == 1 then redis.call('PEXPIRE', KEYS[4], ttl) end
  return reply('OWNER', reason, { ownerToken = fmt(tok), attempts = attempts, ownerId = P.owner,
    taskId = A.task, status = status, heartbeatAt = now, lease = P.lease,
    expireAt = now + P.runningTTL }, nil)
end

-- final answers the caller and every parked task from a stored outcome.
local function final(action, meta, result)
  if action == 'RESULT_HIT' then
    answer(outcomeOf(meta, 'SUCCEEDED', result), 'hit')
    return reply(action, '', meta, result)
  end
  if action == 'EXPIRED' then
    -- Answered as expired for good: a late result of the last owner is refused from now on.
    local f = readFence()
    if f == num(meta.ownerToken, 0) then writeFence(f, 'x', P.fenceTTL) end
  end
  answer(failureOf(meta), 'follower')
  return reply(action, meta.errorCode or '', meta, nil)
end

-- expireFinal ends a flight whose attempts are spent: its last owner's task is answered with
-- the parked ones, and the fence closes that owner's token.
local function expireFinal(meta, code)
  local msg = 'flight ' .. code .. ' after ' .. (meta.attempts or '?') .. ' attempts'
  local pe = meta.entry or ''
  if pe ~= '' and pe ~= A.entry then
    redis.call('HSETNX', KEYS[4], pe, fmt(now) .. ' ' .. (meta.taskId or ''))
  end
  redis.call('HSET', KEYS[1], 'status', 'EXPIRED', 'updatedAt', now, 'retryable', '0',
    'errorType', 'expired', 'errorCode', code, 'error', msg)
  local ttl = num(meta.failureTTL, P.failureTTL)
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[4], ttl)
  writeFence(num(meta.ownerToken, 0), 'x', P.fenceTTL)
  meta.status, meta.retryable, meta.errorType, meta.errorCode, meta.error = 'EXPIRED', '0', 'expired', code, msg
  return final('EXPIRED', meta, nil)
end

-- late answers only the caller: its deadline passed before it could start or follow.
local function late(meta)
  local m = meta or { requestKey = P.key, stage = P.stage, tenant = P.tenant }
  if A.task ~= '' then
    emit(A.task, 'owner', A.queued, outcomeOf(m, 'EXPIRED', nil, 'deadline', 'deadline_passed',
      'the task deadline passed before it could start'))
  end
  if A.entry ~= '' then
    out.acks[#out.acks + 1] = A.entry
    if redis.call('HEXISTS', KEYS[4], A.entry) == 1 then out.released[#out.released + 1] = A.entry end
  end
  return reply('EXPIRED', 'deadline_passed', m, nil)
end

local function isLate() return deadline > 0 and now > deadline end

-- follow parks the caller's entry on a live flight, or says why it was not parked.
local function follow(meta)
  if isLate() then return late(meta) end
  if A.entry == '' or A.entry == (meta.entry or '') then
    return reply('FOLLOWER_WAIT', 'not_parked', meta, nil)
  end
  if redis.call('HEXISTS', KEYS[4], A.entry) == 0 then
    if P.maxParked > 0 and redis.call('HLEN', KEYS[4]) >= P.maxParked then
      return reply('FOLLOWER_WAIT', 'full', meta, nil)
    end
    redis.call('HSET', KEYS[4], A.entry, fmt(now) .. ' ' .. A.task)
    local ttl = redis.call('PTTL', KEYS[1])
    if ttl <= 0 then ttl = P.runningTTL + P.failureTTL end
    redis.call('PEXPIRE', KEYS[4], ttl)
  end
  park()
  return reply('FOLLOWER_WAIT', 'parked', meta, nil)
end

-- takeOver owns an existing flight unless the caller's deadline passed.
local function takeOver(reason, attempts, meta)
  if isLate() then return late(meta) end
  return own(reason, attempts, meta, true)
end

local meta = loadMeta()
if not meta then
  if isLate() then return late(nil) end
  return own('new', 1, nil, false)
end
local status = meta.status
local attempts = num(meta.attempts, 0)
local maxA = num(meta.maxAttempts, P.maxAttempts)

if status == 'SUCCEEDED' then
  local result = redis.call('GET', KEYS[2])
  if result then return final('RESULT_HIT', meta, result) end
  if isLate() then return late(meta) end
  return own('result_lost', 1, meta, false)
end

if status == 'FAILED' then
  if meta.retryable == '1' and attempts < maxA then return takeOver('retry', attempts + 1, meta) end
  return final('FAILED_FINAL', meta, nil)
end

if status == 'PENDING' or status == 'RUNNING' then
  if meta.handover == '1' then return takeOver('handover', attempts, meta) end
  local stall = num(meta.stall, P.stall)
  local code = nil
  if now > num(meta.expireAt, 0) then
    code = 'running_ttl'
  elseif stall > 0 and status == 'RUNNING' and now - num(meta.progressAt, 0) > stall then
    code = 'stalled'
  end
  if code then
    if attempts < maxA then return takeOver('expired', attempts + 1, meta) end
    return expireFinal(meta, code)
  end
  if now - num(meta.heartbeatAt, 0) > num(meta.lease, P.lease) then
    if attempts < maxA then return takeOver('takeover', attempts + 1, meta) end
    return expireFinal(meta, 'lease_lost')
  end
  return follow(meta)
end

if status == 'EXPIRED' then
  if attempts < maxA then return takeOver('expired', attempts + 1, meta) end
  return final('EXPIRED', meta, nil)
end

if status == 'CANCELLED' then return final('CANCELLED', meta, nil) end

return reply('CORRUPT', tostring(status), meta, nil)
