-- complete: the owner stores its result; the flight becomes SUCCEEDED and every task waiting
-- for it is answered. The same script writes back an uncertain outcome (a result spooled while
-- Redis was away): one rule decides both.
--
-- KEYS[1..5] -> the flight keys and the result stream (lib.lua)
-- ARGV[1..12] -> the answer block (lib.lua); the caller is the owner's task
-- ARGV[13] -> ownerToken the result was produced under
-- ARGV[14] -> result bytes
-- ARGV[15] -> "1" when the result is compact JSON (events may inline it)
-- ARGV[16] -> ownerId, ARGV[17] -> stage, ARGV[18] -> tenant, ARGV[19] -> sessionId,
-- ARGV[20] -> requestKey K, ARGV[21] -> attempts (these write a meta that is gone)
-- ARGV[22] -> resultTTL in ms, ARGV[23] -> fenceTTL in ms
--
-- The rule: a result is accepted from the token that owns the flight while it is PENDING,
-- RUNNING, or EXPIRED by that owner's own heartbeat (not yet answered: the attempt ran out,
-- but nobody took over); and, when the meta is gone (lost writes, eviction, a TTL that ran
-- out), from a token the fence admits (lib.lua fenceAdmits). Never from a token below the
-- fence, nor from a run that was cancelled or expired for good.
--
-- Output: { code, status, restored, settled, <answer tail> }
--   OK          the result is stored (TTL resultTTL), the meta SUCCEEDED (TTL resultTTL); the
--               caller (shared owner) and the parked tasks are answered. restored is 1 when
--               the meta was gone and written anew (the meta records restoredAt).
--   ALREADY     this token's result is stored already (a retry after a lost reply): answered
--               again, nothing else written
--   CANCELLED / EXPIRED   the run was cancelled or expired for good: the caller is answered
--               with that outcome, nothing is stored
--   STALE_TOKEN another token owns the flight: nothing is stored; the caller is answered from
--               the flight's outcome, or parked on it (settled: answered | parked | "" when a
--               larger token was issued but its meta is gone too: the caller acquires again)
--   STATE       the token's own flight is FAILED: nothing written
-- settled says what became of the caller's task: answered, parked or "" (still the caller's).

initAnswers()
local tok = num(ARGV[13], 0)
local result, inline = ARGV[14], ARGV[15]
local resultTTL, fenceTTL = num(ARGV[22], 600000), num(ARGV[23], 86400000)

local function succeed(meta, restored)
  redis.call('SET', KEYS[2], result, 'PX', resultTTL)
  redis.call('HSET', KEYS[1], 'status', 'SUCCEEDED', 'updatedAt', now, 'resultRef', KEYS[2],
    'inline', inline, 'retryable', '', 'errorType', '', 'errorCode', '', 'error', '', 'handover', '')
  if restored then redis.call('HSET', KEYS[1], 'restoredAt', now) end
  redis.call('PEXPIRE', KEYS[1], resultTTL)
  if redis.call('EXISTS', KEYS[4]) == 1 then redis.call('PEXPIRE', KEYS[4], resultTTL) end
  writeFence(tok, '', fenceTTL)
  meta.status, meta.inline = 'SUCCEEDED', inline
  answer(outcomeOf(meta, 'SUCCEEDED', result), 'owner')
  local r = 0
  if restored then r = 1 end
  return tail({ 'OK', 'SUCCEEDED', r, 'answered' })
end

local meta = loadMeta()
if not meta then
  local verdict = fenceAdmits(tok, fenceTTL)
  local m = { status = 'SUCCEEDED', stage = ARGV[17], tenant = ARGV[18], sessionId = ARGV[19],
    requestKey = ARGV[20], ownerId = ARGV[16], ownerToken = fmt(tok), attempts = ARGV[21] }
  if verdict == 'stale' then return tail({ 'STALE_TOKEN', '', 0, '' }) end
  if verdict == 'c' or verdict == 'x' then
    -- The run was closed and its record is gone: answer the caller with the closing outcome.
    local st, code = 'CANCELLED', 'cancelled'
    if verdict == 'x' then st, code = 'EXPIRED', 'expired' end
    m.status = st
    answer(outcomeOf(m, st, nil, code, code, 'the flight was ' .. string.lower(st) .. ' before the result arrived'), 'owner')
    return tail({ st, st, 0, 'answered' })
  end
  redis.call('HSET', KEYS[1], 'status', 'SUCCEEDED', 'stage', m.stage, 'tenant', m.tenant,
    'sessionId', m.sessionId, 'requestKey', m.requestKey, 'ownerId', m.ownerId,
    'ownerToken', m.ownerToken, 'taskId', A.task, 'entry', A.entry, 'attempts', m.attempts,
    'createdAt', now, 'heartbeatAt', now, 'progressAt', now, 'expireAt', now,
    'resultTTL', resultTTL)
  return succeed(m, true)
end

local status = meta.status
if meta.ownerToken ~= fmt(tok) then
  return tail({ 'STALE_TOKEN', status or '', 0, settleCaller(meta) })
end
if status == 'SUCCEEDED' then
  answer(outcomeOf(meta, status, redis.call('GET', KEYS[2]) or result), 'owner')
  return tail({ 'ALREADY', status, 0, 'answered' })
end
if status == 'CANCELLED' then
  answer(failureOf(meta), 'owner')
  return tail({ status, status, 0, 'answered' })
end
if status == 'EXPIRED' then
  local f, mark = readFence()
  if mark ~= '' and f == tok then
    answer(failureOf(meta), 'owner')
    return tail({ status, status, 0, 'answered' })
  end
  return succeed(meta, false)
end
if status == 'PENDING' or status == 'RUNNING' then return succeed(meta, false) end
return tail({ 'STATE', status, 0, '' })
