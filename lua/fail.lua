-- fail: the owner records that its attempt failed; the flight becomes FAILED. A final failure
-- (not retryable, or no attempt left) answers the owner's task and every parked task; a
-- retryable one leaves them waiting for the next attempt.
--
-- KEYS[1..5] -> the flight keys and the result stream (lib.lua)
-- ARGV[1..11] -> the answer block (lib.lua); the caller is the owner's task
-- ARGV[12] -> ownerToken
-- ARGV[13] -> retryable ("1" or "0"), ARGV[14] -> errorType, ARGV[15] -> errorCode,
-- ARGV[16] -> error message
-- ARGV[17] -> ownerId, ARGV[18] -> stage, ARGV[19] -> tenant, ARGV[20] -> sessionId,
-- ARGV[21] -> requestKey K, ARGV[22] -> attempts (these write a meta that is gone)
-- ARGV[23] -> maxAttempts (the owner's pinned value), ARGV[24] -> failureTTL in ms,
-- ARGV[25] -> fenceTTL in ms
-- ARGV[26] (optional) -> the shared label of the caller's own event ("owner" when absent or "")
-- ARGV[27] (optional) -> retryIn ms: a retryable failure's next attempt starts no sooner than
--             this (the meta records retryAt; acquires before it park, the meta lives retryIn
--             longer); "0" or absent: at once
-- ARGV[28] (optional) -> "1": the caller gives its stream entry up (its task waits for the
--             retry in the stage's scheduled set and comes back under a new entry)
-- ARGV[29] (optional) -> "1": ask first, as complete's ARGV[24] (GONE when the meta is gone,
--             LAPSED when the caller's own record lets another caller take it over)
-- ARGV[30] (optional, after ARGV[29]) -> "1": the attempt never called the model (a limiter
--             made it wait): the failure is retryable, never final, and the next attempt does
--             not count (the meta records free)
--
-- Accepted from the same tokens as complete (complete.lua). Output:
--   { code, final, settled, <answer tail> }
--   OK          the meta is FAILED (TTL failureTTL); final 1 when no attempt is left: then the
--               caller (shared owner) and the parked tasks are answered
--   ALREADY     this token's failure is recorded already (a retry): answered again when final
--               (on one node, not the owner's task when its entry is no longer pending); only
--               the meta's updatedAt is written
--   CANCELLED / EXPIRED   the run was cancelled or expired for good: the caller is answered
--   STALE_TOKEN another token owns the flight: the caller is answered from its outcome or
--               parked on it ("" when a larger token's meta is gone too)
--   STATE       the token's flight SUCCEEDED: nothing written
--   GONE, LAPSED  (ARGV[29] asks) as complete's: nothing written
-- settled: answered | parked | "" (the caller keeps its task, to retry it).

register('fail', function()
  initAnswers()
  local tok = num(V[12], 0)
  local retryable, etype, ecode, emsg = V[13], V[14], V[15], V[16]
  local maxA, failureTTL, fenceTTL = num(V[23], 3), num(V[24], 60000), num(V[25], 86400000)
  local label = V[26]
  if label == nil or label == '' then label = 'owner' end
  local retryIn = num(V[27], 0)
  local free = V[30] == '1'
  if free then retryable = '1' end

  local function record(meta)
    redis.call('HSET', K[1], 'status', 'FAILED', 'updatedAt', nowStr, 'retryable', retryable,
      'errorType', etype, 'errorCode', ecode, 'error', emsg, 'handover', '')
    local ttl = failureTTL
    if retryable == '1' and retryIn > 0 then
      redis.call('HSET', K[1], 'retryAt', fmt(nowMs() + retryIn))
      ttl = ttl + retryIn
      meta.retryAt = fmt(nowMs() + retryIn)
    end
    if V[28] == '1' then redis.call('HSET', K[1], 'entry', '') end
    if free then redis.call('HSET', K[1], 'free', '1') end
    if label ~= 'owner' then redis.call('HSET', K[1], 'shared', label) end
    redis.call('PEXPIRE', K[1], ttl)
    if redis.call('EXISTS', K[4]) == 1 then redis.call('PEXPIRE', K[4], ttl) end
    writeFence(tok, '', fenceTTL)
    meta.status, meta.retryable, meta.errorType, meta.errorCode, meta.error = 'FAILED', retryable, etype, ecode, emsg
  end

  local function isFinal(meta)
    local _, _, _, _, _, pinnedMax = pinned(meta, '0 0 0 0 0 ' .. fmt(maxA))
    if free then return false end
    return retryable ~= '1' or num(meta.attempts, 0) >= pinnedMax
  end

  local function done(code, meta)
    if isFinal(meta) then
      answer(failureOf(meta), label)
      return tail({ code, 1, 'answered' })
    end
    return tail({ code, 0, '' })
  end

  local ask = V[29] == '1'
  local meta = loadMeta()
  if not meta then
    if ask then return tail({ 'GONE', 0, '' }) end
    local verdict = fenceAdmits(tok, fenceTTL)
    if verdict == 'stale' then return tail({ 'STALE_TOKEN', 0, '' }) end
    local m = { stage = V[18], tenant = V[19], sessionId = V[20], requestKey = V[21],
      ownerId = V[17], ownerToken = fmt(tok), attempts = V[22] }
    if verdict == 'c' or verdict == 'x' then
      local st, code = 'CANCELLED', 'cancelled'
      if verdict == 'x' then st, code = 'EXPIRED', 'expired' end
      m.status = st
      answer(outcomeOf(m, st, nil, code, code, 'the flight was ' .. string.lower(st) .. ' before the failure arrived'), label)
      return tail({ st, 1, 'answered' })
    end
    redis.call('HSET', K[1], 'stage', m.stage, 'tenant', m.tenant, 'sessionId', m.sessionId,
      'requestKey', m.requestKey, 'ownerId', m.ownerId, 'ownerToken', m.ownerToken,
      'taskId', A.task, 'entry', A.entry, 'attempts', m.attempts, 'createdAt', nowStr,
      'heartbeatAt', nowStr, 'expireAt', nowStr, 'restoredAt', nowStr,
      'policy', '5000 0 0 0 ' .. fmt(failureTTL) .. ' ' .. fmt(maxA))
    record(m)
    return done('OK', m)
  end

  local status = meta.status
  if meta.ownerToken ~= fmt(tok) then
    return tail({ 'STALE_TOKEN', 0, settleCaller(meta) })
  end
  if status == 'FAILED' then
    JAgain = true -- a retry after a lost reply: an owner's task answered then is not again
    redis.call('HSET', K[1], 'updatedAt', nowStr) -- for a WAIT behind it: see complete.lua
    return done('ALREADY', meta)
  end
  if status == 'CANCELLED' then
    answer(failureOf(meta), label)
    return tail({ status, 1, 'answered' })
  end
  if status == 'EXPIRED' then
    local f, mark = readFence()
    if mark ~= '' and f == tok then
      answer(failureOf(meta), label)
      return tail({ status, 1, 'answered' })
    end
    if ask then return tail({ 'LAPSED', 0, '' }) end
    record(meta)
    return done('OK', meta)
  end
  if status == 'PENDING' or status == 'RUNNING' then
    if ask and takeoverDue(status, meta.heartbeatAt, meta.expireAt, meta.progressAt, meta.policy) then
      return tail({ 'LAPSED', 0, '' })
    end
    record(meta)
    return done('OK', meta)
  end
  return tail({ 'STATE', 0, '' })
end)
