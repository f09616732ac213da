-- complete: the owner stores its result; the flight becomes SUCCEEDED and every task waiting
-- for it is answered. The same script writes back an uncertain outcome (a result spooled while
-- Redis was away): one rule decides both.
--
-- KEYS[1..5] -> the flight keys and the result stream (lib.lua)
-- ARGV[1..11] -> the answer block (lib.lua); the caller is the owner's task
-- ARGV[12] -> ownerToken the result was produced under (decimal)
-- ARGV[13] -> result bytes
-- ARGV[14] -> "1" when the result is compact JSON (events may inline it)
-- ARGV[15] -> resultTTL in ms, ARGV[16] -> fenceTTL in ms
-- ARGV[17..22] (optional: only needed to write back a meta that is gone) -> ownerId, stage,
--   tenant, sessionId, requestKey K, attempts. Without them such a call answers GONE and
--   changes nothing; the caller calls again with them.
-- ARGV[23] (optional, after ARGV[17..22]) -> the shared label of the caller's own event
--   ("owner" when absent or ""; "archive" for an outcome rebuilt from the durable archive)
-- ARGV[24] (optional, after ARGV[23]) -> "1": ask first: answer GONE when the meta is gone,
--   and LAPSED when the caller's own record lets another caller take the flight over
--   (lib.lua takeoverDue), instead of writing; the caller checks a fence kept outside Redis,
--   then calls again without it
-- ARGV[25..] (optional, after ARGV[24]) -> joined tasks, three arguments each: task id, entry
--   ref "<entry id> <task stream>", queuedMs. They are tasks of the same key that the
--   caller's consumer held back instead of acquiring (its in-process followers): they never
--   reached the flight, and are answered with the caller's own task, as followers, whenever
--   the call answers it (once: one that is also a waiter is answered as joined; on ALREADY,
--   one whose entry is no longer pending was answered by the first call and is not again).
--   The reply then ends with one more element: how many joined tasks were answered (0 or all
--   of them; none: the caller acquires them as usual).
--
-- The rule: a result is accepted from the token that owns the flight while it is PENDING,
-- RUNNING, or EXPIRED by that owner's own heartbeat (not yet answered: the attempt ran out,
-- but nobody took over); and, when the meta is gone (lost writes, eviction, a TTL that ran
-- out), from a token the fence admits (lib.lua fenceAdmits). Never from a token below the
-- fence, nor from a run that was cancelled or expired for good.
--
-- Output: { code, status, restored, settled, <answer tail> }
--   GONE        the meta is gone and ARGV[17..22] were not given, or ARGV[24] asks: nothing
--               was done
--   LAPSED      (ARGV[24] asks) the caller's record lets another caller take it over: nothing
--               was done
--   OK          the result is stored (TTL resultTTL), the meta SUCCEEDED (TTL resultTTL); the
--               caller (shared owner) and the parked tasks are answered. restored is 1 when
--               the meta was gone and written anew (the meta records restoredAt).
--   ALREADY     this token's result is stored already (a retry after a lost reply): answered
--               again, nothing else written but the meta's updatedAt (so that a WAIT behind
--               the retry covers the first call); on one node the owner's and joined tasks whose
--               entries are no longer pending were answered by the first call and are not again
--   CANCELLED / EXPIRED   the run was cancelled or expired for good: the caller is answered
--               with that outcome, nothing is stored
--   STALE_TOKEN another token owns the flight: nothing is stored; the caller is answered from
--               the flight's outcome, or parked on it (settled: answered | parked | "" when a
--               larger token was issued but its meta is gone too: the caller acquires again)
--   STATE       the token's own flight is FAILED: nothing written
-- settled says what became of the caller's task: answered, parked or "" (still the caller's).

-- label is the shared label of the caller's own event (ARGV[23]).
local function label()
  local l = V[23]
  if l == nil or l == '' then return 'owner' end
  return l
end

