-- acquire: decide atomically who runs the flight of one request key (DESIGN.md section 3).
--
-- KEYS[1..4] -> the flight keys and the result stream (lib.lua)
-- ARGV[1..2] -> the answer context and the caller (lib.lua)
-- ARGV[3] -> line 2 of the record the caller writes as a new owner: its requestKey, stage,
--            tenant, sessionId, policy (pinned: "<lease> <runningTTL> <stall> <resultTTL>
--            <failureTTL> <maxAttempts>"), ownerId, task id and entry, three empty error
--            fields, and the traceparent its model call will have, or ""
-- ARGV[4] -> runningTTL + failureTTL of the caller's policy in ms: the TTL of an active
--            flight's record
-- ARGV[5] -> "<start> <deadline>": start "1" makes an owner RUNNING at once, else it stays
--            PENDING until start; deadline: the caller's, Unix ms (0 = none)
-- ARGV[6] -> "<want result> <maxParked> <fenceTTL>": want result "1" returns the result of
--            RESULT_HIT (in-process callers), "2" only when the events of other tasks inline
--            it (a consumer that answers its key's later duplicates with hit); maxParked: most
--            entries parked on one flight
--            (0 = no cap); fenceTTL in ms: how long the fence outlives the flight's last change
-- A new owner pins the caller's policy in the record, and the flight is judged by the pinned
-- values of its current owner, never by the caller's.
--
-- Output:
--   OWNER:  { 'OWNER', "<reason> <token> <attempts> <now>", <answer tail> }; the owner is the
--           caller, RUNNING (or PENDING), its heartbeat now and its attempt ending at now +
--           runningTTL
--   others: { action, "<reason>\t<token>\t<attempts>\t<now>\t<ownerId>\t<ownerTaskId>\t<status>\t
--           <errorType>\t<errorCode>\t<error>\t<heartbeatAt>\t<lease>\t<expireAt>\t<shared>\t<usage>\t<trace>",
--           result, <answer tail> }
--   (times are Unix ms; the error fields are JSON strings)
--   action: OWNER | FOLLOWER_WAIT | RESULT_HIT | FAILED_FINAL | CANCELLED | EXPIRED | CORRUPT
--   reason: OWNER new | retry | takeover | handover | expired; FOLLOWER_WAIT parked |
--           not_parked | full; EXPIRED deadline_passed or the stored code; the others the
--           stored error code.
--   RESULT_HIT, FAILED_FINAL, CANCELLED and EXPIRED answer the caller's task and every parked
--   task (answer tail); FOLLOWER_WAIT parked moves the caller's entry to the parking consumer.
--   heartbeatAt and lease are the current owner's (a not_parked caller checks again once the
--   lease could have lapsed); expireAt ends the current attempt; now is Redis time in ms;
--   shared is the label of the caller's own event when the call answered it (owner, hit,
--   follower), else ""; usage and trace are the record's (lib.lua): what the owner's call used,
--   and the traceparent of its model-call span.

-- acqOpt holds ARGV[6] parsed, per call: { want, maxParked, fenceTTL, want inline }.
local acqOpt = nil

-- acqOpts returns ARGV[6] parsed.
local function acqOpts()
  if acqOpt == nil then
    local want, maxParked, fenceTTL = string.match(V[6], '^(%d) (%d+) (%d+)$')
    acqOpt = { want == '1', num(maxParked, 0), num(fenceTTL, 86400000), want == '2' }
  end
  return acqOpt[1], acqOpt[2], acqOpt[3], acqOpt[4]
end

