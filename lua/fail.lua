-- fail: the owner records that its attempt failed; the flight becomes FAILED. A final failure
-- (not retryable, or no attempt left) answers the owner's task and every parked task; a
-- retryable one leaves them waiting for the next attempt.
--
-- KEYS[1..5] -> the flight keys and the result stream (lib.lua)
-- ARGV[1..12] -> the answer block (lib.lua); the caller is the owner's task
-- ARGV[13] -> ownerToken
-- ARGV[14] -> retryable ("1" or "0"), ARGV[15] -> errorType, ARGV[16] -> errorCode,
-- ARGV[17] -> error message
-- ARGV[18] -> ownerId, ARGV[19] -> stage, ARGV[20] -> tenant, ARGV[21] -> sessionId,
-- ARGV[22] -> requestKey K, ARGV[23] -> attempts (these write a meta that is gone)
-- ARGV[24] -> maxAttempts (the owner's pinned value), ARGV[25] -> failureTTL in ms,
-- ARGV[26] -> fenceTTL in ms
--
-- Accepted from the same tokens as complete (complete.lua). Output:
--   { code, final, settled, <answer tail> }
--   OK          the meta is FAILED (TTL failureTTL); final 1 when no attempt is left: then the
--               caller (shared owner) and the parked tasks are answered
--   ALREADY     this token's failure is recorded already (a retry): answered again when final
--   CANCELLED / EXPIRED   the run was cancelled or expired for good: the caller is answered
--   STALE_TOKEN another token owns the flight: the caller is answered from its outcome or
--               parked on it ("" when a larger token's meta is gone too)
--   STATE       the token's flight SUCCEEDED: nothing written
-- settled: answered | parked | "" (the caller keeps its task, to retry it).

initAnswers()
local tok = num(ARGV[13], 0)
local retryable, etype, ecode, emsg = ARGV[14], ARGV[15], ARGV[16], ARGV[17]
local maxA, failureTTL, fenceTTL = num(ARGV[24], 3), num(ARGV[25], 60000), num(ARGV[26], 86400000)

local function record(meta)
  redis.call('HSET', KEYS[1], 'status', 'FAILED', 'updatedAt', now, 'retryable', retryable,
    'errorType', etype, 'errorCode', ecode, 'error', emsg, 'handover', '')
  redis.call('PEXPIRE', KEYS[1], failureTTL)
  if redis.call('EXISTS', KEYS[4]) == 1 then redis.call('PEXPIRE', KEYS[4], failureTTL) end
  writeFence(tok, '', fenceTTL)
  meta.status, meta.retryable, meta.errorType, meta.errorCode, meta.error = 'FAILED', retryable, etype, ecode, emsg
end

local function isFinal(meta)
  return retryable ~= '1' or num(meta.attempts, 0) >= num(meta.maxAttempts, maxA)
end

local function done(code, meta)
  if isFinal(meta) then
    answer(failureOf(meta), 'owner')
    return tail({ code, 1, 'answered' })
  end
  return tail({ code, 0, '' })
end

local meta = loadMeta()
if not meta then
  local verdict = fenceAdmits(tok, fenceTTL)
  if verdict == 'stale' then return tail({ 'STALE_TOKEN', 0, '' }) end
  local m = { stage = ARGV[19], tenant = ARGV[20], sessionId = ARGV[21], requestKey = ARGV[22],
    ownerId = ARGV[18], ownerToken = fmt(tok), attempts = ARGV[23], maxAttempts = fmt(maxA) }
  if verdict == 'c' or verdict == 'x' then
    local st, code = 'CANCELLED', 'cancelled'
    if verdict == 'x' then st, code = 'EXPIRED', 'expired' end
    m.status = st
    answer(outcomeOf(m, st, nil, code, code, 'the flight was ' .. string.lower(st) .. ' before the failure arrived'), 'owner')
    return tail({ st, 1, 'answered' })
  end
  redis.call('HSET', KEYS[1], 'stage', m.stage, 'tenant', m.tenant, 'sessionId', m.sessionId,
    'requestKey', m.requestKey, 'ownerId', m.ownerId, 'ownerToken', m.ownerToken,
    'taskId', A.task, 'entry', A.entry, 'attempts', m.attempts, 'maxAttempts', m.maxAttempts,
    'createdAt', now, 'heartbeatAt', now, 'progressAt', now, 'expireAt', now,
    'failureTTL', failureTTL, 'restoredAt', now)
  record(m)
  return done('OK', m)
end

local status = meta.status
if meta.ownerToken ~= fmt(tok) then
  return tail({ 'STALE_TOKEN', 0, settleCaller(meta) })
end
if status == 'FAILED' then return done('ALREADY', meta) end
if status == 'CANCELLED' then
  answer(failureOf(meta), 'owner')
  return tail({ status, 1, 'answered' })
end
if status == 'EXPIRED' then
  local f, mark = readFence()
  if mark ~= '' and f == tok then
    answer(failureOf(meta), 'owner')
    return tail({ status, 1, 'answered' })
  end
  record(meta)
  return done('OK', meta)
end
if status == 'PENDING' or status == 'RUNNING' then
  record(meta)
  return done('OK', meta)
end
return tail({ 'STATE', 0, '' })
