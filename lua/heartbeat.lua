-- heartbeat: the owner proves it is alive and, optionally, that its model call made progress.
-- When the record is gone (lost writes, eviction) the owner writes it back, RUNNING under its
-- token, if the fence admits the token: the flight is not a stale token, and a duplicate that
-- arrives meanwhile follows this owner instead of running the model again.
--
-- KEYS[1..3] -> the flight keys (lib.lua)
-- ARGV[1] -> ownerToken
-- ARGV[2] -> progress: an opaque counter from the model adapter ("" = not reported);
--            progressAt moves to now when it differs from the stored value
-- ARGV[3] -> line 2 of the record, to write one that is gone (as acquire's ARGV[3])
-- ARGV[4] -> "<attempts> <expireAt> <fenceTTL> <ask>": the ownership's attempt and when it
--            ends (Unix ms), the fence TTL in ms, and ask "1": when the record is gone and the
--            fence admits the token, answer GONE instead of writing it back, and when the
--            caller's own record lets another caller take the flight over (lib.lua
--            takeoverDue), answer LAPSED instead of renewing it (the caller checks a fence kept
--            outside Redis, then calls again without it)
--
-- Output: { code, status }
--   OK          heartbeatAt = now; keep running
--   RESTORED    the record was gone and is written back; keep running
--   GONE        (ask) the record is gone and would be written back: nothing was done
--   LAPSED      (ask) the caller's record lets another caller take it over: nothing was done
--   CANCELLED   the flight was cancelled: abort the model call
--   EXPIRED     runningTTL is spent or progress stalled (by the owner's pinned stallTimeout):
--               the flight is now EXPIRED; abort, and acquire again
--   STALE_TOKEN another owner holds the flight, or the fence refuses the token: abort
--   STATE       any other status (second element)

register('heartbeat', function()
  local tok = V[1]
  local attempts, expire, fenceTTL, ask = string.match(V[4], '^(%d+) (%d+) (%d+) (%d)$')
  expire, fenceTTL, ask = num(expire, 0), num(fenceTTL, 86400000), ask == '1'

  local m = load(false)
  if not m then
    local verdict = fenceAdmits(num(tok, 0), fenceTTL)
    if verdict == 'c' then return { 'CANCELLED', 'CANCELLED' } end
    if verdict == 'x' then return { 'EXPIRED', 'EXPIRED' } end
    if verdict ~= 'ok' or nowMs() > expire then return { 'STALE_TOKEN', '' } end
    if ask then return { 'GONE', '' } end -- the caller asks a durable fence first
    local policy = string.match(V[3], '^[^\t]*\t[^\t]*\t[^\t]*\t[^\t]*\t([^\t]*)\t')
    local _, running, _, _, failure = pinned({ policy = policy }, nil)
    local n = nowStr
    redis.call('SET', K[1], 'f1\tRUNNING\t' .. tok .. '\t' .. attempts .. '\tm\t' .. n .. '\t\t' .. n .. '\t' ..
      fmt(expire - running) .. '\t' .. n .. '\t' .. V[2] .. '\t\t' .. n .. '\t' .. n .. '\n' .. V[3] .. '\n\n',
      'PX', fmt(expire - nowMs() + failure))
    writeFence(tok, '', fenceTTL)
    return { 'RESTORED', 'RUNNING' }
  end
  local status = m.status
  if m.token ~= tok then return { 'STALE_TOKEN', status } end
  if status == 'CANCELLED' or status == 'EXPIRED' then return { status, status } end
  if status ~= 'PENDING' and status ~= 'RUNNING' then return { 'STATE', status } end
  if ask and takeoverDue(m) then return { 'LAPSED', status } end

  local _, pRunning, pStall, _, pFailure = pinned(m, nil)
  local exp = num(m.startedAt, 0) + pRunning
  local progressAt = num(m.progressAt, exp - pRunning)
  if V[2] ~= '' and V[2] ~= m.progress then
    progressAt = nowMs()
    m.progress, m.progressAt = V[2], nowStr
  end
  m.heartbeatAt = nowStr

  local code = nil
  if nowMs() > exp then
    code = 'running_ttl'
  elseif pStall > 0 and status == 'RUNNING' and nowMs() - progressAt > pStall then
    code = 'stalled'
  end
  if code then
    m.status, m.flags = 'EXPIRED', flagged(m.flags, 'r', '')
    m.errorType, m.errorCode = '"expired"', '"' .. code .. '"'
    m.error = '"owner heartbeat found the flight ' .. code .. '"'
    store(m, pFailure, nil)
    waitersFollow(pFailure)
    return { 'EXPIRED', 'EXPIRED' }
  end
  store(m, nil, nil)
  return { 'OK', status }
end)