-- acqReply replies with the flight as m describes it. The lease is the pinned policy's first
-- field as it stands (formatting a number costs more than cutting it out), and the end of the
-- attempt is said only of a live flight, whose followers check again once it could lapse.
local function acqReply(action, reason, m, result)
  local lease = string.match(m.policy or '', '^(%d+) ') or '5000'
  local want, _, _, inl = acqOpts()
  if not want and not (inl and result and has(m, 'i') and #result <= ctx().inline) then result = nil end
  local shared = ''
  if out ~= nil then shared = out.caller end
  local exp = '0'
  if (m.status == 'RUNNING' or m.status == 'PENDING') and (m.startedAt or '') ~= '' then exp = fmt(expireAt(m)) end
  return tail({ action, reason .. '\t' .. (m.token or '0') .. '\t' .. (m.attempts or '0') .. '\t' .. nowStr .. '\t' ..
    (m.ownerId or '') .. '\t' .. (m.taskId or '') .. '\t' .. (m.status or '') .. '\t' .. (m.errorType or '') .. '\t' ..
    (m.errorCode or '') .. '\t' .. (m.error or '') .. '\t' .. (m.heartbeatAt or '0') .. '\t' .. lease .. '\t' .. exp ..
    '\t' .. shared .. '\t' .. (m.usage or '') .. '\t' .. (m.trace or ''), result or '' })
end

-- ownerReply replies OWNER with reason, token and attempts.
local function ownerReply(reason, tok, attempts)
  return tail({ 'OWNER', reason .. ' ' .. tok .. ' ' .. attempts .. ' ' .. nowStr })
end

-- attemptLine describes the attempt m ran, ended now with outcome (for the flight's attempt
-- log: attempt, token, ownerId, taskId, startedAt, endedAt, outcome, errorCode, error;
-- tab-separated, the error cut to 200 bytes).
local function attemptLine(m, outcome)
  local code, msg = m.errorCode or '', ''
  if code ~= '' then code = cjson.decode(code) end
  if (m.error or '') ~= '' then msg = string.gsub(string.sub(cjson.decode(m.error), 1, 200), '[%c]', ' ') end
  code = string.gsub(code, '[%c]', ' ')
  return table.concat({ m.attempts or '0', m.token or '0', m.ownerId or '', m.taskId or '',
    m.startedAt or '', nowStr, outcome, code, msg }, '\t')
end

-- appendLog returns m's attempt log with line added, keeping the newest 16 entries.
local function appendLog(m, line)
  local lines = {}
  for l in string.gmatch(m.log or '', '[^\30]+') do lines[#lines + 1] = l end
  lines[#lines + 1] = line
  local from = math.max(1, #lines - 15)
  return table.concat(lines, LOG_SEP, from)
end

-- ATTEMPT_OUTCOME is how the previous attempt ended, by the reason a new owner takes over.
local ATTEMPT_OUTCOME = { retry = 'FAILED', takeover = 'LEASE_LOST', handover = 'HANDOVER', expired = 'EXPIRED' }

-- acqHead is the head of a new owner's record with token tok: its header lines.
local function acqHead(status, tok, attempts, flags, createdAt, log)
  local n = nowStr
  return 'f1\t' .. status .. '\t' .. tok .. '\t' .. attempts .. '\t' .. flags .. '\t' .. n .. '\t\t' .. n .. '\t' .. n ..
    '\t\t\t\t' .. createdAt .. '\t\n' .. V[3] .. '\n' .. log .. '\n'
end

-- acqNew makes the caller the owner of a flight that has no record: the common path, one SET
-- with the clock's token unless the fence, which only a clock behind it makes matter, holds a
-- larger one.
local function acqNew(status)
  local tok = nowUsStr
  local f = redis.call('GET', K[3])
  if f then
    local prev = tonumber(string.match(f, '^%d+') or '0') or 0
    if prev <= MAX_TOKEN and prev >= nowMicros() then tok = fmt(prev + 1) end
  end
  redis.call('SET', K[1], acqHead(status, tok, '1', '', nowStr, ''), 'PX', V[4])
  return ownerReply('new', tok, '1')
end

-- acqTakeOver makes the caller the owner of m's flight with a new token, unless its deadline
-- passed. The flight's record goes on (retry, takeover, handover, expired): the previous
-- owner's task waits for its outcome like a parked one, and the attempt log gets a line.
-- Parked entries stay. attempts is a number.
local function acqTakeOver(reason, attempts, m, start)
  local tok = newToken(m)
  local entry = ctx().entry
  local pe = m.entry or ''
  if pe ~= '' and pe ~= entry then
    redis.call('HSETNX', K[2], pe, nowStr .. ' ' .. (m.taskId or ''))
  end
  local log = appendLog(m, attemptLine(m, ATTEMPT_OUTCOME[reason] or reason))
  local status = 'PENDING'
  if start then status = 'RUNNING' end
  local att = fmt(attempts)
  redis.call('SET', K[1], acqHead(status, tok, att, 'm', m.createdAt or nowStr, log), 'PX', V[4])
  -- Tasks parked on the previous record of this flight wait for this owner.
  if redis.call('EXISTS', K[2]) == 1 then
    if entry ~= '' then redis.call('HDEL', K[2], entry) end
    redis.call('PEXPIRE', K[2], V[4])
  end
  return ownerReply(reason, tok, att)
end

-- ownTask reports whether the caller's task is the flight's (last) owner task: its stream
-- entry is the owner's; when either has none (an owner that gave its entry up for a long
-- retry delay), its task id is the owner's.
local function ownTask(m)
  local c = ctx()
  local entry, ownerEntry = c.entry, m.entry or ''
  if entry ~= '' and ownerEntry ~= '' then return entry == ownerEntry end
  return c.task ~= '' and c.task == (m.taskId or '')
end

-- acqFinal answers the caller and every parked task from a stored outcome. The flight's owner
-- task is answered as the owner: as the caller (it acquires again after its run was aborted by
-- a cancel or an expiry, or after the reply of its complete was lost) or as a parked task (an
-- attempt that expired for good, ended by another caller).
local function acqFinal(action, m, result)
  local callerShared = 'follower'
  if ownTask(m) then
    -- The owner's own label: "archive" when its outcome came from the durable archive.
    callerShared = 'owner'
    if has(m, 'a') then callerShared = 'archive' end
  elseif action == 'RESULT_HIT' then
    callerShared = 'hit'
  end
  if action == 'RESULT_HIT' then
    answer(outcomeOf(m, 'SUCCEEDED', result), callerShared, m.entry)
    return acqReply(action, '', m, result)
  end
  if action == 'EXPIRED' then
    -- Answered as expired for good: a late result of the last owner is refused from now on.
    local _, _, fenceTTL = acqOpts()
    local f = readFence() or 0
    local t = num(m.token, 0)
    if f <= t then writeFence(t, 'x', fenceTTLOf(m, fenceTTL)) end
  end
  answer(failureOf(m), callerShared, m.entry)
  local code = m.errorCode or ''
  if code ~= '' then code = cjson.decode(code) end
  return acqReply(action, code, m, nil)
end

-- acqExpireFinal ends a flight whose attempts are spent: its last owner's task is answered
-- with the parked ones, and the fence closes that owner's token.
local function acqExpireFinal(m, code)
  local msg = 'flight ' .. code .. ' after ' .. (m.attempts or '?') .. ' attempts'
  local pe = m.entry or ''
  if pe ~= '' and pe ~= ctx().entry then
    redis.call('HSETNX', K[2], pe, nowStr .. ' ' .. (m.taskId or ''))
  end
  m.status, m.flags = 'EXPIRED', flagged(m.flags, '', 'r')
  m.errorType, m.errorCode, m.error = '"expired"', cjson.encode(code), cjson.encode(msg)
  local _, _, _, _, ttl = pinned(m, nil)
  store(m, ttl, nil)
  redis.call('PEXPIRE', K[2], ttl)
  local _, _, fenceTTL = acqOpts()
  writeFence(num(m.token, 0), 'x', fenceTTLOf(m, fenceTTL))
  return acqFinal('EXPIRED', m, nil)
end

-- acqLate answers only the caller: its deadline passed before it could start or follow.
local function acqLate(m)
  local c = ctx()
  local r = m
  if not r then
    local rk, stage, tenant = string.match(V[3], '^([^\t]*)\t([^\t]*)\t([^\t]*)\t')
    r = { requestKey = rk, stage = stage, tenant = tenant, token = '0', attempts = '0', flags = '' }
  end
  if c.task ~= '' then
    emitBody(c.task, 'owner', c.queued, outcomeOf(r, 'EXPIRED', nil, '"deadline"', '"deadline_passed"',
      '"the task deadline passed before it could start"'))
    answered().caller = 'owner'
  end
  if c.entry ~= '' then
    local o = answered()
    o.acks[#o.acks + 1] = c.entry
    if redis.call('HEXISTS', K[2], c.entry) == 1 then o.released[#o.released + 1] = c.entry end
  end
  return acqReply('EXPIRED', 'deadline_passed', r, nil)
end

-- acqFollow parks the caller's entry on a live flight, or says why it was not parked.
local function acqFollow(m, late)
  if late then return acqLate(m) end
  local c = ctx()
  local entry = c.entry
  if entry == '' or entry == (m.entry or '') then
    return acqReply('FOLLOWER_WAIT', 'not_parked', m, nil)
  end
  if redis.call('HEXISTS', K[2], entry) == 0 then
    local _, maxParked = acqOpts()
    if maxParked > 0 and redis.call('HLEN', K[2]) >= maxParked then
      return acqReply('FOLLOWER_WAIT', 'full', m, nil)
    end
    redis.call('HSET', K[2], entry, nowStr .. ' ' .. c.task)
    local ttl = redis.call('PTTL', K[1])
    if ttl <= 0 then ttl = V[4] end
    redis.call('PEXPIRE', K[2], ttl)
  end
  park()
  return acqReply('FOLLOWER_WAIT', 'parked', m, nil)
end

-- acqRecord reads the record: its text (the first HEAD bytes, or all of it when needed) and
-- its fields; nil when there is none.
local function acqRecord()
  local v = redis.call('GETRANGE', K[1], '0', HEAD_LAST)
  if v == '' then return nil end
  local m = brief(v)
  if m and m.status == 'SUCCEEDED' then return v, m end -- a hit needs no more of it
  m = parse(v, false)
  if not m and #v == HEAD then
    v = redis.call('GET', K[1]) or ''
    m = brief(v)
    if m and m.status == 'SUCCEEDED' then return v, m end
    m = parse(v, false)
  end
  return v, m
end

-- acqResult returns the result of a SUCCEEDED record when the caller needs it: to inline it in
-- the events (it is compact JSON within the caller's cap) or to return it; else nil.
local function acqResult(v, m)
  local want = acqOpts()
  if #v < HEAD then return string.sub(v, m.resultAt) end
  local size = redis.call('STRLEN', K[1]) - m.resultAt + 1
  if want or (has(m, 'i') and size <= ctx().inline) then
    return redis.call('GETRANGE', K[1], m.resultAt - 1, -1)
  end
  return nil
end

register('acquire', function()
  acqOpt = nil
  local start, deadline = true, 0
  if V[5] ~= '1 0' then
    local s, d = string.match(V[5], '^(%d) (%d+)$')
    start, deadline = s == '1', num(d, 0)
  end
  local late = deadline > 0 and nowMs() > deadline
  -- The record is read first, never copied whole when its result is large: a duplicate of a
  -- finished key (a hit) reads it anyway, and a new key costs a read of nothing.
  local v, m = acqRecord()
  if not v then
    if late then return acqLate(nil) end
    local status = 'PENDING'
    if start then status = 'RUNNING' end
    return acqNew(status)
  end
  if not m then
    return acqReply('CORRUPT', 'unreadable', { flags = '', log = '' }, nil)
  end
  local status = m.status
  -- A hit, the common case here, needs none of the numbers below.
  if status == 'SUCCEEDED' then
    return acqFinal('RESULT_HIT', m, acqResult(v, m))
  end
  local attempts = num(m.attempts, 0)
  local pLease, pRunning, pStall, _, _, maxA = pinned(m, nil)
  local now = nowMs()

  if status == 'FAILED' then
    -- An attempt a limiter stopped before its call (free) does not count.
    local free = has(m, 'f')
    if has(m, 'r') and (free or attempts < maxA) then
      -- A retry delay (a provider's Retry-After, the stage's backoff, a limiter's wait)
      -- holds for every task.
      if now < num(m.retryAt, 0) then return acqFollow(m, late) end
      if late then return acqLate(m) end
      if free then return acqTakeOver('retry', attempts, m, start) end
      return acqTakeOver('retry', attempts + 1, m, start)
    end
    return acqFinal('FAILED_FINAL', m, nil)
  end

  if status == 'PENDING' or status == 'RUNNING' then
    if has(m, 'h') then
      if late then return acqLate(m) end
      return acqTakeOver('handover', attempts, m, start)
    end
    local exp = num(m.startedAt, 0) + pRunning
    local code = nil
    if now > exp then
      code = 'running_ttl'
    elseif pStall > 0 and status == 'RUNNING' and now - num(m.progressAt, exp - pRunning) > pStall then
      code = 'stalled'
    end
    if code then
      if attempts < maxA then
        if late then return acqLate(m) end
        return acqTakeOver('expired', attempts + 1, m, start)
      end
      return acqExpireFinal(m, code)
    end
    if now - num(m.heartbeatAt, 0) > pLease then
      if attempts < maxA then
        if late then return acqLate(m) end
        return acqTakeOver('takeover', attempts + 1, m, start)
      end
      return acqExpireFinal(m, 'lease_lost')
    end
    return acqFollow(m, late)
  end

  if status == 'EXPIRED' then
    if attempts < maxA then
      if late then return acqLate(m) end
      return acqTakeOver('expired', attempts + 1, m, start)
    end
    return acqFinal('EXPIRED', m, nil)
  end

  if status == 'CANCELLED' then return acqFinal('CANCELLED', m, nil) end

  return acqReply('CORRUPT', tostring(status), m, nil)
end)

-- hit: answer a duplicate of a key whose flight the caller's consumer completed a moment ago,
-- from that outcome, without the acquire's reading of the whole record (DESIGN.md section 5,
-- "Late duplicates").
--
-- KEYS[1..4] -> the flight keys and the result stream (lib.lua)
-- ARGV[1..2] -> the answer context and the caller (lib.lua)
-- ARGV[3] -> the token the flight completed under (decimal)
-- ARGV[4] -> the caller's event, whole, built by the caller from that outcome
--
-- Output: { 'HIT', <answer tail> } when the record is SUCCEEDED under that token: as acquire's
-- RESULT_HIT, the caller's task has its event, any task still parked on the flight is answered
-- with the same outcome, and their entries are acknowledged. { 'ANSWERED', <answer tail> }
-- (mode write) when the caller's entry is no longer pending: whoever acknowledged it answered
-- it (a consumer that claimed it while this one was paused, or this call made before, whose
-- reply was lost), and nothing is written. { 'MISS', <answer tail> } otherwise: it did
-- nothing, and the caller acquires. A SUCCEEDED record never changes under its token, so the
-- event the caller built is the one acquire would build from it.
local function hitOthers() return eventBody(V[4]) end

register('hit', function()
  local v = redis.call('GETRANGE', K[1], '0', '47')
  if string.find(v, 'f1\tSUCCEEDED\t' .. V[3] .. '\t', 1, true) ~= 1 then return tail({ 'MISS' }) end
  local entry = ctx().entry
  if entry ~= '' and answeredBefore(entry) then return tail({ 'ANSWERED' }) end
  answer(nil, 'hit', nil, hitOthers, V[4])
  return tail({ 'HIT' })
end)