-- compSucceed stores the result and answers the owner's task (with the event body the caller
-- built) and every parked task. meta is the flight (nil on the common path: the caller's
-- body needs none of it); restored: the meta was gone and is written anew.
local function compSucceed(meta, restored, handover)
  local ttl = V[15]
  redis.call('SET', K[2], V[13], 'PX', ttl)
  if restored then
    redis.call('HSET', K[1], 'status', 'SUCCEEDED', 'updatedAt', nowStr, 'resultRef', K[2],
      'inline', V[14], 'restoredAt', nowStr)
  else
    redis.call('HSET', K[1], 'status', 'SUCCEEDED', 'updatedAt', nowStr, 'resultRef', K[2],
      'inline', V[14])
    if handover == '1' or (meta and meta.status == 'EXPIRED') then
      redis.call('HDEL', K[1], 'handover', 'retryable', 'errorType', 'errorCode', 'error')
    end
  end
  if label() ~= 'owner' then redis.call('HSET', K[1], 'shared', label()) end
  redis.call('PEXPIRE', K[1], ttl)
  writeFence(V[12], '', V[16])
  local body, others = V[6], nil
  if body == '' or (V[14] == '1' and #V[13] > num(V[11], 0)) then
    -- The caller's body carries a result larger than other tasks' events may inline (or
    -- there is none): theirs is built here, with resultRef only.
    meta = meta or loadMeta()
    meta.status, meta.inline = 'SUCCEEDED', V[14]
    others = outcomeOf(meta, 'SUCCEEDED', V[13])
    if body == '' then body = others end
  end
  answer(body, label(), nil, others)
  if V[1] ~= 'write' and #out.released > 0 then redis.call('PEXPIRE', K[4], ttl) end
  local r = 0
  if restored then r = 1 end
  return tail({ 'OK', 'SUCCEEDED', r, 'answered' })
end

-- completeCall is the body of complete.
local function completeCall()
  local ask = V[24] == '1'
  local m
  if ask then -- also what takeoverDue judges
    m = redis.call('HMGET', K[1], 'status', 'ownerToken', 'handover', 'heartbeatAt', 'expireAt', 'progressAt', 'policy')
  else
    m = redis.call('HMGET', K[1], 'status', 'ownerToken', 'handover')
  end
  local status = m[1]
  if status and m[2] == V[12] and (status == 'RUNNING' or status == 'PENDING') then
    if ask and takeoverDue(status, m[4], m[5], m[6], m[7]) then return tail({ 'LAPSED', status, 0, '' }) end
    return compSucceed(nil, false, m[3])
  end
  local tok = num(V[12], 0)
  if not status then
    if V[22] == nil or ask then return tail({ 'GONE', '', 0, '' }) end
    local verdict = fenceAdmits(tok, num(V[16], 86400000))
    local meta = { status = 'SUCCEEDED', stage = V[18], tenant = V[19], sessionId = V[20],
      requestKey = V[21], ownerId = V[17], ownerToken = V[12], attempts = V[22] }
    if verdict == 'stale' then return tail({ 'STALE_TOKEN', '', 0, '' }) end
    if verdict == 'c' or verdict == 'x' then
      -- The run was closed and its record is gone: answer the caller with the closing outcome.
      local st, code = 'CANCELLED', 'cancelled'
      if verdict == 'x' then st, code = 'EXPIRED', 'expired' end
      meta.status = st
      answer(outcomeOf(meta, st, nil, code, code, 'the flight was ' .. string.lower(st) .. ' before the result arrived'), label())
      return tail({ st, st, 0, 'answered' })
    end
    redis.call('HSET', K[1], 'stage', meta.stage, 'tenant', meta.tenant, 'sessionId', meta.sessionId,
      'requestKey', meta.requestKey, 'ownerId', meta.ownerId, 'ownerToken', meta.ownerToken,
      'taskId', V[7], 'entry', V[8], 'attempts', meta.attempts, 'createdAt', nowStr,
      'heartbeatAt', nowStr, 'expireAt', nowStr)
    return compSucceed(meta, true, nil)
  end

  if m[2] ~= V[12] then
    return tail({ 'STALE_TOKEN', status, 0, settleCaller(loadMeta()) })
  end
  local meta = loadMeta()
  if status == 'SUCCEEDED' then
    JAgain = true -- a retry after a lost reply: tasks answered then (owner's, joined) are not again
    -- A write of its own, so that a WAIT behind this retry covers the first call's writes,
    -- whichever connection those went out on (replicated durability).
    redis.call('HSET', K[1], 'updatedAt', nowStr)
    answer(outcomeOf(meta, status, redis.call('GET', K[2]) or V[13]), label())
    return tail({ 'ALREADY', status, 0, 'answered' })
  end
  if status == 'CANCELLED' then
    -- Its own token's run was cancelled (an archived cancellation is answered this way too):
    -- the owner's label stays in the meta for a re-acquire after a lost reply.
    if label() ~= 'owner' then redis.call('HSET', K[1], 'shared', label()) end
    answer(failureOf(meta), label())
    return tail({ status, status, 0, 'answered' })
  end
  if status == 'EXPIRED' then
    local f, mark = readFence()
    if mark ~= '' and f == tok then
      answer(failureOf(meta), label())
      return tail({ status, status, 0, 'answered' })
    end
    if ask then return tail({ 'LAPSED', status, 0, '' }) end
    return compSucceed(meta, false, meta.handover)
  end
  return tail({ 'STATE', status, 0, '' })
end

register('complete', function()
  if #V >= 27 then J = 25 end
  local reply = completeCall()
  if J then reply[#reply + 1] = (out and out.joined) or 0 end
  return reply
end)
