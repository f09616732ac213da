-- complete: the owner stores its result; the flight becomes SUCCEEDED and every task waiting
-- for it is answered. The same script writes back an uncertain outcome (a result spooled while
-- Redis was away): one rule decides both.
--
-- KEYS[1..4] -> the flight keys and the result stream (lib.lua)
-- ARGV[1..2] -> the answer context and the caller (lib.lua); the caller is the owner's task
-- ARGV[3] -> ownerToken the result was produced under (decimal)
-- ARGV[4] -> result bytes
-- ARGV[5] -> resultTTL in ms
-- ARGV[6] -> the flags the SUCCEEDED record gets: "i" when the result is compact JSON (events
--            may inline it), "a" when the owner's label is "archive" (an outcome rebuilt from
--            the durable archive)
-- ARGV[7] -> "<ask> <fenceTTL> <attempts>": ask "1" answers GONE when the record is gone, and
--            LAPSED when the caller's own record lets another caller take the flight over
--            (lib.lua takeoverDue), instead of writing (the caller checks a fence kept outside
--            Redis, then calls again without it); fenceTTL in ms; the owner's attempt
-- ARGV[8] -> the caller's own SUCCEEDED event, whole (built by the caller), or "" for none
-- ARGV[9] -> the body of the events of the other tasks it answers (every field but taskId,
--            shared and queuedMs), or "" when it is ARGV[8]'s body
-- ARGV[10] -> line 2 of the record, to write one that is gone (as acquire's ARGV[3]), or "":
--            a call that finds the record gone then answers GONE, changes nothing, and is
--            made again with it
-- ARGV[11] -> joined tasks, "<task id>\t<entry ref>\t<queuedMs>" each, separated by newlines,
--            or "". They are tasks of the same key that the caller's consumer held back
--            instead of acquiring (its in-process followers): they never reached the flight,
--            and are answered with the caller's own task, as followers, whenever the call
--            answers it (once: one that is also a waiter is answered as joined; on ALREADY,
--            one whose entry is no longer pending was answered by the first call and is not
--            again). With joined tasks the reply ends with one more element: how many were
--            answered (0 or all of them; none: the caller acquires them as usual).
-- ARGV[12] -> the usage the SUCCEEDED record keeps (lib.lua): "<prompt tokens> <completion
--            tokens> <model>", or "" when the call reported none
--
-- The rule: a result is accepted from the token that owns the flight while it is PENDING,
-- RUNNING, or EXPIRED by that owner's own heartbeat (not yet answered: the attempt ran out,
-- but nobody took over); and, when the record is gone (lost writes, eviction, a TTL that ran
-- out), from a token the fence admits (lib.lua fenceAdmits). Never from a token below the
-- fence, nor from a run that was cancelled or expired for good.
--
-- Output: { code, "<status>\t<restored>\t<settled>", <answer tail> }
--   GONE        the record is gone and ARGV[10] is "", or ARGV[7] asks: nothing was done
--   LAPSED      (ARGV[7] asks) the caller's record lets another caller take it over: nothing
--               was done
--   OK          the flight is SUCCEEDED with the result (TTL resultTTL); the caller (shared
--               owner) and the parked tasks are answered. restored is 1 when the record was
--               gone and written anew (it records restoredAt).
--   ALREADY     this token's result is stored already (a retry after a lost reply): answered
--               again, nothing else written but the record's TTL (so that a WAIT behind the
--               retry covers the first call); on one node the owner's and joined tasks whose
--               entries are no longer pending were answered by the first call and are not again
--   CANCELLED / EXPIRED   the run was cancelled or expired for good: the caller is answered
--               with that outcome, nothing is stored
--   STALE_TOKEN another token owns the flight: nothing is stored; the caller is answered from
--               the flight's outcome, or parked on it (settled: answered | parked | "" when a
--               larger token was issued but its record is gone too: the caller acquires again)
--   STATE       the token's own flight is FAILED: nothing written
-- settled says what became of the caller's task: answered, parked or "" (still the caller's).

