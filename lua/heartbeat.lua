-- heartbeat: the owner proves it is alive and, optionally, that its model call made progress.
-- When the meta is gone (lost writes, eviction) the owner writes it back, RUNNING under its
-- token, if the fence admits the token: the flight is not a stale token, and a duplicate that
-- arrives meanwhile follows this owner instead of running the model again.
--
-- KEYS[1..4] -> the flight keys (lib.lua)
-- ARGV[1] -> ownerToken
-- ARGV[2] -> progress: an opaque counter from the model adapter ("" = not reported);
--            progressAt moves to now when it differs from the stored value
-- ARGV[3..] -> the ownership, to write a meta that is gone: ownerId, stage, tenant, sessionId,
--            requestKey, taskId, entry, attempts, expireAt (Unix ms), lease, runningTTL,
--            stallTimeout, resultTTL, failureTTL, maxAttempts, fenceTTL (ms)
-- ARGV[19] (optional) -> "1": ask first: when the meta is gone and the fence admits the
--            token, answer GONE instead of writing it back, and when the caller's own record
--            lets another caller take the flight over (lib.lua takeoverDue), answer LAPSED
--            instead of renewing it (the caller checks a fence kept outside Redis, then calls
--            again without it)
--
-- Output: { code, status }
--   OK          heartbeatAt = now; keep running
--   RESTORED    the meta was gone and is written back; keep running
--   GONE        (ARGV[19] "1") the meta is gone and would be written back: nothing was done
--   LAPSED      (ARGV[19] "1") the caller's record lets another caller take it over: nothing
--               was done
--   CANCELLED   the flight was cancelled: abort the model call
--   EXPIRED     runningTTL is spent or progress stalled (by the owner's pinned stallTimeout):
--               the flight is now EXPIRED; abort, and acquire again
--   STALE_TOKEN another owner holds the flight, or the fence refuses the token: abort
--   STATE       any other status (second element)

register('heartbeat', function()
  local tok = V[1]
  local O = { owner = V[3], stage = V[4], tenant = V[5], session = V[6], key = V[7],
    task = V[8], entry = V[9], attempts = V[10], expireAt = num(V[11], 0),
    lease = V[12], runningTTL = V[13], stall = V[14], resultTTL = V[15],
    failureTTL = num(V[16], 60000), maxAttempts = V[17], fenceTTL = num(V[18], 86400000) }

  local m = redis.call('HMGET', K[1], 'status', 'ownerToken', 'progress', 'progressAt', 'expireAt',
    'policy', 'heartbeatAt')
  local status, token = m[1], m[2]
  if not status then
    local verdict = fenceAdmits(num(tok, 0), O.fenceTTL)
    if verdict == 'c' then return { 'CANCELLED', 'CANCELLED' } end
    if verdict == 'x' then return { 'EXPIRED', 'EXPIRED' } end
    if verdict ~= 'ok' or nowMs() > O.expireAt then return { 'STALE_TOKEN', '' } end
    if V[19] == '1' then return { 'GONE', '' } end -- the caller asks a durable fence first
    redis.call('HSET', K[1], 'status', 'RUNNING', 'stage', O.stage, 'tenant', O.tenant,
      'sessionId', O.session, 'requestKey', O.key, 'ownerId', O.owner, 'ownerToken', tok,
      'taskId', O.task, 'entry', O.entry, 'attempts', O.attempts, 'createdAt', nowStr,
      'updatedAt', nowStr, 'heartbeatAt', nowStr, 'progressAt', nowStr, 'progress', V[2],
      'expireAt', O.expireAt, 'restoredAt', nowStr,
      'policy', O.lease .. ' ' .. O.runningTTL .. ' ' .. O.stall .. ' ' .. O.resultTTL .. ' ' ..
        fmt(O.failureTTL) .. ' ' .. O.maxAttempts)
    redis.call('PEXPIRE', K[1], O.expireAt - nowMs() + O.failureTTL)
    writeFence(num(tok, 0), '', O.fenceTTL)
    return { 'RESTORED', 'RUNNING' }
  end
  if token ~= tok then return { 'STALE_TOKEN', status } end
  if status == 'CANCELLED' or status == 'EXPIRED' then return { status, status } end
  if status ~= 'PENDING' and status ~= 'RUNNING' then return { 'STATE', status } end
  if V[19] == '1' and takeoverDue(status, m[7], m[5], m[4], m[6]) then return { 'LAPSED', status } end

  local _, pRunning, pStall, _, pFailure = pinned({ policy = m[6] },
    '0 0 ' .. fmt(num(O.stall, 0)) .. ' 0 ' .. fmt(O.failureTTL) .. ' 0')
  local progressAt = num(m[4], num(m[5], 0) - pRunning)
  if V[2] ~= '' and V[2] ~= m[3] then
    progressAt = nowMs()
    redis.call('HSET', K[1], 'progress', V[2], 'progressAt', nowStr)
  end
  redis.call('HSET', K[1], 'heartbeatAt', nowStr, 'updatedAt', nowStr)

  local stall, failureTTL = pStall, pFailure
  local code = nil
  if nowMs() > num(m[5], 0) then
    code = 'running_ttl'
  elseif stall > 0 and status == 'RUNNING' and nowMs() - progressAt > stall then
    code = 'stalled'
  end
  if code then
    redis.call('HSET', K[1], 'status', 'EXPIRED', 'retryable', '1', 'errorType', 'expired',
      'errorCode', code, 'error', 'owner heartbeat found the flight ' .. code)
    redis.call('PEXPIRE', K[1], failureTTL)
    if redis.call('EXISTS', K[4]) == 1 then redis.call('PEXPIRE', K[4], failureTTL) end
    return { 'EXPIRED', 'EXPIRED' }
  end
  return { 'OK', status }
end)
