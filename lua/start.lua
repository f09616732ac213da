-- start: the owner moves its flight from PENDING to RUNNING and starts the attempt's clock.
-- (Owners that acquire with start set skip it: acquire makes them RUNNING at once.)
--
-- KEYS[1..3] -> the flight keys (lib.lua)
-- ARGV[1] -> ownerToken
--
-- Output: { code, status }
--   OK          the flight is RUNNING (also when it already was: start is idempotent)
--   GONE        no flight: the caller acquires again
--   STALE_TOKEN another owner's token: nothing changed
--   CANCELLED / EXPIRED   the flight ended meanwhile: nothing changed
--   STATE       any other status (second element): nothing changed

register('start', function()
  local m = load(false)
  if not m then return { 'GONE', '' } end
  local status = m.status
  if m.token ~= V[1] then return { 'STALE_TOKEN', status } end
  if status == 'CANCELLED' or status == 'EXPIRED' then return { status, status } end
  if status == 'RUNNING' then return { 'OK', status } end
  if status ~= 'PENDING' then return { 'STATE', status } end

  local _, runningTTL, _, _, failureTTL = pinned(m, nil)
  m.status, m.heartbeatAt, m.startedAt, m.progressAt = 'RUNNING', nowStr, nowStr, ''
  store(m, runningTTL + failureTTL, nil)
  waitersFollow(runningTTL + failureTTL)
  return { 'OK', 'RUNNING' }
end)