-- compReply replies with the call's code and what it settled.
local function compReply(code, status, restored, settled)
  return tail({ code, status .. '\t' .. restored .. '\t' .. settled })
end

-- compOthers is the body of the events of the tasks other than the caller's.
local function compOthers()
  if V[9] ~= '' then return V[9] end
  return eventBody(V[8])
end

-- compLabel is the shared label of the caller's own event.
local function compLabel()
  if string.find(V[6], 'a', 1, true) then return 'archive' end
  return 'owner'
end

-- compAnswer answers the caller's task with its own event and the joined and parked tasks
-- with the others' body.
local function compAnswer(ownerRef)
  local body = nil
  if V[8] == '' then body = compOthers() end
  answer(body, compLabel(), ownerRef, compOthers, V[8])
  if not isWrite() and out and #out.released > 0 then redis.call('PEXPIRE', K[2], V[5]) end
end

-- compSucceed stores the result on m's record, rebuilt whole (the rare paths: an attempt that
-- expired by its own heartbeat, or a record written back), and answers the tasks.
local function compSucceed(m, restored, fenceTTL)
  m.status = 'SUCCEEDED'
  m.flags = flagged(m.flags, V[6], 'hfria')
  m.errorType, m.errorCode, m.error, m.retryAt, m.usage = '', '', '', '', V[12]
  store(m, V[5], V[4])
  if restored or has(m, 'm') then writeFence(V[3], '', fenceTTL) end
  compAnswer(nil)
  local r = '0'
  if restored then r = '1' end
  return compReply('OK', 'SUCCEEDED', r, 'answered')
end

-- compFast answers the owner's task alone, with its own event and the acknowledgement of its
-- entry, the common case in mode write; it answers false, having done nothing, when there are
-- joined or parked tasks to answer too, or no task, so that the whole answer runs instead.
local function compFast()
  if V[11] ~= '' or V[8] == '' or not isWrite() or redis.call('EXISTS', K[2]) == 1 then return false end
  local a = answerCtx()
  local task, entry = string.match(V[2], '^([^\t]*)\t([^\t]*)\t')
  xadd(a.results, a.maxlen, task or '', 1, V[8])
  local id, stream = splitRef(entry or '')
  if id then redis.call('XACK', stream, a.group, id) end
  return true
end

