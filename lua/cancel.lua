-- cancel: anyone cancels a flight that may still run the model; its parked tasks are answered
-- CANCELLED at once, the owner's next heartbeat aborts its run and the owner answers its own
-- task. A cancelled key runs no model call until its CANCELLED record expires.
--
-- KEYS[1..5] -> the flight keys and the result stream (lib.lua)
-- ARGV[1..11] -> the answer block (lib.lua); the canceller has no task of its own
-- ARGV[12] -> reason (free text: the events' error)
-- ARGV[13] -> TTL of the CANCELLED record in ms
-- ARGV[14] -> fenceTTL in ms
--
-- Output: { code, ownerTaskId, reason, status, <answer tail> }
--   OK          the flight is CANCELLED: it was PENDING or RUNNING, or FAILED (retryable) or
--               EXPIRED with attempts left (the next acquire would have run the model); the
--               fence closes the owner's token, so no result of its run is accepted
--   ALREADY     it was cancelled before: nothing changes; reason is the first cancel's, and
--               tasks still parked (a canceller that died before answering them) are answered
--   NOT_FOUND   no flight for this key
--   STATE       the flight already ended (SUCCEEDED, FAILED or EXPIRED for good); status tells

register('cancel', function()
  initAnswers()
  local reason, ttl = V[12], num(V[13], 60000)

  local meta = loadMeta()
  if not meta then return tail({ 'NOT_FOUND', '', '', '' }) end
  local status = meta.status
  local attempts = num(meta.attempts, 0)
  local _, _, _, _, _, maxA = pinned(meta, nil)
  -- The fence outlives the cancelled record by the flight's own lifetime, at least.
  local fenceTTL = fenceTTLOf(meta, num(V[14], 86400000))

  if status == 'CANCELLED' then
    answer(failureOf(meta), 'follower')
    return tail({ 'ALREADY', meta.taskId or '', meta.cancelReason or meta.error or '', status })
  end
  local open = status == 'PENDING' or status == 'RUNNING' or
    (status == 'FAILED' and meta.retryable == '1' and (attempts < maxA or meta.free == '1')) or
    (status == 'EXPIRED' and attempts < maxA)
  if not open then return tail({ 'STATE', meta.taskId or '', '', status or '' }) end

  redis.call('HSET', K[1], 'status', 'CANCELLED', 'updatedAt', nowStr, 'retryable', '0',
    'errorType', 'cancelled', 'errorCode', 'cancelled', 'error', reason, 'cancelReason', reason,
    'handover', '')
  redis.call('PEXPIRE', K[1], ttl)
  if redis.call('EXISTS', K[4]) == 1 then redis.call('PEXPIRE', K[4], ttl) end
  writeFence(num(meta.ownerToken, 0), 'c', fenceTTL)
  meta.status, meta.cancelReason, meta.error = 'CANCELLED', reason, reason
  answer(failureOf(meta), 'follower')
  return tail({ 'OK', meta.taskId or '', reason, status })
end)
