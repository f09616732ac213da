-- acquire: decide atomically who runs the flight of one request key (DESIGN.md section 3).
--
-- KEYS[1..5] -> the flight keys and the result stream (lib.lua)
-- ARGV[1..11] -> the answer block (lib.lua); the caller's task and entry are ARGV[7], ARGV[8]
-- ARGV[12] -> ownerId of the caller
-- ARGV[13] -> stage, ARGV[14] -> tenant, ARGV[15] -> sessionId, ARGV[16] -> requestKey K
-- ARGV[17] -> the caller's lease in ms: a heartbeat older than this means the owner is gone
-- ARGV[18] -> the caller's runningTTL in ms: hard cap of one attempt (expireAt = start +
--             runningTTL)
-- ARGV[19] -> the caller's policy as pinned in the meta: "<lease> <runningTTL> <stall>
--             <resultTTL> <failureTTL> <maxAttempts>" (ms, and a count)
-- ARGV[20] -> runningTTL + failureTTL in ms: the TTL of an active flight's meta
-- ARGV[21] -> maxParked: most entries parked on one flight (0 = no cap)
-- ARGV[22] -> fenceTTL in ms: how long the fence outlives the flight's last change
-- ARGV[23] -> "1": an owner starts at once (RUNNING); else it stays PENDING until start
-- ARGV[24] -> the caller's deadline, Unix ms (0 = none)
-- ARGV[25] -> "1": return the result of RESULT_HIT (in-process callers)
-- A new owner pins the caller's policy in the meta, and the flight is judged by the pinned
-- values of its current owner, never by the caller's.
--
-- Output: { action, reason, token, attempts, ownerId, ownerTaskId, status, result, errorType,
--           errorCode, error, heartbeatAt, lease, expireAt, now, shared, <answer tail> }
--   (the numbers are integers or their decimal strings)
--   action: OWNER | FOLLOWER_WAIT | RESULT_HIT | FAILED_FINAL | CANCELLED | EXPIRED | CORRUPT
--   reason: OWNER new | retry | takeover | handover | expired | result_lost;
--           FOLLOWER_WAIT parked | not_parked | full; EXPIRED deadline_passed or the stored
--           code; the others the stored error code.
--   RESULT_HIT, FAILED_FINAL, CANCELLED and EXPIRED answer the caller's task and every parked
--   task (answer tail); FOLLOWER_WAIT parked moves the caller's entry to the parking consumer.
--   heartbeatAt and lease are the current owner's (a not_parked caller checks again once the
--   lease could have lapsed); expireAt ends the current attempt; now is Redis time in ms;
--   shared is the label of the caller's own event when the call answered it (owner, hit,
--   follower), else "".

-- acqReply replies with the flight as meta describes it.
local function acqReply(action, reason, meta, result)
  local lease = pinned(meta, V[19])
  if V[25] ~= '1' then result = nil end
  local shared = ''
  if out ~= nil then shared = out.caller end
  return tail({ action, reason, num(meta.ownerToken, 0), num(meta.attempts, 0), meta.ownerId or '',
    meta.taskId or '', meta.status or '', result or '', meta.errorType or '',
    meta.errorCode or '', meta.error or '', num(meta.heartbeatAt, 0), lease,
    num(meta.expireAt, 0), nowStr, shared })
end

-- attemptLine describes the attempt meta ran, ended now with outcome (for the flight's
-- attempt log: attempt, token, ownerId, taskId, startedAt, endedAt, outcome, errorCode,
-- error; tab-separated, the error cut to 200 bytes).
local function attemptLine(meta, outcome, code)
  local _, running = pinned(meta, V[19])
  local started = meta.startedAt or fmt(num(meta.expireAt, 0) - running)
  local msg = string.gsub(string.sub(meta.error or '', 1, 200), '[\t\r\n]', ' ')
  return table.concat({ meta.attempts or '0', meta.ownerToken or '0', meta.ownerId or '', meta.taskId or '',
    started, nowStr, outcome, code or meta.errorCode or '', msg }, '\t')
end