-- completeCall is the body of complete.
local function completeCall()
  local v = read()
  local ask = string.byte(V[7], 1) == 49 -- '1'
  if v then
    -- The common path: the owner's RUNNING record takes the result with one pattern and one SET.
    -- A running record's usage is empty; a record of the release before usage, which has
    -- heartbeatAt there, takes the long path, which rewrites it in this layout.
    local _, e, st, tk, at, fl = string.find(v, '^f1\t(%u+)\t(%d+)\t(%d+)\t(%a*)\t%d*\t\t')
    if tk == V[3] and (st == 'RUNNING' or st == 'PENDING') then
      if ask and takeoverDue(parse(v, false)) then return compReply('LAPSED', st, '0', '') end
      local flags = V[6]
      if fl ~= '' then flags = flagged(fl, V[6], 'hfria') end
      put('f1\tSUCCEEDED\t' .. tk .. '\t' .. at .. '\t' .. flags .. '\t' .. nowStr .. '\t' .. V[12] .. '\t',
        V[4], V[5], string.sub(v, e + 1))
      if string.find(fl, 'm', 1, true) then
        local _, fenceTTL = string.match(V[7], '^(%d) (%d+)')
        writeFence(V[3], '', fenceTTL)
      end
      if compFast() then return { 'OK', 'SUCCEEDED\t0\tanswered', 1, 0 } end
      compAnswer(nil)
      return compReply('OK', 'SUCCEEDED', '0', 'answered')
    end
  end
  local _, fenceTTL, attempts = string.match(V[7], '^(%d) (%d+) (%d+)$')
  fenceTTL = num(fenceTTL, 86400000)
  local tok = num(V[3], 0)
  if not v then
    if V[10] == '' or ask then return compReply('GONE', '', '0', '') end
    local verdict = fenceAdmits(tok, fenceTTL)
    if verdict == 'stale' then return compReply('STALE_TOKEN', '', '0', '') end
    local rk, stage, tenant, sess, pol, owner, task, entry = string.match(V[10],
      '^([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\t]*)\t')
    local m = { status = 'SUCCEEDED', token = V[3], attempts = attempts or '1', flags = 'm', heartbeatAt = nowStr,
      startedAt = nowStr, progressAt = '', progress = '', retryAt = '', createdAt = nowStr, restoredAt = nowStr,
      requestKey = rk or '', stage = stage or '', tenant = tenant or '', sessionId = sess or '', policy = pol or '',
      ownerId = owner or '', taskId = task or '', entry = entry or '', errorType = '', errorCode = '', error = '',
      trace = string.match(V[10], '([^\t]*)$') or '', log = '' }
    if verdict == 'c' or verdict == 'x' then
      -- The run was closed and its record is gone: answer the caller with the closing outcome.
      local st, code = 'CANCELLED', '"cancelled"'
      if verdict == 'x' then st, code = 'EXPIRED', '"expired"' end
      answer(outcomeOf(m, st, nil, code, code, '"the flight was ' .. string.lower(st) .. ' before the result arrived"'),
        compLabel())
      return compReply(st, st, '0', 'answered')
    end
    return compSucceed(m, true, fenceTTL)
  end

  local m = parse(v, true)
  if not m then return compReply('STATE', 'CORRUPT', '0', '') end
  local status = m.status
  if m.token ~= V[3] then
    return compReply('STALE_TOKEN', status, '0', settleCaller(m))
  end
  if status == 'RUNNING' or status == 'PENDING' then
    -- The owner's own run, in a record the common path did not read (the previous layout).
    if ask and takeoverDue(m) then return compReply('LAPSED', status, '0', '') end
    return compSucceed(m, false, fenceTTL)
  end
  if status == 'SUCCEEDED' then
    JAgain = true -- a retry after a lost reply: tasks answered then (owner's, joined) are not again
    -- A write of its own, so that a WAIT behind this retry covers the first call's writes,
    -- whichever connection those went out on (replicated durability).
    local ttl = redis.call('PTTL', K[1])
    if ttl > 0 then redis.call('PEXPIRE', K[1], ttl) end
    compAnswer(nil)
    return compReply('ALREADY', status, '0', 'answered')
  end
  if status == 'CANCELLED' then
    -- Its own token's run was cancelled (an archived cancellation is answered this way too):
    -- the owner's label stays in the record for a re-acquire after a lost reply.
    if compLabel() ~= 'owner' and not has(m, 'a') then
      m.flags = flagged(m.flags, 'a', '')
      store(m, nil, nil)
    end
    answer(failureOf(m), compLabel())
    return compReply(status, status, '0', 'answered')
  end
  if status == 'EXPIRED' then
    local f, mark = readFence()
    if mark ~= '' and f == tok then
      answer(failureOf(m), compLabel())
      return compReply(status, status, '0', 'answered')
    end
    if ask then return compReply('LAPSED', status, '0', '') end
    return compSucceed(m, false, fenceTTL)
  end
  return compReply('STATE', status, '0', '')
end

register('complete', function()
  V[12] = V[12] or ''
  if V[11] ~= '' then
    J = {}
    for id, ref, q in string.gmatch(V[11], '([^\t\n]+)\t([^\t\n]+)\t([^\t\n]+)') do
      J[#J + 1] = { id = id, ref = ref, queued = q }
    end
  end
  local reply = completeCall()
  if J then reply[#reply + 1] = (out and out.joined) or 0 end
  return reply
end)
