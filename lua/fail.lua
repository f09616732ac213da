-- fail: the owner records that its attempt failed; the flight becomes FAILED. A final failure
-- (not retryable, or no attempt left) answers the owner's task and every parked task; a
-- retryable one leaves them waiting for the next attempt.
--
-- KEYS[1..4] -> the flight keys and the result stream (lib.lua)
-- ARGV[1..2] -> the answer context and the caller (lib.lua); the caller is the owner's task
-- ARGV[3] -> ownerToken
-- ARGV[4] -> "<ask> <retryable> <free> <released> <retryIn> <maxAttempts> <failureTTL>
--            <fenceTTL> <attempts> <label>": ask "1": as complete's (GONE when the record is
--            gone, LAPSED when the caller's own record lets another caller take it over);
--            retryable "1" or "0"; free "1": the attempt never
--            called the model (a limiter made it wait): the failure is retryable, never final,
--            and the next attempt does not count (flag f); released "1": the caller gives its
--            stream entry up (its task waits for the retry in the stage's scheduled set and
--            comes back under a new entry); retryIn ms: a retryable failure's next attempt
--            starts no sooner (the record keeps retryAt, acquires before it park, and it lives
--            retryIn longer), 0: at once; the owner's pinned maxAttempts, failureTTL and fenceTTL in ms; the owner's attempt;
--            label: the shared label of the caller's own event (owner or archive)
-- ARGV[5] -> "<errorType>\t<errorCode>\t<error>", each a JSON string
-- ARGV[6] -> line 2 of the record, to write one that is gone (as acquire's ARGV[3])
--
-- Accepted from the same tokens as complete (complete.lua). Output:
--   { code, "<final>\t<settled>", <answer tail> }
--   OK          the record is FAILED (TTL failureTTL); final 1 when no attempt is left: then the
--               caller (shared owner) and the parked tasks are answered
--   ALREADY     this token's failure is recorded already (a retry): answered again when final
--               (on one node, not the owner's task when its entry is no longer pending); only
--               the record's TTL is written
--   CANCELLED / EXPIRED   the run was cancelled or expired for good: the caller is answered
--   STALE_TOKEN another token owns the flight: the caller is answered from its outcome or
--               parked on it ("" when a larger token's record is gone too)
--   STATE       the token's flight SUCCEEDED: nothing written
--   GONE, LAPSED  (ask) as complete's: nothing written
-- settled: answered | parked | "" (the caller keeps its task, to retry it).

register('fail', function()
  local ask, retryable, free, released, retryIn, maxA, failureTTL, fenceTTL, attempts, label = string.match(V[4],
    '^(%d) (%d) (%d) (%d) (%d+) (%d+) (%d+) (%d+) (%d+) (%a+)$')
  free, released, ask = free == '1', released == '1', ask == '1'
  retryIn, maxA, failureTTL, fenceTTL = num(retryIn, 0), num(maxA, 3), num(failureTTL, 60000), num(fenceTTL, 86400000)
  if free then retryable = '1' end
  label = label or 'owner'
  local etype, ecode, emsg = string.match(V[5], '^([^\t]*)\t([^\t]*)\t([^\t]*)$')
  local tok = V[3]

  local function isFinal(m)
    local _, _, _, _, _, pinnedMax = pinned(m, '0 0 0 0 0 ' .. fmt(maxA))
    if free then return false end
    return retryable ~= '1' or num(m.attempts, 0) >= pinnedMax
  end

  local function record(m)
    m.status = 'FAILED'
    -- A failure that waits for another attempt answers nobody: no call of its run answers the
    -- tasks that park meanwhile (a free one made no call at all), so they link to none.
    if not isFinal(m) then m.trace = '' end
    local add = ''
    if retryable == '1' then add = 'r' end
    if free then add = add .. 'f' end
    if label == 'archive' then add = add .. 'a' end
    m.flags = flagged(m.flags, add, 'hrfa')
    m.errorType, m.errorCode, m.error = etype or '', ecode or '', emsg or ''
    local ttl = failureTTL
    m.retryAt = ''
    if retryable == '1' and retryIn > 0 then
      m.retryAt = fmt(nowMs() + retryIn)
      ttl = ttl + retryIn
    end
    if released then m.entry = '' end
    store(m, ttl, nil)
    waitersFollow(ttl)
    endFence(m, tok, '', fenceTTL)
  end

  local function done(code, m)
    if isFinal(m) then
      answer(failureOf(m), label)
      return tail({ code, '1\tanswered' })
    end
    return tail({ code, '0\t' })
  end

  local m = load(false)
  if not m then
    if ask then return tail({ 'GONE', '0\t' }) end
    local verdict = fenceAdmits(num(tok, 0), fenceTTL)
    if verdict == 'stale' then return tail({ 'STALE_TOKEN', '0\t' }) end
    local rk, stage, tenant, sess, _, owner, task, entry = string.match(V[6],
      '^([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\t]*)\t')
    m = { status = 'FAILED', token = tok, attempts = attempts or '1', flags = 'm', heartbeatAt = nowStr,
      startedAt = nowStr, progressAt = '', progress = '', retryAt = '', createdAt = nowStr, restoredAt = nowStr,
      requestKey = rk or '', stage = stage or '', tenant = tenant or '', sessionId = sess or '',
      policy = '5000 0 0 0 ' .. fmt(failureTTL) .. ' ' .. fmt(maxA), ownerId = owner or '', taskId = task or '',
      entry = entry or '', errorType = '', errorCode = '', error = '', trace = string.match(V[6], '([^\t]*)$') or '',
      log = '' }
    if verdict == 'c' or verdict == 'x' then
      local st, code = 'CANCELLED', '"cancelled"'
      if verdict == 'x' then st, code = 'EXPIRED', '"expired"' end
      answer(outcomeOf(m, st, nil, code, code, '"the flight was ' .. string.lower(st) .. ' before the failure arrived"'), label)
      return tail({ st, '1\tanswered' })
    end
    record(m)
    return done('OK', m)
  end

  local status = m.status
  if m.token ~= tok then
    if status == 'SUCCEEDED' then m = load(true) end
    return tail({ 'STALE_TOKEN', '0\t' .. settleCaller(m) })
  end
  if status == 'FAILED' then
    JAgain = true -- a retry after a lost reply: an owner's task answered then is not again
    local ttl = redis.call('PTTL', K[1]) -- a write, for a WAIT behind it: see complete.lua
    if ttl > 0 then redis.call('PEXPIRE', K[1], ttl) end
    return done('ALREADY', m)
  end
  if status == 'CANCELLED' then
    answer(failureOf(m), label)
    return tail({ status, '1\tanswered' })
  end
  if status == 'EXPIRED' then
    local f, mark = readFence()
    if mark ~= '' and f == num(tok, 0) then
      answer(failureOf(m), label)
      return tail({ status, '1\tanswered' })
    end
    if ask then return tail({ 'LAPSED', '0\t' }) end
    record(m)
    return done('OK', m)
  end
  if status == 'PENDING' or status == 'RUNNING' then
    if ask and takeoverDue(m) then return tail({ 'LAPSED', '0\t' }) end
    record(m)
    return done('OK', m)
  end
  return tail({ 'STATE', '0\t' })
end)
