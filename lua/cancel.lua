-- cancel: anyone cancels a flight that may still run the model; its parked tasks are answered
-- CANCELLED at once, the owner's next heartbeat aborts its run and the owner answers its own
-- task. A cancelled key runs no model call until its CANCELLED record expires.
--
-- KEYS[1..4] -> the flight keys and the result stream (lib.lua)
-- ARGV[1..2] -> the answer context and the caller (lib.lua); the canceller has no task of its own
-- ARGV[3] -> reason, a JSON string (free text: the events' error)
-- ARGV[4] -> "<ttl> <fenceTTL>": the TTL of the CANCELLED record and the fence TTL, in ms
--
-- Output: { code, ownerTaskId, reason, status, <answer tail> }
--   OK          the flight is CANCELLED: it was PENDING or RUNNING, or FAILED (retryable) or
--               EXPIRED with attempts left (the next acquire would have run the model); the
--               fence closes the owner's token, so no result of its run is accepted
--   ALREADY     it was cancelled before: nothing changes; reason is the first cancel's, and
--               tasks still parked (a canceller that died before answering them) are answered
--   NOT_FOUND   no flight for this key
--   STATE       the flight already ended (SUCCEEDED, FAILED or EXPIRED for good); status tells
-- reason in the reply is the text, not JSON.

register('cancel', function()
  local ttl, fenceTTL = string.match(V[4], '^(%d+) (%d+)$')
  ttl = num(ttl, 60000)

  local m = load(false)
  if not m then return tail({ 'NOT_FOUND', '', '', '' }) end
  local status = m.status
  local attempts = num(m.attempts, 0)
  local _, _, _, _, _, maxA = pinned(m, nil)

  if status == 'CANCELLED' then
    answer(failureOf(m), 'follower')
    local reason = ''
    if (m.error or '') ~= '' then reason = cjson.decode(m.error) end
    return tail({ 'ALREADY', m.taskId or '', reason, status })
  end
  local open = status == 'PENDING' or status == 'RUNNING' or
    (status == 'FAILED' and has(m, 'r') and (attempts < maxA or has(m, 'f'))) or
    (status == 'EXPIRED' and attempts < maxA)
  if not open then return tail({ 'STATE', m.taskId or '', '', status or '' }) end

  m.status, m.flags = 'CANCELLED', flagged(m.flags, '', 'rh')
  m.errorType, m.errorCode, m.error = '"cancelled"', '"cancelled"', V[3]
  store(m, ttl, nil)
  waitersFollow(ttl)
  -- The fence outlives the cancelled record by the flight's own lifetime, at least.
  writeFence(num(m.token, 0), 'c', fenceTTLOf(m, num(fenceTTL, 86400000)))
  answer(failureOf(m), 'follower')
  return tail({ 'OK', m.taskId or '', cjson.decode(V[3]), status })
end)