-- appendLog returns meta's attempt log with line added, keeping the newest 16 lines.
local function appendLog(meta, line)
  local lines = {}
  for l in string.gmatch(meta.attemptLog or '', '[^\n]+') do lines[#lines + 1] = l end
  lines[#lines + 1] = line
  local from = math.max(1, #lines - 15)
  return table.concat(lines, '\n', from)
end

-- ATTEMPT_OUTCOME is how the previous attempt ended, by the reason a new owner takes over.
local ATTEMPT_OUTCOME = { retry = 'FAILED', takeover = 'LEASE_LOST', handover = 'HANDOVER', expired = 'EXPIRED' }

-- acqOwn makes the caller the owner with a new token. inherit: the flight record goes on
-- (retry, takeover, handover, expired) and the previous owner's task waits for its outcome
-- like a parked one; otherwise the record starts afresh (new, result_lost). Parked entries
-- stay. attempts is a decimal string.
local function acqOwn(reason, attempts, meta, inherit)
  local tok = newToken(meta)
  local task, entry = V[7], V[8]
  local createdAt = nowStr
  local log = nil
  if meta then
    if inherit then
      createdAt = meta.createdAt or nowStr
      log = appendLog(meta, attemptLine(meta, ATTEMPT_OUTCOME[reason] or reason, nil))
      local pe = meta.entry or ''
      if pe ~= '' and pe ~= entry then
        redis.call('HSETNX', K[4], pe, nowStr .. ' ' .. (meta.taskId or ''))
      end
    end
    redis.call('DEL', K[1])
  end
  local status = 'PENDING'
  if V[23] == '1' then status = 'RUNNING' end
  local expireAt = nowMs() + tonumber(V[18])
  redis.call('HSET', K[1], 'status', status, 'stage', V[13], 'tenant', V[14],
    'sessionId', V[15], 'requestKey', V[16], 'ownerId', V[12], 'ownerToken', tok,
    'taskId', task, 'entry', entry, 'attempts', attempts, 'createdAt', createdAt,
    'updatedAt', nowStr, 'heartbeatAt', nowStr, 'expireAt', expireAt, 'policy', V[19])
  if log then redis.call('HSET', K[1], 'attemptLog', log) end
  redis.call('PEXPIRE', K[1], V[20])
  -- Tasks parked on the previous record of this flight wait for this owner; a flight that
  -- starts afresh leaves an orphaned waiter record as it is (its entries are still parked,
  -- and a parked-entry check answers them if the record expires first).
  if meta and redis.call('EXISTS', K[4]) == 1 then
    if entry ~= '' then redis.call('HDEL', K[4], entry) end
    redis.call('PEXPIRE', K[4], V[20])
  end
  return tail({ 'OWNER', reason, tok, attempts, V[12], task, status, '', '', '', '', nowStr, V[17],
    expireAt, nowStr, '' })
end

-- ownTask reports whether the caller's task is the flight's (last) owner task: its stream
-- entry is the owner's; when either has none (an owner that gave its entry up for a long
-- retry delay), its task id is the owner's.
local function ownTask(meta)
  local entry, ownerEntry = V[8], meta.entry or ''
  if entry ~= '' and ownerEntry ~= '' then return entry == ownerEntry end
  return V[7] ~= '' and V[7] == (meta.taskId or '')
end

-- acqFinal answers the caller and every parked task from a stored outcome. The flight's owner
-- task is answered as the owner: as the caller (it acquires again after its run was aborted by
-- a cancel or an expiry, or after the reply of its complete was lost) or as a parked task (an
-- attempt that expired for good, ended by another caller).
local function acqFinal(action, meta, result)
  local callerShared = 'follower'
  if ownTask(meta) then
    -- The owner's own label: "archive" when its outcome came from the durable archive.
    callerShared = meta.shared or 'owner'
  elseif action == 'RESULT_HIT' then
    callerShared = 'hit'
  end
  if action == 'RESULT_HIT' then
    answer(outcomeOf(meta, 'SUCCEEDED', result), callerShared, meta.entry)
    return acqReply(action, '', meta, result)
  end
  if action == 'EXPIRED' then
    -- Answered as expired for good: a late result of the last owner is refused from now on.
    local f = readFence() or 0
    local t = num(meta.ownerToken, 0)
    if f <= t then writeFence(t, 'x', fenceTTLOf(meta, V[22])) end
  end
  answer(failureOf(meta), callerShared, meta.entry)
  return acqReply(action, meta.errorCode or '', meta, nil)
end

-- acqExpireFinal ends a flight whose attempts are spent: its last owner's task is answered
-- with the parked ones, and the fence closes that owner's token.
local function acqExpireFinal(meta, code)
  local msg = 'flight ' .. code .. ' after ' .. (meta.attempts or '?') .. ' attempts'
  local pe = meta.entry or ''
  if pe ~= '' and pe ~= V[8] then
    redis.call('HSETNX', K[4], pe, nowStr .. ' ' .. (meta.taskId or ''))
  end
  redis.call('HSET', K[1], 'status', 'EXPIRED', 'updatedAt', nowStr, 'retryable', '0',
    'errorType', 'expired', 'errorCode', code, 'error', msg)
  local _, _, _, _, ttl = pinned(meta, V[19])
  redis.call('PEXPIRE', K[1], ttl)
  redis.call('PEXPIRE', K[4], ttl)
  writeFence(num(meta.ownerToken, 0), 'x', fenceTTLOf(meta, V[22]))
  meta.status, meta.retryable, meta.errorType, meta.errorCode, meta.error = 'EXPIRED', '0', 'expired', code, msg
  return acqFinal('EXPIRED', meta, nil)
end

-- acqIsLate reports whether the caller's deadline passed.
local function acqIsLate()
  local d = V[24]
  return d ~= '0' and d ~= '' and nowMs() > tonumber(d)
end

-- acqLate answers only the caller: its deadline passed before it could start or follow.
local function acqLate(meta)
  local m = meta or { requestKey = V[16], stage = V[13], tenant = V[14] }
  local task, entry = V[7], V[8]
  if task ~= '' then
    emit(task, 'owner', V[9], outcomeOf(m, 'EXPIRED', nil, 'deadline', 'deadline_passed',
      'the task deadline passed before it could start'))
    answered().caller = 'owner'
  end
  if entry ~= '' then
    local o = answered()
    o.acks[#o.acks + 1] = entry
    if redis.call('HEXISTS', K[4], entry) == 1 then o.released[#o.released + 1] = entry end
  end
  return acqReply('EXPIRED', 'deadline_passed', m, nil)
end

-- acqFollow parks the caller's entry on a live flight, or says why it was not parked.
local function acqFollow(meta)
  if acqIsLate() then return acqLate(meta) end
  local entry = V[8]
  if entry == '' or entry == (meta.entry or '') then
    return acqReply('FOLLOWER_WAIT', 'not_parked', meta, nil)
  end
  if redis.call('HEXISTS', K[4], entry) == 0 then
    local maxParked = num(V[21], 0)
    if maxParked > 0 and redis.call('HLEN', K[4]) >= maxParked then
      return acqReply('FOLLOWER_WAIT', 'full', meta, nil)
    end
    redis.call('HSET', K[4], entry, nowStr .. ' ' .. V[7])
    local ttl = redis.call('PTTL', K[1])
    if ttl <= 0 then ttl = V[20] end
    redis.call('PEXPIRE', K[4], ttl)
  end
  park()
  return acqReply('FOLLOWER_WAIT', 'parked', meta, nil)
end

-- acqTakeOver owns an existing flight unless the caller's deadline passed.
local function acqTakeOver(reason, attempts, meta)
  if acqIsLate() then return acqLate(meta) end
  return acqOwn(reason, fmt(attempts), meta, true)
end

register('acquire', function()
  local meta = loadMeta()
  if not meta then
    if acqIsLate() then return acqLate(nil) end
    return acqOwn('new', '1', nil, false)
  end
  local status = meta.status
  local attempts = num(meta.attempts, 0)
  local pLease, pRunning, pStall, _, _, maxA = pinned(meta, V[19])
  local now = nowMs()

  if status == 'SUCCEEDED' then
    local result = redis.call('GET', K[2])
    if result then return acqFinal('RESULT_HIT', meta, result) end
    if acqIsLate() then return acqLate(meta) end
    return acqOwn('result_lost', '1', meta, false)
  end

  if status == 'FAILED' then
    -- An attempt a limiter stopped before its call (free) does not count.
    local free = meta.free == '1'
    if meta.retryable == '1' and (free or attempts < maxA) then
      -- A retry delay (a provider's Retry-After, the stage's backoff, a limiter's wait)
      -- holds for every task.
      if now < num(meta.retryAt, 0) then return acqFollow(meta) end
      if free then return acqTakeOver('retry', attempts, meta) end
      return acqTakeOver('retry', attempts + 1, meta)
    end
    return acqFinal('FAILED_FINAL', meta, nil)
  end

  if status == 'PENDING' or status == 'RUNNING' then
    if meta.handover == '1' then return acqTakeOver('handover', attempts, meta) end
    local expireAt = num(meta.expireAt, 0)
    local code = nil
    if now > expireAt then
      code = 'running_ttl'
    elseif pStall > 0 and status == 'RUNNING' and now - num(meta.progressAt, expireAt - pRunning) > pStall then
      code = 'stalled'
    end
    if code then
      if attempts < maxA then return acqTakeOver('expired', attempts + 1, meta) end
      return acqExpireFinal(meta, code)
    end
    if now - num(meta.heartbeatAt, 0) > pLease then
      if attempts < maxA then return acqTakeOver('takeover', attempts + 1, meta) end
      return acqExpireFinal(meta, 'lease_lost')
    end
    return acqFollow(meta)
  end

  if status == 'EXPIRED' then
    if attempts < maxA then return acqTakeOver('expired', attempts + 1, meta) end
    return acqFinal('EXPIRED', meta, nil)
  end

  if status == 'CANCELLED' then return acqFinal('CANCELLED', meta, nil) end

  return acqReply('CORRUPT', tostring(status), meta, nil)
end)
